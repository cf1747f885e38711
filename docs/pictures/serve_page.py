"""What ``page_pictures.py`` drives: ``python -m ernie_ft serve`` in a process of its own on a port the system
gives, and its page in a headless Chromium (Selenium) with a text typed in and submitted.

The browser tests (tests/test_serve.py) start Chromium with ``chromium_missing`` and ``start_chromium`` from here
(tests/helpers/chromium.py loads this file by path); a tool beside the docs does not import the tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVING = re.compile(r"^serving .* on (http://127\.0\.0\.1:\d+)/$", re.MULTILINE)


def chromium_missing() -> str | None:
    """What is missing to start Chromium (the reason, with what to install), or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        return "Chromium and ChromeDriver are not installed (Debian: apt-get install chromium chromium-driver)"
    return None


def start_chromium(scratch: Path, width: int = 1000, height: int = 900):
    """A headless Chromium (a WebDriver) whose profile and temporary files sit in ``scratch``, a short path:
    Chromium's singleton socket lives there, and a Unix socket's path holds at most 107 bytes."""
    import os

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.add_argument("--lang=zh-CN")
    options.add_argument(f"--user-data-dir={Path(scratch) / 'profile'}")
    service = Service(shutil.which("chromedriver"), env={**os.environ, "TMPDIR": str(scratch)})
    return webdriver.Chrome(service=service, options=options)


class Server:
    """``serve --model MODEL --port 0`` with its output in ``work/serve.log``; ``url`` once it answers /readyz."""

    def __init__(self, model: Path, work: Path):
        self.url = None
        self.log_path = Path(work) / "serve.log"
        self.log = open(self.log_path, "w")
        command = [sys.executable, "-m", "ernie_ft", "serve", "--model", str(model), "--port", "0", "--device", "cpu"]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> str:
        """The server's address once /readyz answers 200; SystemExit with its log if it exits or ``timeout`` ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}:\n{self.output()}")
            found = SERVING.search(self.output())
            if found:
                try:
                    with urllib.request.urlopen(found[1] + "/readyz", timeout=2) as answer:
                        if answer.status == 200:
                            self.url = found[1]
                            return self.url
                except OSError:
                    pass  # still warming up
            time.sleep(0.1)
        raise SystemExit(f"serve was not ready after {timeout:.0f} s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def submit(browser, url: str, fields: dict):
    """Open the page at ``url``, type each ``fields`` value into its text area, submit, and wait for the answer;
    returns the element that shows it (the result, or the error)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    wait = WebDriverWait(browser, 60)
    form = wait.until(ready.visibility_of_element_located((By.ID, "form")))
    for name, text in fields.items():
        area = browser.find_element(By.ID, f"field-{name}")
        area.clear()
        area.send_keys(text)
    form.find_element(By.ID, "submit").click()
    return wait.until(ready.visibility_of_element_located((By.CSS_SELECTOR, "#result[data-kind], #error")))
