"""A real headless Chromium for the dashboard's tests: Debian's ``chromium`` driven through its
``chromedriver`` by selenium.

Run as root with apt-get, the tests install both when they are missing (:mod:`aptkit`); elsewhere a machine
without them fails these tests with the command that installs them (a page that was not rendered proves
nothing).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from aptkit import apt_install, can_install

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: Without the network switches Chromium dials Google's hosts at every start, which a closed network refuses.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--window-size=1400,1000")


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium session with an empty profile of its own, quit at the end."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing and can_install():
        apt_install("chromium", "chromium-driver")
        missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    assert not missing, (f"{', '.join(missing)} missing: the dashboard's tests drive Debian's Chromium; "
                         "install it with  apt-get install -y chromium chromium-driver  (as root the tests do)")
    profile = tempfile.mkdtemp(prefix="rocketmesh-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Browser:
    """A Chromium session on one dashboard: open pages, read them, fill forms, keep screenshots."""

    def __init__(self, driver: WebDriver, base_url: str, shots: Path) -> None:
        self.driver = driver
        self.base_url = base_url
        self.shots = shots
        shots.mkdir(parents=True, exist_ok=True)

    def open(self, path: str) -> Browser:
        self.driver.get(self.base_url + path)
        return self

    def shot(self, name: str) -> Path:
        """A screenshot of the whole page as it is now, ``<shots>/<name>.png``."""
        path = self.shots / f"{name}.png"
        height = self.driver.execute_script("return document.body.scrollHeight")
        self.driver.set_window_size(1400, max(1000, int(height) + 40))
        self.driver.save_screenshot(str(path))
        return path

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text

    def has(self, css: str) -> bool:
        try:
            self.find(css)
        except NoSuchElementException:
            return False
        return True

    def fill(self, fields: dict[str, str]) -> None:
        """Type into inputs by CSS selector, replacing what they held."""
        for css, value in fields.items():
            el = self.find(css)
            el.clear()
            el.send_keys(value)

    def submit(self, css: str, accept: bool = True, timeout_s: float = 30) -> None:
        """Click the button ``css``, answering a confirmation dialog with ``accept``, and (when it was sent) wait
        until the page it leads to has replaced this one."""
        page = self.find("html")
        self.find(css).click()
        asked = False
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                alert = self.driver.switch_to.alert
            except NoAlertPresentException:
                if not self._is_stale(page):
                    time.sleep(0.05)
                    continue
                break
            asked = True
            alert.accept() if accept else alert.dismiss()
            break
        if asked and not accept:
            return
        WebDriverWait(self.driver, timeout_s).until(lambda _: self._is_stale(page))
        WebDriverWait(self.driver, timeout_s).until(
            lambda d: d.execute_script("return document.readyState") == "complete")

    @staticmethod
    def _is_stale(element: WebElement) -> bool:
        """True once ``element``'s page has been replaced (Chromium says so as a stale reference or, caught
        mid-navigation, as a node that no longer belongs to the document)."""
        try:
            element.is_enabled()
        except WebDriverException:
            return True
        return False

    def table(self, css: str) -> list[list[str]]:
        """The body rows of the table ``css`` as cell texts."""
        return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")] for tr in self.all(f"{css} tbody tr")]

    def until(self, check: Callable[[], Any], timeout_s: float = 20, what: str = "the page",
              reload: bool = True) -> Any:
        """Reload (when ``reload``) until ``check()`` returns something true, which is returned."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = check()
            except WebDriverException:
                value = None  # the page was being replaced under the check (a reload): look again
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} not shown within {timeout_s} s; page:\n{self.driver.page_source[:3000]}")
            time.sleep(0.3)
            if reload:
                self.driver.refresh()
