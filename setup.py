"""Builds the xdl_trace wheel: CMake compiles the C++ core and the _core extension (build_ext).

    python3 -m pip install --no-build-isolation .

Works offline with Debian's setuptools/wheel. From a checkout already built by `make build` (or
`make demo`) for this interpreter, the wheel takes that build's _core (brought up to date with
`cmake --build build --target _core`: seconds when nothing changed) instead of building again.
Environment:
  XDL_TRACE_BUILD_DIR   where setuptools and CMake build (default: <repo>/build-py); a
                        persistent directory makes re-installs incremental. Setting it (or
                        XDL_TRACE_CMAKE_ARGS) builds there, never reusing <repo>/build.
  XDL_TRACE_CMAKE_ARGS  extra CMake arguments (e.g. -DXDL_TRACE_BUILD_PLUGINS=OFF).
  XDL_TRACE_JOBS        parallel build jobs (default: CPU count).
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.abspath(os.environ.get("XDL_TRACE_BUILD_DIR", os.path.join(ROOT, "build-py")))


def _same_interpreter(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def reusable_build():
    """<repo>/build when `make build` configured it for this interpreter (a venv made from it
    included) and no build option was given, else None."""
    if "XDL_TRACE_BUILD_DIR" in os.environ or "XDL_TRACE_CMAKE_ARGS" in os.environ:
        return None
    build = os.path.join(ROOT, "build")
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as cache:
            entries = dict(
                line.rstrip("\n").split("=", 1) for line in cache if "=" in line and ":" in line
            )
    except OSError:
        return None
    python = entries.get("Python_EXECUTABLE:UNINITIALIZED") or entries.get(
        "Python_EXECUTABLE:FILEPATH"
    )
    output = entries.get("XDL_TRACE_PYTHON_OUTPUT_DIR:PATH")
    base = getattr(sys, "_base_executable", sys.executable)  # A venv's interpreter.
    if (
        not python
        or not _same_interpreter(python, base)
        and not _same_interpreter(python, sys.executable)
    ):
        return None
    if output is None or os.path.realpath(output) != os.path.join(ROOT, "xdl_trace"):
        return None
    return build


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures the project with tests and examples off, builds it, and copies the _core
    module, the protoc-generated _proto/*_pb2.py modules, tools/read_trace.py's descriptor set
    and the device-tracer plugins it built (e.g. CUPTI, where CUDA is present) into the wheel:
    _core finds built-in plugins in the plugins/ folder beside itself (dladdr), with no path
    into this build compiled in."""

    def build_extension(self, ext):
        ext_path = os.path.abspath(self.get_ext_fullpath(ext.name))
        package_dir = os.path.dirname(ext_path)
        reused = reusable_build()
        if reused is not None:
            print(f"xdl_trace: reusing the build in {reused} (cmake --build --target _core)")
            subprocess.run(["cmake", "--build", reused, "--target", "_core"], check=True)
            self.copy_outputs(os.path.join(ROOT, "xdl_trace"), reused, ext_path, package_dir)
            return
        staging = os.path.join(BUILD_DIR, "cmake-out")
        cmake_dir = os.path.join(BUILD_DIR, "cmake")
        os.makedirs(staging, exist_ok=True)
        args = [
            "cmake",
            "-S",
            ROOT,
            "-B",
            cmake_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DXDL_TRACE_BUILD_TESTS=OFF",
            "-DXDL_TRACE_BUILD_EXAMPLES=OFF",
            "-DXDL_TRACE_BUILD_PYTHON=ON",
            # The installed _core finds plugins in plugins/ beside itself, never in this build.
            "-DXDL_TRACE_BUILD_TREE_PLUGIN_FALLBACK=OFF",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DXDL_TRACE_PYTHON_OUTPUT_DIR={staging}",
        ] + shlex.split(os.environ.get("XDL_TRACE_CMAKE_ARGS", ""))
        jobs = os.environ.get("XDL_TRACE_JOBS", str(os.cpu_count() or 1))
        subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", cmake_dir, "-j", jobs], check=True)
        self.copy_outputs(staging, cmake_dir, ext_path, package_dir)

    @staticmethod
    def copy_outputs(staging, cmake_dir, ext_path, package_dir):
        """Copies what the build put in `staging` (its Python output folder) and the plugins it
        built in `cmake_dir`/plugins into the wheel's package folder."""
        built = [f for f in os.listdir(staging) if f.startswith("_core.") and f.endswith(".so")]
        if not built:
            raise RuntimeError(f"xdl_trace: CMake did not produce _core in {staging}")
        os.makedirs(package_dir, exist_ok=True)
        shutil.copy2(os.path.join(staging, built[0]), ext_path)
        generated = os.path.join(staging, "_proto")
        modules = [f for f in os.listdir(generated) if f.endswith("_pb2.py")]
        if not modules:
            raise RuntimeError(f"xdl_trace: CMake did not produce the _pb2 modules in {generated}")
        os.makedirs(os.path.join(package_dir, "_proto"), exist_ok=True)
        for name in modules:
            shutil.copy2(os.path.join(generated, name), os.path.join(package_dir, "_proto", name))
        # The descriptor set tools/read_trace.py reads its messages from, beside the script.
        protoset = os.path.join(staging, "tools", "xdl_trace.protoset")
        if not os.path.exists(protoset):
            raise RuntimeError(f"xdl_trace: CMake did not produce {protoset}")
        os.makedirs(os.path.join(package_dir, "tools"), exist_ok=True)
        shutil.copy2(protoset, os.path.join(package_dir, "tools"))
        plugins = os.path.join(cmake_dir, "plugins")
        if os.path.isdir(plugins):
            dest = os.path.join(package_dir, "plugins")
            os.makedirs(dest, exist_ok=True)
            for name in os.listdir(plugins):
                if name.endswith(".so"):
                    shutil.copy2(os.path.join(plugins, name), dest)


os.makedirs(BUILD_DIR, exist_ok=True)
setup(
    ext_modules=[CMakeExtension("xdl_trace._core")],
    cmdclass={"build_ext": CMakeBuild},
    options={
        "build": {"build_base": BUILD_DIR},
        "egg_info": {"egg_base": BUILD_DIR},
    },
)
