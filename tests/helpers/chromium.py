"""A headless Chromium driven by Selenium: the tests' ``browser`` fixture (conftest.py) starts it here
(docs/pictures/serve_page.py, for the serve page's pictures in docs/, starts its own: no tool imports the tests)."""

import os
import shutil
from pathlib import Path


def missing() -> str | None:
    """What is missing to start Chromium (the reason, with what to install), or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        return "Chromium and ChromeDriver are not installed (Debian: apt-get install chromium chromium-driver)"
    return None


def start(scratch: Path, width: int = 1000, height: int = 900):
    """A headless Chromium (a WebDriver) whose profile and temporary files sit in ``scratch``, a directory with a
    short path: Chromium's singleton socket lives there, and a Unix socket's path holds at most 107 bytes (a test's
    own tmp_path under pytest-xdist made it 118, and Chromium exited)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--lang=zh-CN",
        f"--user-data-dir={Path(scratch) / 'profile'}",
    ):
        options.add_argument(flag)
    service = Service(shutil.which("chromedriver"), env={**os.environ, "TMPDIR": str(scratch)})
    return webdriver.Chrome(service=service, options=options)
