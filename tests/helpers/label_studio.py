"""The Label Studio the tests drive (tests/test_label_studio_real.py): 1.23.2 in a venv of its own,
.venv-label-studio (scripts/test.sh makes it: its pins would fight ours), and a data directory whose database is
made once, ``template``, so that each run starts from a copy in seconds instead of a minute of migrations.

The venv, account, environment, template and start are docs/pictures/label_studio.py's (what draws Label Studio's
pictures in docs/), loaded by path: one way to start it, and no tool imports the tests.

    python tests/helpers/label_studio.py   # make the template (scripts/test.sh does, after the venv)
"""

import importlib.util
import sys
from pathlib import Path

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

if __name__ == "__main__":
    if not LABEL_STUDIO.exists():
        sys.exit(f"{LABEL_STUDIO} is missing: make the venv first (scripts/test.sh)")
    print(f"Label Studio's test data directory: {template()}")
