"""In a process ernie_ft owns, PaddleNLP's package ``__init__`` (Taskflow, its server, dataaug...) runs only when a
name of its own is asked for: the transformers and the data tools import without it, ``__version__`` is the one its
``__init__`` sets, and every other name is still there. A Python caller's ``import paddlenlp`` is left whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
{owner}
import paddlenlp
from paddlenlp.transformers import ErnieModel, LinearDecayWithWarmup
from paddlenlp.data import Pad
report = {{"version": paddlenlp.__version__, "before": sorted(m for m in sys.modules if m.startswith("paddlenlp."))}}
from paddlenlp import Taskflow
report["Taskflow"] = Taskflow.__module__
report["SimpleServer"] = paddlenlp.SimpleServer.__name__
try:
    paddlenlp.no_such_name
except AttributeError as error:
    report["missing"] = str(error)
print(json.dumps(report))
"""
OWNER = "from ernie_ft.training.quiet import quiet_process\nquiet_process()"
HEAVY = ("paddlenlp.taskflow", "paddlenlp.dataaug", "paddlenlp.trainer", "paddlenlp.server")


def probe(owner: str, **env) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(owner=owner)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_owned_process_defers_paddlenlps_init_and_keeps_every_name():
    report = probe(OWNER, PADDLENLP_STABLE_VERSION="1")
    assert not [m for m in report["before"] if m.startswith(HEAVY)], report["before"]
    assert "paddlenlp.transformers" in report["before"] and "paddlenlp.data" in report["before"]
    import paddlenlp  # the test process's: the whole __init__ (conftest imports it before any test)

    assert report["version"] == paddlenlp.__version__.replace(".post", "")  # its header ran, the variable read
    assert report["Taskflow"] == "paddlenlp.taskflow.taskflow" and report["SimpleServer"] == "SimpleServer"
    assert report["missing"] == "module 'paddlenlp' has no attribute 'no_such_name'"


def test_a_python_callers_paddlenlp_is_whole():
    report = probe("import ernie_ft")
    assert set(HEAVY) <= set(report["before"])
