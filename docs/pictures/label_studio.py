"""Label Studio showing ernie_ft's pre-annotations, for docs/annotation.md: docs/label-studio-classify.png (a
sentiment classifier's choice) and docs/label-studio-ner.png (an NER tagger's regions).

    python docs/pictures/label_studio.py [--work DIR] [--output-dir docs]

Two tiny models (``scratch:2x64``) train for a few seconds on the sample files ``data/sentiment_train.tsv`` and
``data/ner_train.jsonl``; their predictions are what such small models make, not a trained ERNIE's. Label Studio
1.23.2 starts from the venv ``.venv-label-studio`` (``scripts/test.sh`` makes it) on a copy of a data directory whose
database was made once (``template``); each model is served with ``python -m ernie_ft serve`` and connected as the ML
backend of a project with its own Chinese tag names, the project's texts imported and "Retrieve predictions" run
through Label Studio's API; then a headless Chromium (``serve_page.py`` beside this file) logs in, opens the first
task and saves the screenshot. Needs Chromium, ChromeDriver and selenium, as the browser tests do.

The tests' Label Studio (tests/helpers/label_studio.py) loads this file by path for the same venv, account,
environment and template: one way to start it, and no tool imports the tests.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-label-studio"
LABEL_STUDIO = VENV / "bin" / "label-studio"
TEMPLATE = VENV / "template"
"""A data directory with Label Studio's database made and the account (``ACCOUNT``, ``TOKEN``) in it."""
USER, PASSWORD = "tester@example.com", "ernie-ft-test"
TOKEN = "ernie-ft-test-token-0123456789"
ACCOUNT = ["--username", USER, "--password", PASSWORD, "--user-token", TOKEN]
QUIET = {  # no calls out of the machine: the version check on PyPI, Sentry's error reports, analytics
    "LATEST_VERSION_CHECK": "false",
    "SENTRY_DSN": "",
    "FRONTEND_SENTRY_DSN": "",
    "COLLECT_ANALYTICS": "false",
}
ENV = {
    **QUIET,
    "ML_BLOCK_LOCAL_IP": "false",  # the ML backend (serve) is on 127.0.0.1
    "USE_DEFAULT_BANNED_SUBNETS": "false",
    # TOKEN as a legacy token: an organisation made without this refuses one
    "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
}
"""Label Studio's environment: when the template is made and at each start."""
STARTED = re.compile(r"Starting development server at (http://127\.0\.0\.1:\d+)/")

SENTIMENT = """<View>
  <Text name="评论" value="$comment"/>
  <Choices name="情感" toName="评论" choice="single" showInline="true">
    <Choice value="正面"/><Choice value="负面"/>
  </Choices>
</View>"""
NER = """<View>
  <Labels name="实体" toName="句子">
    <Label value="PER" background="#f4a261"/><Label value="LOC" background="#2a9d8f"/>
    <Label value="ORG" background="#8ab17d"/>
  </Labels>
  <Text name="句子" value="$sentence"/>
</View>"""
PROJECTS = {  # name: (task, training file and flags, project title, labelling config, data field, texts)
    "classify": (
        ["classify", "--train", "data/sentiment_train.tsv", "--lr", "3e-3", "--epochs", "3"],
        "酒店评论",
        SENTIMENT,
        "comment",
        ["房间很干净，服务也好，下次还来", "太吵了，空调也坏了，再也不来了", "位置方便，性价比高"],
    ),
    "ner": (
        ["ner", "--train", "data/ner_train.jsonl", "--lr", "5e-3", "--epochs", "8"],
        "新闻实体",
        NER,
        "sentence",
        ["吴敏昨天去苏州参加了星光科技公司的年会。", "李四下周去上海见张伟。"],
    ),
}
TINY = ["--model", "scratch:2x64", "--threads", "1", "--max-len", "48", "--batch-size", "8", "--seed", "1"]


def template() -> Path:
    """``TEMPLATE``, made by ``label-studio init`` when missing (under a lock: one maker at a time), swapped in whole
    so that a failed or interrupted init leaves none."""
    if (TEMPLATE / "label_studio.sqlite3").exists():
        return TEMPLATE
    with open(VENV / "template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (TEMPLATE / "label_studio.sqlite3").exists():
            building = VENV / "template.tmp"
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir()
            env = {**os.environ, **ENV, "LABEL_STUDIO_BASE_DATA_DIR": str(building)}
            done = subprocess.run(
                [str(LABEL_STUDIO), "init", *ACCOUNT],
                env=env,
                cwd=building,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0 or not (building / "label_studio.sqlite3").exists():
                raise RuntimeError(f"label-studio init failed (exit {done.returncode}): {done.stderr[-2000:]}")
            os.replace(building, TEMPLATE)
    return TEMPLATE


def start(work: Path, log) -> subprocess.Popen:
    """``label-studio start`` on 127.0.0.1 in a process group of its own, on a fresh copy of the template in
    ``work/data``, its output to the open file ``log``; its address is in its output (``STARTED``: it moves to the
    next port when the one asked for is taken)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    shutil.copytree(template(), work / "data")
    env = {**os.environ, **ENV, "LABEL_STUDIO_BASE_DATA_DIR": str(work / "data")}
    command = [str(LABEL_STUDIO), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port", str(port),
               *ACCOUNT]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """End Label Studio's process group (``start``): SIGTERM, SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_up(proc: subprocess.Popen, log_path: Path, timeout: float = 600) -> str:
    """Label Studio's address once its /health answers; SystemExit with its log's end if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = log_path.read_text(encoding="utf-8", errors="replace")
        if proc.poll() is not None:
            raise SystemExit(f"Label Studio exited with {proc.returncode}:\n{output[-3000:]}")
        found = STARTED.search(output)
        if found:
            try:
                with urllib.request.urlopen(found[1] + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        return found[1]
            except OSError:
                pass  # still starting
        time.sleep(0.5)
    raise SystemExit("Label Studio did not start:\n" + log_path.read_text(encoding="utf-8")[-3000:])


def api(url: str, method: str, path: str, body=None):
    """Label Studio's REST API: the answer's JSON; SystemExit naming the call when it fails."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {path}: {e.code} {e.read()[:500]!r}") from None


def train(name: str, work: Path) -> Path:
    """The tiny model of ``PROJECTS[name]``, trained into ``work/name``."""
    (task, *flags), *_ = PROJECTS[name]
    out = work / name
    command = [sys.executable, "-m", "ernie_ft", task, *flags, *TINY, "--output", str(out), "--overwrite"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"training {name} failed:\n{done.stderr[-3000:]}")
    return out


def project_with_predictions(studio: str, name: str, backend: str) -> tuple[int, int]:
    """(the project, its first task): ``PROJECTS[name]``'s project made, ``backend`` (serve's address) connected as
    its ML backend, its texts imported and their predictions retrieved and stored."""
    _, title, config, field, texts = PROJECTS[name]
    project = api(studio, "POST", "/api/projects", {"title": title, "label_config": config})["id"]
    api(studio, "POST", "/api/ml", {"url": backend + "/label-studio", "project": project, "title": "ernie_ft"})
    api(studio, "POST", f"/api/projects/{project}/import", [{field: text} for text in texts])
    action = f"/api/dm/actions?id=retrieve_tasks_predictions&project={project}"
    api(studio, "POST", action, {"selectedItems": {"all": True, "excluded": []}})
    tasks = api(studio, "GET", f"/api/tasks?project={project}&page_size=100")["tasks"]
    first = min(t["id"] for t in tasks)
    if not api(studio, "GET", f"/api/predictions?task={first}"):
        raise SystemExit(f"{title}: Label Studio stored no prediction for task {first}")
    return project, first


def log_in(browser, studio: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(studio + "/user/login/")
    email = WebDriverWait(browser, 60).until(ready.visibility_of_element_located((By.NAME, "email")))
    email.send_keys(USER)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit], input[type=submit]").click()
    WebDriverWait(browser, 60).until(lambda b: "/user/login" not in b.current_url)


SHOWN = {  # what is on the labelling view once it shows the prediction: a chosen choice, a region in the text
    "classify": "input:checked",
    "ner": "[class*=htx-highlight]",
}


def screenshot(browser, studio: str, project: int, task: int, shown: str, output: Path) -> None:
    """Open ``task`` of ``project`` in Label Studio's labelling view, wait until an element matching the CSS selector
    ``shown`` (what the prediction puts there) is on the page, and save the window as ``output``."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{studio}/projects/{project}/data?task={task}")
    try:
        WebDriverWait(browser, 120).until(lambda b: b.find_elements(By.CSS_SELECTOR, shown))
    except TimeoutException:
        (output.parent / f"{output.stem}.failed.html").write_text(browser.page_source, encoding="utf-8")
        browser.save_screenshot(str(output.parent / f"{output.stem}.failed.png"))
        raise SystemExit(f"Label Studio showed no {shown} on task {task}: see {output.stem}.failed.*") from None
    browser.save_screenshot(str(output))


def main(argv=None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # serve_page beside this file, run as a script
    from serve_page import Server, chromium_missing, start_chromium

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="where the models, logs and Label Studio's data go (default: a temporary dir)")
    parser.add_argument("--output-dir", default=str(ROOT / "docs"))
    args = parser.parse_args(argv)
    for missing in (chromium_missing(), None if LABEL_STUDIO.exists() else f"{LABEL_STUDIO} (scripts/test.sh)"):
        if missing:
            raise SystemExit(f"cannot draw the pictures: {missing} is missing")
    work = Path(args.work or tempfile.mkdtemp(prefix="lsp", dir="/tmp"))  # short: Chromium's socket path
    log_path = work / "label-studio.log"
    with open(log_path, "w") as log:
        studio_proc = start(work, log)
        servers, browser = [], None
        try:
            models = {name: train(name, work) for name in PROJECTS}
            for name, model in models.items():
                (work / f"serve-{name}").mkdir(exist_ok=True)
                servers.append(Server(model, work / f"serve-{name}"))
            urls = dict(zip(models, (server.wait_ready() for server in servers)))
            studio = wait_up(studio_proc, log_path)
            browser = start_chromium(work, 1280, 720)
            log_in(browser, studio)
            for name, url in urls.items():
                project, task = project_with_predictions(studio, name, url)
                output = Path(args.output_dir) / f"label-studio-{name}.png"
                screenshot(browser, studio, project, task, SHOWN[name], output)
                print(f"wrote {output}")
        finally:
            if browser is not None:
                browser.quit()
            for server in servers:
                server.stop()
            stop(studio_proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
