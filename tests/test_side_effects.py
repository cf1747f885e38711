"""A library function leaves the process as it found it: an ONNX export (fp32 and int8) while another thread logs at
DEBUG on its own logger, to standard error, changes no logging level, warning filter or environment variable and
takes none of that thread's records, and the libraries' own messages still go to the export's log. Loading a model for
inference and the training setup, called from Python, leave the caller's warning filters and loggers as they were;
the command line, which owns its process, still hides PaddleNLP's INFO lines."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path

import pytest
from conftest import DATA

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


def _loggers_and_filters(names=None) -> dict:
    """What a caller set of Python's warnings and logging: the filter list, logging's global disable, and each logger's
    level, filters, handlers, propagation and disabled flag (of ``names``, or of every logger there is)."""
    loggers = {"root": logging.root, **logging.root.manager.loggerDict}
    return {
        "warnings.filters": list(warnings.filters),
        "disable": logging.root.manager.disable,
        "os.environ": dict(os.environ),
        "loggers": {
            name: (logger.level, list(logger.filters), list(logger.handlers), logger.propagate, logger.disabled)
            for name, logger in loggers.items()
            if isinstance(logger, logging.Logger) and (names is None or name in names)
        },
    }


def test_loading_for_inference_and_the_training_setup_leave_the_callers_warnings_and_loggers_alone(tmp_path):
    """From Python, with a caller's own warning filter and PaddleNLP's logger at INFO: ``load_for_inference`` and
    ``setup`` (a tiny scratch classifier, whose tokenizer PaddleNLP saves) add no warning filter and change no level,
    filter or handler of any logger that was there before."""
    import paddlenlp  # noqa: F401  imported before the state is read: what its import does is its own

    from ernie_ft.classify.task import Classification
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.inference.predict import load_for_inference
    from ernie_ft.task import create_task
    from ernie_ft.training.run import setup

    paddlenlp_logger = logging.getLogger("PaddleNLP")
    level = paddlenlp_logger.level
    with warnings.catch_warnings():
        warnings.simplefilter("always", UserWarning)  # the caller's own choice, which a library must not override
        paddlenlp_logger.setLevel(logging.INFO)
        try:
            before = _loggers_and_filters()
            loaded, _ = load_for_inference(str(CHECKPOINT), "cpu", {}, trust_pickle=True, threads=1)
            assert loaded.task.name == "classify"
            assert _loggers_and_filters(before["loggers"]) == before
            argv = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:tiny", "--threads", "1"]
            cfg = parse_train_args([*argv, "--output", str(tmp_path / "run")], "t", "t", Classification)
            run = setup(create_task(Classification, cfg.task, "classify"), cfg)
            assert run.model is not None
            assert _loggers_and_filters(before["loggers"]) == before
        finally:
            paddlenlp_logger.setLevel(level)


def test_the_command_line_hides_paddlenlps_info_lines_which_a_python_caller_sees(tmp_path, capfd, monkeypatch):
    """The command line owns its process and hides PaddleNLP's INFO lines (``training.quiet``); the same model loaded
    from Python lets them through (the control: the lines are real, and no longer the library's to hide)."""
    from ernie_ft.cli import main
    from ernie_ft.inference.predict import load_for_inference

    paddlenlp_logger, kept = logging.getLogger("PaddleNLP"), _Kept()
    monkeypatch.setattr(paddlenlp_logger, "filters", [])  # as a new process has it: no earlier command's filter
    level = paddlenlp_logger.level
    paddlenlp_logger.setLevel(logging.DEBUG)  # PaddleNLP's own level once imported
    paddlenlp_logger.addHandler(kept)
    try:
        with warnings.catch_warnings():
            load_for_inference(str(CHECKPOINT), "cpu", {}, trust_pickle=True, threads=1)
            from_python, kept.messages = kept.messages, []
            predict = ["predict", "--model", str(CHECKPOINT), "--input", str(DATA / "predict.txt"), "--trust-pickle"]
            status = main([*predict, "--output", str(tmp_path / "answers.jsonl")])
    finally:
        paddlenlp_logger.removeHandler(kept)
        paddlenlp_logger.setLevel(level)
    assert [m for m in from_python if m.startswith("Loading weights file")]
    assert status == 0 and "wrote 10 predictions" in capfd.readouterr().err
    assert kept.messages == []


def test_predicts_engine_processes_hide_paddlenlps_info_lines_too(tmp_path, capfd):
    """``predict --nproc 2`` starts its engine processes with the spawn method: they inherit the environment, not the
    command's warning filters and loggers, so each puts the same quiet in place (``pool.work``)."""
    from ernie_ft.cli import main

    predict = ["predict", "--model", str(CHECKPOINT), "--input", str(DATA / "predict.txt"), "--trust-pickle"]
    with warnings.catch_warnings():
        status = main([*predict, "--nproc", "2", "--output", str(tmp_path / "answers.jsonl")])
    err = capfd.readouterr().err
    assert status == 0 and "wrote 10 predictions" in err and "on 2 processes" in err
    assert "INFO" not in err, err


API_CALLER = f"""
import warnings
import ernie_ft
from ernie_ft._compat import PADDLE_IMPORT_WARNINGS
ernie_ft.load_model({str(CHECKPOINT)!r}, trust_pickle=True)
print(ernie_ft.Predictor({str(CHECKPOINT)!r}, device="cpu", trust_pickle=True)(["很好"])[0]["label"])
ours = [f for f in warnings.filters if f[1] is not None and f[1].pattern in PADDLE_IMPORT_WARNINGS]
print("filters left:", ours)
"""


def test_a_python_caller_sees_no_paddle_import_warnings_and_keeps_its_filters():
    """``import ernie_ft; ernie_ft.load_model(...)`` and ``Predictor(...)`` in a fresh process: standard error holds
    neither Paddle's 'No ccache found' nor setuptools' 'replacing distutils' (a plain import of Paddle and PaddleNLP
    prints both: the control), and no filter of ernie_ft's is left behind (``_compat._QuietImport``)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "GLOG_minloglevel")}
    plain = [sys.executable, "-c", "import paddle, paddlenlp"]
    control = subprocess.run(plain, env=env, capture_output=True, text=True)
    if "No ccache found" not in control.stderr:
        pytest.skip("Paddle does not warn about ccache here (ccache installed?)")
    assert "Setuptools is replacing distutils" in control.stderr
    done = subprocess.run([sys.executable, "-c", API_CALLER], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "No ccache found" not in done.stderr and "distutils" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "filters left: []"
