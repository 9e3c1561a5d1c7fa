"""Headless Chromium through selenium for the operator pages' browser tests and screenshots.

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``;
.ci/run installs both). The flags suit a closed network: no first-run, sync, component
updates or background requests, no QUIC, and a fresh profile per browser.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


class BrowserMissing(RuntimeError):
    """chromium or chromedriver is not installed (names the Debian package)."""


def binaries() -> tuple[str, str]:
    """The chromium and chromedriver executables, or BrowserMissing naming the package."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None:
        raise BrowserMissing("chromium is not installed (apt-get install chromium)")
    if driver is None:
        raise BrowserMissing("chromedriver is not installed (apt-get install chromium-driver)")
    return chromium, driver


@contextmanager
def chrome(
    chromium: str | None = None,
    chromedriver: str | None = None,
    *,
    width: int = 1440,
    height: int = 1200,
    page_load_timeout: float = 60.0,
) -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile directory, quit and removed on exit."""
    if chromium is None or chromedriver is None:
        chromium, chromedriver = binaries()
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        driver.set_page_load_timeout(page_load_timeout)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def full_page_screenshot(driver: WebDriver, path: Path, width: int = 1440) -> Path:
    """A PNG of the whole page (the window grown to the document's height first)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, min(max(height + 40, 600), 8000))
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path
