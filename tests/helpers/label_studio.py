"""The Label Studio the tests drive (tests/test_label_studio_real.py): 1.23.2 in a venv of its own,
.venv-label-studio (scripts/test.sh makes it: its pins would fight ours), and a data directory whose database is
made once, ``template``, so that each run starts from a copy in seconds instead of a minute of migrations.

    python tests/helpers/label_studio.py   # make the template (scripts/test.sh does, after the venv)
"""

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parents[2] / ".venv-label-studio"
LABEL_STUDIO = VENV / "bin" / "label-studio"
TEMPLATE = VENV / "template"
"""A data directory with Label Studio's database made and the test account (``ACCOUNT``, ``TOKEN``) in it."""
TOKEN = "ernie-ft-test-token-0123456789"
ACCOUNT = ["--username", "tester@example.com", "--password", "ernie-ft-test", "--user-token", TOKEN]
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
"""Label Studio's environment for the tests: when the template is made and at each start."""


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


if __name__ == "__main__":
    if not LABEL_STUDIO.exists():
        sys.exit(f"{LABEL_STUDIO} is missing: make the venv first (scripts/test.sh)")
    print(f"Label Studio's test data directory: {template()}")
