"""What a process that owns its console hides of the libraries' output: noise to a user, not advice.

Paddle's import warnings (``QUIET_WARNINGS``) and the warnings of its C++ code (glog's ``W...`` lines, e.g. "Got
different data type, run type promotion automatically"), the UserWarning and DeprecationWarning lines of Paddle,
PaddleNLP and their dependencies, and PaddleNLP's INFO chatter (which tokenizer class loads a directory, where a
tokenizer was saved). ``quiet_process`` is for the owner of a process only: the command line's entry
(``cli.run_guarded``) and the processes ernie_ft starts itself (training's launched workers, ``predict --nproc``'s
engine processes, ``tune``'s trials). Library functions never call it: ``ernie_ft.Predictor``,
``load_for_inference`` and the training API leave a caller's warning filters, logging levels and environment as they
were (``tests/test_side_effects.py``). The owner also makes four process-wide settings: the switch Paddle needs on AMD
CPUs (``mkl.use_avx2_on_amd``), a heap that keeps freed tensors (``heap.retain_freed_memory``), denormal floats
flushed to zero (``denormals.flush_denormals``) and PaddleNLP's package ``__init__`` deferred
(``ernie_ft._paddlenlp``). This module imports neither Paddle nor PaddleNLP.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from ernie_ft import _paddlenlp
from ernie_ft._compat import PADDLE_IMPORT_WARNINGS
from ernie_ft.training import denormals, heap, mkl

QUIET_WARNINGS = PADDLE_IMPORT_WARNINGS
"""The starts of the Python warnings Paddle prints on import (hidden from a Python caller too: ``ernie_ft._compat``;
here, for the processes ernie_ft starts, through PYTHONWARNINGS)."""

PADDLENLP_LOGGER = "PaddleNLP"
"""The logger PaddleNLP's ``paddlenlp.utils.log.logger`` writes to (its own handler, not propagated)."""


def paddlenlp_advice(record: logging.LogRecord) -> bool:
    """A logging filter: PaddleNLP's warnings and errors pass, its INFO, TRAIN and EVAL lines do not, nor its warning
    that ``datasets`` was imported before it (reading a saved dataset does that; the warning is about its downloads).

    A filter rather than a level: PaddleNLP sets its logger's level to DEBUG when it is first imported, which may be
    after this is put in place."""
    return record.levelno >= logging.WARNING and "imported before paddlenlp" not in record.getMessage()


def quiet_process() -> None:
    """Hide the libraries' noise (above) in this process and, set up before Paddle is first imported, glog's warnings
    and Paddle's import warnings in the processes it starts (the launcher of --nproc, the workers), which inherit the
    environment. Errors and PaddleNLP's warnings still print; a user's own GLOG_minloglevel is kept
    (GLOG_minloglevel=0 shows glog's warnings again). Calling it again changes nothing."""
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    logging.getLogger(PADDLENLP_LOGGER).addFilter(paddlenlp_advice)  # the same function: added once
    _paddlenlp.defer()  # not a quieting either: PaddleNLP's __init__ (Taskflow...) only when asked for
    mkl.use_avx2_on_amd()  # not quietings, but process-wide settings that only a process's owner makes
    heap.retain_freed_memory()
    denormals.flush_denormals()  # before Paddle starts its math threads, which copy the main thread's bits
    if "paddle" in sys.modules:  # too late for glog, which reads its level once as Paddle's library loads
        return
    os.environ.setdefault("GLOG_minloglevel", "2")  # 2: errors only
    given = [entry for entry in os.environ.get("PYTHONWARNINGS", "").split(",") if entry]
    ours = [entry for entry in (f"ignore:{message}" for message in QUIET_WARNINGS) if entry not in given]
    os.environ["PYTHONWARNINGS"] = ",".join(given + ours)  # the later entries take precedence
