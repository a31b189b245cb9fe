"""Headless Chromium for the report tests: a page's DOM after its scripts ran, and screenshots."""

import os
import shutil
import subprocess

import pytest


# The flags every headless Chromium of the tests runs with (browser.py's selenium window too).
HEADLESS_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class Chromium:
    """The system's Chromium with a profile of its own under `tmp_path`; skips the test
    (reported) where none is installed (scripts/setup.sh installs it)."""

    def __init__(self, tmp_path):
        self.binary = next(
            (
                shutil.which(n)
                for n in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(n)
            ),
            None,
        )
        if self.binary is None:
            pytest.skip(
                "SKIPPED: chromium is not installed (scripts/setup.sh): the page was not rendered"
            )
        self._common = [
            self.binary,
            *HEADLESS_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
        ]
        # The browser is not our code: under `make sanitize` it must not get libasan preloaded.
        self._env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}

    def run(self, page, *flags):
        return subprocess.run(
            self._common + list(flags) + ["file://" + str(page)],
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env,
        )

    def dom(self, page, window="1280,2000"):
        """The page's DOM once its scripts ran."""
        return self.run(page, f"--window-size={window}", "--dump-dom").stdout

    def screenshot(self, page, png, window="1280,2000"):
        """Renders `page` into `png`; the lines of the browser's console (errors included)."""
        done = self.run(page, f"--screenshot={png}", f"--window-size={window}")
        assert done.returncode == 0, done.stderr[-2000:]
        return [l for l in done.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
