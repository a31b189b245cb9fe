"""`make demo` (issue 23, row 14): configuring with the Makefile's flags warns about nothing, and
the README says how long the demo and the full build take (its sample output: test_docs.py)."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO


def _makefile_cmake_flags():
    result = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "--eval",
            "print-flags: ; @echo $(CMAKE_FLAGS)",
            "print-flags",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


@pytest.mark.slow
def test_configuring_with_the_makefiles_flags_warns_about_nothing(tmp_path):
    if shutil.which("cmake") is None or shutil.which("make") is None:
        pytest.skip("cmake or make is not installed")
    flags = _makefile_cmake_flags()
    assert any(f.startswith("-DPython_EXECUTABLE=") for f in flags)
    result = subprocess.run(
        ["cmake", "-S", REPO, "-B", str(tmp_path / "build"), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        # Under `make sanitize` LD_PRELOAD holds libasan: the compilers cmake tries would run
        # with it and fail to identify themselves.
        env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "CMake Warning" not in output and "not used by the project" not in output, output


def test_setup_py_passes_no_unused_cmake_variable():
    text = open(os.path.join(REPO, "setup.py")).read()
    assert "-DPYTHON_EXECUTABLE" not in text  # pybind11 finds Python through Python_EXECUTABLE.


def test_readme_states_how_long_the_demo_takes():
    text = open(os.path.join(REPO, "README.md")).read()
    assert re.search(r"`make demo` takes about \d+ s", text), "README: say how long make demo takes"


def test_make_demo_is_quiet_when_nothing_changed():
    """Issue 34 item 13: with nothing to rebuild, `make demo` prints the quick start's output
    and the command that runs it, no make directory lines and no "Built target" lines."""
    if shutil.which("make") is None or not os.path.exists(
        os.path.join(REPO, "build", "CMakeCache.txt")
    ):
        pytest.skip("make is not installed, or build/ is not configured")
    # As a user's shell runs it: not as a sub-make of `make test` (which prints its own
    # "Entering directory" lines).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    subprocess.run(
        ["make", "demo"], cwd=REPO, env=env, check=True, capture_output=True, timeout=900
    )
    done = subprocess.run(
        ["make", "demo"],  # As the README prints it.
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    noise = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "Entering directory" in line or "Leaving directory" in line or "Built target" in line
    ]
    assert noise == [], noise
    assert done.stdout.splitlines()[0].endswith("examples/quickstart.py build/demo")
