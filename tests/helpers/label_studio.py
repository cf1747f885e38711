"""The Label Studio the tests drive (conftest's ``studio``, one per test process): 1.23.2 in a venv of its own,
.venv-label-studio (scripts/test.sh makes it: its pins would fight ours), and a data directory whose database is
made once, ``template``, so that each run starts from a copy in seconds instead of a minute of migrations.

The venv, account, environment, template and start are docs/pictures/label_studio.py's (what draws Label Studio's
pictures in docs/), loaded by path: one way to start it, and no tool imports the tests.

    python tests/helpers/label_studio.py   # make the template (scripts/test.sh does, after the venv)
"""

import importlib.util
import os
import sys
import time
from pathlib import Path

import httpx
import pytest

_spec = importlib.util.spec_from_file_location(
    "label_studio_pictures", Path(__file__).resolve().parents[2] / "docs" / "pictures" / "label_studio.py"
)
_pictures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_pictures)

VENV, LABEL_STUDIO, TEMPLATE = _pictures.VENV, _pictures.LABEL_STUDIO, _pictures.TEMPLATE
TOKEN, ACCOUNT, QUIET, ENV = _pictures.TOKEN, _pictures.ACCOUNT, _pictures.QUIET, _pictures.ENV
STARTED = _pictures.STARTED
"""Label Studio's line naming its address."""
template = _pictures.template
"""``template()``: the data directory with the database made and the account in it, made once when missing."""
start = _pictures.start
"""``start(work, log)``: ``label-studio start`` on 127.0.0.1 on a copy of the template in ``work/data``."""
stop = _pictures.stop
"""``stop(proc)``: Label Studio's process group ended."""


def without_label_studio(reason: str):
    """Skip the Label Studio tests for ``reason``, or fail them in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: the Label Studio tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"Label Studio tests not run: {reason}")


class LabelStudio:
    """``label-studio start`` in a process group of its own, with a fresh data directory; its address is read from
    its "Starting development server at" line (it moves to the next port when the one asked for is taken)."""

    def __init__(self, tmp_path):
        self.url, self.log = None, open(tmp_path / "label-studio.log", "w+")
        self.proc = start(tmp_path, self.log)

    def output(self) -> str:
        self.log.flush()
        return open(self.log.name, encoding="utf-8", errors="replace").read()

    def wait_up(self, timeout=600):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()[-3000:]
            found = STARTED.search(self.output())
            if found:
                try:
                    if httpx.get(found[1] + "/health", timeout=5).status_code == 200:
                        self.url = found[1]
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.5)
        raise AssertionError("Label Studio did not start: " + self.output()[-3000:])

    def api(self, method: str, path: str, body=None, token: str = TOKEN):
        """Label Studio's REST API with plain HTTP: the answer's JSON."""
        answer = httpx.request(method, self.url + path, json=body, timeout=120,
                               headers={"Authorization": f"Token {token}"})  # fmt: skip
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text[:500]}"
        return answer.json()

    def project(self, title: str, config: str) -> int:
        return self.api("POST", "/api/projects", {"title": title, "label_config": config})["id"]

    def predictions(self, project: int) -> dict:
        """{task id: [its predictions]} of ``project``."""
        found = {}
        for p in self.api("GET", f"/api/predictions?project={project}"):
            found.setdefault(p["task"], []).append(p)
        return found

    def tasks(self, project: int) -> list[dict]:
        return self.api("GET", f"/api/tasks?project={project}&page_size=1000")["tasks"]

    def stop(self):
        stop(self.proc)
        self.log.close()


if __name__ == "__main__":
    if not LABEL_STUDIO.exists():
        sys.exit(f"{LABEL_STUDIO} is missing: make the venv first (scripts/test.sh)")
    print(f"Label Studio's test data directory: {template()}")
