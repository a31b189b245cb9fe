"""A real Chromium driven through chromedriver (Debian's chromium-driver, python3-selenium) for the
report tests: open a page, type, hover, drag, read the DOM, and fail on any JavaScript error."""

import os
import shutil

import pytest

from headless_chromium import HEADLESS_FLAGS

# Console lines the browser itself writes about things that are not the page's (none so far).
_NOT_THE_PAGE = ("favicon.ico",)


class Page:
    """One Chromium window (1280 x 1000 by default). ``open`` loads a URL; ``errors`` are the
    console errors and uncaught exceptions of every page opened since the last ``errors`` call
    (``check`` asserts there are none)."""

    def __init__(self, tmp_path, width=1280, height=1000):
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        driver = shutil.which("chromedriver")
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError:
            pytest.skip("SKIPPED: python3-selenium is not installed (scripts/setup.sh)")
        if binary is None or driver is None:
            pytest.skip("SKIPPED: chromium or chromium-driver is not installed (scripts/setup.sh)")
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in (
            *HEADLESS_FLAGS,
            "--disable-dev-shm-usage",
            f"--window-size={width},{height}",
            f"--user-data-dir={tmp_path / 'selenium-profile'}",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # Under `make sanitize` LD_PRELOAD holds libasan, which chromedriver and Chromium abort
        # under: the browser runs without it (the page's server, the code tested, keeps it).
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        self.driver = webdriver.Chrome(service=Service(driver, env=env), options=options)
        self.driver.set_page_load_timeout(120)
        self.driver.set_script_timeout(60)

    def open(self, url):
        if not url.startswith(("http://", "https://", "file://", "about:")):
            url = "file://" + str(url)
        self.driver.get(url)
        return self

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, script, timeout=10.0, *args):
        """Polls `script` (returning a value) until it is truthy; returns it, or fails."""
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(
            lambda d: d.execute_script(script, *args)
        )

    def type(self, selector, text):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        box = self.driver.find_element(By.CSS_SELECTOR, selector)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.BACKSPACE)
        if text:
            box.send_keys(text)

    def select(self, selector, value):
        """Picks the option of a <select> by its value (a change event, as a user's pick)."""
        from selenium.webdriver.support.ui import Select

        Select(self.element(selector)).select_by_value(value)

    def click(self, selector):
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, selector).click()

    def element(self, selector):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def hover(self, selector, fx, fy=0.3):
        """Moves the real mouse to the fractions (fx, fy) of the element's box."""
        from selenium.webdriver.common.action_chains import ActionChains

        el = self.element(selector)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        w, h = el.size["width"], el.size["height"]
        ActionChains(self.driver).move_to_element_with_offset(
            el, int(w * (fx - 0.5)), int(h * (fy - 0.5))
        ).perform()

    def drag(self, selector, fx0, fx1, fy=0.5):
        """Drags the mouse across the element from fraction fx0 to fx1 of its width (a zoom)."""
        from selenium.webdriver.common.action_chains import ActionChains

        el = self.element(selector)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        w, h = el.size["width"], el.size["height"]
        y = int(h * (fy - 0.5))
        chain = ActionChains(self.driver)
        chain.move_to_element_with_offset(el, int(w * (fx0 - 0.5)), y).click_and_hold()
        chain.move_by_offset(int(w * (fx1 - fx0) / 2), 0)
        chain.move_by_offset(int(w * (fx1 - fx0) / 2), 0).release().perform()

    def errors(self):
        """Console errors and uncaught exceptions since the last call (SEVERE log entries)."""
        found = []
        for entry in self.driver.get_log("browser"):
            if entry["level"] != "SEVERE":
                continue
            if any(s in entry["message"] for s in _NOT_THE_PAGE):
                continue
            found.append(entry["message"])
        return found

    def check(self):
        errors = self.errors()
        assert not errors, errors

    def close(self):
        self.driver.quit()


@pytest.fixture
def page(tmp_path):
    """A Chromium window; at the end of the test, any JavaScript error of any page it opened
    fails the test."""
    p = Page(tmp_path)
    try:
        yield p
        p.check()
    finally:
        p.close()
