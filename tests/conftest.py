"""Shared fixtures: tiny random ERNIE checkpoints in PaddleNLP's real format, and data paths."""

import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SHARED = Path(os.environ.get("ERNIE_FT_SHARED_DATA", ROOT.parent / "shared" / "data"))
# The modules that take longest, longest first (their processes and training runs), by their seconds in a whole
# run of scripts/test.sh. It hands whole modules to its workers in collection order (--dist loadfile
# --no-loadscope-reorder): these start first and the many short modules even out the end, instead of one long
# module starting last. test_label_studio_training.py stands for the Label Studio unit (LABEL_STUDIO_MODULES).
SLOW_MODULES = (
    "test_label_studio_training.py",
    "test_scale_engines.py",
    "test_serve.py",
    "test_distributed.py",
    "test_multinode.py",
    "test_predict_parallel.py",
    "test_predict_stream.py",
    "test_distill.py",
    "test_tune.py",
    "test_pretrain.py",
    "test_faults.py",
    "test_real_data.py",
    "test_side_effects.py",
    "test_ner.py",
    "test_serve_page_examples.py",
    "test_relation.py",
    "test_runtime.py",
    "test_signals.py",
    "test_ie_parallel.py",
    "test_runtime_install.py",
    "test_distill_nested.py",
    "test_docs.py",
    "test_evaluate_stream.py",
)


def pytest_configure(config):
    """Paddle's launcher ports below the ephemeral range (``launch.port_range``); under ``pytest -n N``
    (scripts/test.sh), give each worker its own share of the cores.

    Workers and the processes they start inherit the affinity, and ernie_ft's default thread count
    follows it (``runtime.available_cores``), so N workers never run N times the math threads the
    cores can take.
    """
    from ernie_ft.training.launch import port_range

    # the tests that start paddle.distributed.launch themselves get the ports ernie_ft's own launches get
    os.environ.setdefault("PORT_RANGE", port_range())
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and workers and hasattr(os, "sched_setaffinity"):
        cores, n = sorted(os.sched_getaffinity(0)), int(workers)
        if len(cores) >= n:
            os.sched_setaffinity(0, cores[int(worker.removeprefix("gw")) % n :: n])


# The modules that drive the real Label Studio (conftest's ``studio``): one unit of work for scripts/test.sh's
# --dist loadfile, so that one worker runs them all on the one Label Studio it starts (~20 s of CPU each).
LABEL_STUDIO_MODULES = (
    "test_label_studio_training.py",
    "test_label_studio_real.py",
    "test_label_studio_names_real.py",
    "test_serve_security.py",
)


def pytest_xdist_make_scheduler(config, log):
    """xdist's --dist loadfile, but for ``LABEL_STUDIO_MODULES``, which go to one worker together."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LabelStudioTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "label-studio" if Path(scope).name in LABEL_STUDIO_MODULES else scope

    return LabelStudioTogether(config, log)


def pytest_collection_modifyitems(items):
    """The slow modules first (``SLOW_MODULES``), each module's tests in their own order."""
    rank = {name: i for i, name in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def _nudged_updates():
    """With ERNIE_FT_TEST_NUDGE_UPDATES=1, each AdamW update in this process moves every weight one more unit in
    the last place, up or down as the weight's lowest bit says (so a resumed run is nudged as an uninterrupted
    one). That is the size of the difference between CPUs: Paddle's CPU AdamW fuses multiply-adds on AVX-512
    machines only. A test whose learning outcome holds with and without it does not hang on the instruction set
    (docs/code-layout.md, Tests)."""
    if os.environ.get("ERNIE_FT_TEST_NUDGE_UPDATES") != "1":
        yield
        return
    import numpy as np
    import paddle

    original = paddle.optimizer.AdamW.step

    def step(self):
        original(self)
        groups = self._parameter_list
        params = [p for g in groups for p in g["params"]] if groups and isinstance(groups[0], dict) else groups
        with paddle.no_grad():
            for p in params:
                if p.dtype == paddle.float32:
                    value = p.numpy()
                    up = (value.view(np.uint32) & 1) == 0
                    p.set_value(np.nextafter(value, np.where(up, np.inf, -np.inf).astype(np.float32)))

    paddle.optimizer.AdamW.step = step
    yield
    paddle.optimizer.AdamW.step = original


@pytest.fixture(scope="session", autouse=True)
def _paddlenlp_before_datasets():
    """Import PaddleNLP before any test imports ``datasets``, as the command line does (``training.quiet.quiet_process``
    loads it before any data is read). Imported second, PaddleNLP prints a warning ("datasets module was
    imported before paddlenlp") into the stderr of whichever test imports it, which then finds two lines where
    it expects one ``error:`` line (test_bad_input after test_readers' saved-dataset test in one worker)."""
    import paddlenlp  # noqa: F401


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the moment: a test's capsys, or pytest's own capture."""

    def write(self, text):
        return sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def _logs_follow_stderr():
    """A library's log handler keeps the ``sys.stderr`` of the moment the library was imported (PaddleNLP's
    does). When that was inside a test with capsys, every later warning hit that test's closed stream and
    printed a "--- Logging error ---" traceback into another test's stderr; after each test such a handler
    follows the current stderr instead, as it does outside pytest."""
    yield
    for logger in (logging.getLogger(), *logging.Logger.manager.loggerDict.values()):
        for handler in getattr(logger, "handlers", ()):
            if type(handler) is logging.StreamHandler and getattr(handler.stream, "closed", False):
                handler.stream = _CurrentStderr()  # not setStream: it flushes the closed stream


def saved_weights(model_dir) -> dict:
    """name -> numpy array of a model directory's safetensors weights (as ernie_ft writes them)."""
    from safetensors.numpy import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def assert_same_weights(expected_dir, actual_dir, atol: float = 1e-6, head: str = "") -> None:
    """The two model directories hold the same tensors (names, and values within ``atol``); ``head``: a name prefix
    that must be among them (the task's own head, not only the encoder)."""
    import numpy as np

    expected, actual = saved_weights(expected_dir), saved_weights(actual_dir)
    assert expected.keys() == actual.keys()
    assert any(name.startswith(head) for name in expected), head
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=0, atol=atol, err_msg=name)


def exported_predictions(model_dir, texts: str, out_dir) -> dict:
    """engine -> ``predict``'s records for the ``texts`` file from the model's Paddle Inference export and its ONNX
    export (each written under ``out_dir``)."""
    import json

    from ernie_ft.cli import main as cli

    answers = {}
    for engine, extra in (("inference", []), ("onnxruntime", ["--format", "onnx"])):
        exported, again = Path(out_dir) / f"export-{engine}", Path(out_dir) / f"pred-{engine}.jsonl"
        assert cli(["export", "--model", str(model_dir), "--output", str(exported), *extra]) == 0
        assert cli(["predict", "--model", str(exported), "--input", texts, "--output", str(again)]) == 0
        answers[engine] = [json.loads(line) for line in again.read_text(encoding="utf-8").splitlines()]
    return answers


def shared(*parts) -> Path:
    """A file under ../shared/data, or skip the test when that folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


@pytest.fixture(scope="session")
def _built_kernels(tmp_path_factory):
    """The cache directory of the C kernels (``ernie_ft.models.kernels``), built once per test process; None
    where they cannot be built."""
    from ernie_ft.models import kernels

    cache = tmp_path_factory.mktemp("kernels-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_FT_CACHE", str(cache))
        try:
            kernels._build()
        except (OSError, RuntimeError):
            return None
    return cache / "kernels"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch, _built_kernels):
    """Each test has a cache of its own, which holds the C kernels already: every process a test starts would
    otherwise compile them again (0.6 s). Hard links: a rebuild replaces a file, never writes into it."""
    monkeypatch.setenv("ERNIE_FT_CACHE", str(tmp_path / "cache"))
    if _built_kernels is not None:
        shutil.copytree(_built_kernels, tmp_path / "cache" / "kernels", copy_function=os.link)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A randomly initialised ERNIE (2 x 32) saved with save_pretrained, with a vocab built from data/."""
    from paddlenlp.transformers import ErnieConfig, ErnieModel, ErnieTokenizer

    from ernie_ft.data.readers import read_examples
    from ernie_ft.text.scratch import build_vocab, write_vocab

    path = tmp_path_factory.mktemp("tiny-ernie")
    texts = [e.text for e in read_examples(str(DATA / "sentiment_train.tsv"))]
    vocab = path / "vocab.txt"
    write_vocab(build_vocab(texts), str(vocab))
    n_vocab = len(vocab.read_text(encoding="utf-8").splitlines())
    config = ErnieConfig(
        vocab_size=n_vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        type_vocab_size=4,
        use_task_id=False,
    )
    ErnieModel(config).save_pretrained(str(path), safe_serialization=True)
    ErnieTokenizer(str(vocab)).save_pretrained(str(path))
    return str(path)


def pretrain_args(corpus, out, *extra) -> list:
    """``python -m ernie_ft.pretrain`` flags for a quick scratch:tiny run (2 epochs of batch 8, dev every 4 steps)."""
    return [
        "--corpus",
        str(corpus),
        "--model",
        "scratch:tiny",
        "--output",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--max-len",
        "48",
        "--threads",
        "1",
        "--seed",
        "3",
        "--dev-fraction",
        "0.1",
        "--eval-steps",
        "4",
        "--log-steps",
        "2",
        *extra,
    ]


@pytest.fixture(scope="session")
def texts_file(tmp_path_factory):
    """The project's sample reviews as a .txt corpus, one document per line."""
    from ernie_ft.data.readers import read_examples

    path = tmp_path_factory.mktemp("corpus") / "reviews.txt"
    path.write_text(
        "\n".join(e.text for e in read_examples(str(DATA / "sentiment_train.tsv"))) + "\n", encoding="utf-8"
    )
    return path


@pytest.fixture(scope="session")
def pretrained(texts_file, tmp_path_factory):
    """A pretraining run (its output directory) stopped after 8 steps and resumed to the end of 2 epochs."""
    from ernie_ft.cli import task_command

    main = task_command("pretrain")

    out = tmp_path_factory.mktemp("pretrain") / "run"
    assert main(pretrain_args(texts_file, out, "--stop-after-steps", "8")) == 0
    assert main(pretrain_args(texts_file, out, "--resume")) == 0
    return out


# ------------------------------------------------------------------ a real headless Chromium for the page tests
# scripts/test.sh installs Debian's chromium and chromium-driver where it can (root with apt-get); elsewhere the
# browser tests skip, naming what is missing (pytest's summary shows the reason, -ra), and in CI (CI=true) they
# fail: CI's machines reach Debian's packages, so there a missing browser is a broken setup.


def without_browser(reason: str):
    """Skip the browser tests for ``reason``, or fail them in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"browser tests not run: {reason}")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium driven by Selenium, one per test module (``helpers.chromium``, in a directory of its
    own with a short path)."""
    from helpers import chromium

    reason = chromium.missing()
    if reason:
        without_browser(reason)
    driver = chromium.start(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def studio(tmp_path_factory):
    """A real Label Studio (``helpers.label_studio``) for the test process, started, not yet waited for (``wait_up``):
    tiny models train meanwhile. Its users make projects of their own."""
    from helpers.label_studio import LABEL_STUDIO, LabelStudio, without_label_studio

    if not LABEL_STUDIO.exists():
        without_label_studio(f"{LABEL_STUDIO} is missing (scripts/test.sh makes the venv: label-studio==1.23.2)")
    started = LabelStudio(tmp_path_factory.mktemp("label_studio"))
    yield started
    started.stop()
