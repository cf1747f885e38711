"""A library function leaves the process as it found it: an ONNX export (fp32 and int8) while another thread logs at
DEBUG on its own logger, to standard error, changes no logging level, warning filter or environment variable and
takes none of that thread's records, and the libraries' own messages still go to the export's log."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path

import pytest

CHECKPOINT = Path(__file__).parent / "fixtures" / "v0.1" / "classify" / "best"
"""A 1 x 16 classifier committed with the tests (pickled weights, so the export is told to trust them)."""


class _ToDescriptor2(logging.Handler):
    """Writes each record to whatever file descriptor 2 is at that moment: a descriptor moved by the export would
    take these lines."""

    def emit(self, record):
        os.write(2, (self.format(record) + "\n").encode())


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _process_state():
    logger = logging.getLogger("ernie_ft.tests.other_thread")
    return {
        "root level": logging.root.level,
        "thread logger level": logger.level,
        "root handlers": list(logging.root.handlers),
        "root filters": list(logging.root.filters),
        "disable": logging.root.manager.disable,
        "warnings.filters": list(warnings.filters),
        "os.environ": dict(os.environ),
        "descriptors 1 and 2": [os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2)],
    }


@pytest.mark.parametrize("quantize", [None, "int8"], ids=["fp32", "int8"])
def test_an_export_beside_a_logging_thread_changes_nothing_of_the_process(quantize, tmp_path, capfd):
    pytest.importorskip("onnxruntime")
    import onnxruntime.quantization  # noqa: F401  imported before the state is read: what their import does is theirs
    import onnxruntime.transformers.optimizer  # noqa: F401
    import paddle2onnx  # noqa: F401

    from ernie_ft.inference.export import export

    logger = logging.getLogger("ernie_ft.tests.other_thread")
    logger.setLevel(logging.DEBUG)
    to_fd2, kept = _ToDescriptor2(), _Kept()
    for handler in (to_fd2, kept):
        logger.addHandler(handler)
    stop, sent = threading.Event(), []

    def chatter():
        while not stop.is_set():
            sent.append(f"other thread's record {len(sent)}")
            logger.debug(sent[-1])
            stop.wait(0.005)  # a record every 5 ms while the export runs

    before = _process_state()
    thread = threading.Thread(target=chatter)
    try:
        thread.start()
        out = export(str(CHECKPOINT), str(tmp_path / "onnx"), trust_pickle=True, format="onnx", quantize=quantize)
    finally:
        stop.set()
        thread.join()
        for handler in (to_fd2, kept):
            logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    before["thread logger level"] = logging.DEBUG  # set by this test
    after = _process_state()
    after["thread logger level"] = logging.DEBUG
    assert after == before
    assert len(sent) > 20  # the thread logged while the export ran
    assert kept.messages == sent
    err = capfd.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("other thread's record")] == sent
    assert "[Paddle2ONNX]" not in err  # the libraries' lines went to the log
    log = (Path(out) / "export.log").read_text(encoding="utf-8")
    assert "[Paddle2ONNX]" in log and "other thread's record" not in log
