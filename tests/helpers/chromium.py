"""A headless Chromium driven by Selenium: the tests' ``browser`` fixture (conftest.py) starts it with the functions of
docs/pictures/serve_page.py (what draws the serve page's pictures in docs/), loaded by path: one way to start it, and
no tool imports the tests. The profile and temporary files sit in a short path: Chromium's singleton socket lives
there, and a Unix socket's path holds at most 107 bytes (a test's own tmp_path under pytest-xdist made it 118)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "serve_page", Path(__file__).resolve().parents[2] / "docs" / "pictures" / "serve_page.py"
)
_serve_page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_serve_page)

missing = _serve_page.chromium_missing
"""What is missing to start Chromium (the reason, with what to install), or None."""
start = _serve_page.start_chromium
"""``start(scratch, width=1000, height=900)``: a headless Chromium (a WebDriver) whose profile is in ``scratch``."""
submit = _serve_page.submit
"""``submit(browser, url, fields)``: the page opened, each field typed, submitted; the element showing the answer."""
