"""A new user's first hour (issue 38): an export that installs nothing and prints ernie_ft's own lines, a model card
whose command trains the run again, evaluations of an export that stay inside it, the engine named, and a page with
the fields the model was trained with."""

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import DATA, ROOT

PIP_RECORDER = """#!/bin/sh
echo "$0 $*" >> "{log}"
exit 1
"""


@pytest.fixture(scope="module")
def run(tiny_checkpoint, tmp_path_factory):
    """A classifier trained with settings away from their defaults: its own column names, a test file, windows."""
    from ernie_ft.cli import main

    root = tmp_path_factory.mktemp("first-hour")
    rows = [line.split("\t") for line in (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    train = root / "reviews.tsv"  # columns named as the user's file names them: review, sentiment
    train.write_text("review\tsentiment\n" + "".join(f"{text}\t{label}\n" for label, text in rows), encoding="utf-8")
    out = root / "run"
    flags = ["--train", str(train), "--test", str(train), "--text-column", "review", "--label-column", "sentiment"]
    flags += ["--model", tiny_checkpoint, "--output", str(out), "--epochs", "1", "--batch-size", "16"]
    flags += ["--lr", "0.003", "--max-len", "48", "--stride", "8", "--window-pooling", "max", "--seed", "7"]
    flags += ["--warmup", "0.2", "--threads", "1", "--recompute"]
    assert main(["classify", *flags]) == 0
    return out, flags


def recorders(tmp_path):
    """A directory of stand-ins for pip that record every call and fail, and the file they record to."""
    bin_dir, log = tmp_path / "bin", tmp_path / "installs.txt"
    bin_dir.mkdir()
    for name in ("pip", "pip3", "pip-polygraphy"):
        (bin_dir / name).write_text(PIP_RECORDER.format(log=log))
        (bin_dir / name).chmod(0o755)
    return bin_dir, log


def offline_env(bin_dir) -> dict:
    """An environment with the package index unreachable, pip recording instead of installing, and Polygraphy's
    automatic install asked for (as a user or a library may set it)."""
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PIP_INDEX_URL": "http://127.0.0.1:9/",
        "PIP_NO_INDEX": "1",
        "POLYGRAPHY_AUTOINSTALL_DEPS": "1",
        "POLYGRAPHY_INSTALL_CMD": str(bin_dir / "pip-polygraphy"),
    }


@pytest.mark.parametrize("guarded", [True, False], ids=["no_installs", "without"])
def test_polygraphy_installs_nothing_inside_no_installs(guarded, tmp_path):
    """What paddle2onnx does (set POLYGRAPHY_AUTOINSTALL_DEPS=1, then import Polygraphy) and a module Polygraphy
    misses: inside ``no_installs`` no install command runs and the variable is back afterwards; without it (the
    control) Polygraphy runs its install command."""
    bin_dir, installs = recorders(tmp_path)
    script = textwrap.dedent(
        f"""
        import contextlib, os
        from ernie_ft.inference.libraries import no_installs
        with no_installs() if {guarded} else contextlib.nullcontext():
            os.environ["POLYGRAPHY_AUTOINSTALL_DEPS"] = "1"  # paddle2onnx.export, before it imports Polygraphy
            from polygraphy import mod
            try:
                mod.lazy_import("ernie_ft_no_such_module").anything
            except Exception as error:
                print("refused:", type(error).__name__)
        print("after:", os.environ.get("POLYGRAPHY_AUTOINSTALL_DEPS"))
        """
    )
    env = {**offline_env(bin_dir), "POLYGRAPHY_AUTOINSTALL_DEPS": "0"}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "refused: PolygraphyException" in done.stdout
    if guarded:
        assert not installs.exists() and "after: 0" in done.stdout
    else:
        assert "ernie_ft_no_such_module" in installs.read_text()


def test_an_onnx_export_offline_installs_nothing_and_prints_only_our_lines(run, tmp_path, capsys):
    """export --format onnx --quantize int8 with the package index unreachable, every pip a recorder and Polygraphy's
    auto-install asked for: it succeeds, nothing was installed, the terminal has ernie_ft's three lines, the libraries'
    lines are in export.log, and constant folding ran (onnx-graphsurgeon is a declared dependency): LayerNorms fuse.
    Then evaluate and predict on the export: the evaluation goes beside the input, nothing inside the export, and
    both name the engine."""
    from ernie_ft.cli import main

    bin_dir, installs = recorders(tmp_path)
    exported = tmp_path / "deploy" / "s1-int8"
    command = ["export", "--model", str(run[0]), "--output", str(exported), "--format", "onnx", "--quantize", "int8"]
    done = subprocess.run(
        [sys.executable, "-m", "ernie_ft", *command], env=offline_env(bin_dir), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not installs.exists(), installs.read_text()
    lines = done.stdout.splitlines()
    assert done.stderr == "" and len(lines) == 3, done.stdout + done.stderr
    assert lines[0].startswith("ONNX Runtime fusions: ") and "SkipLayerNormalization x" in lines[0]
    assert lines[1].startswith(f"exported to {exported}: ")
    assert lines[2].startswith(f"what Paddle, paddle2onnx and ONNX Runtime printed: {exported / 'export.log'} ")
    log = (exported / "export.log").read_text()
    assert "[Paddle2ONNX]" in log and "Folding Constants" in log
    assert "Running installation command" not in log

    dev = tmp_path / "dev" / "sentiment_dev.tsv"
    dev.parent.mkdir()
    shutil.copy(DATA / "sentiment_dev.tsv", dev)
    held = sorted(os.listdir(exported))
    assert main(["evaluate", "--model", str(exported), "--input", str(dev),
                 "--text-column", "text_a", "--label-column", "label"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert f"metrics: {dev.parent / 'eval-sentiment_dev' / 'metrics.json'}" in printed
    assert "sentiment_dev.tsv: 60 examples; engine onnxruntime, int8" in printed
    assert sorted(os.listdir(exported.parent)) == ["s1-int8"] and sorted(os.listdir(exported)) == held
    assert main(["predict", "--model", str(exported), "--input", str(DATA / "predict.txt")]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == "wrote 10 predictions (engine onnxruntime, int8)"


def test_a_run_evaluates_to_its_output_and_export_verbose_writes_no_log(run, tmp_path, capsys):
    from ernie_ft.cli import main

    out = run[0]
    assert main(["evaluate", "--model", str(out), "--input", str(DATA / "sentiment_dev.tsv"), "--output",
                 str(tmp_path / "scored"), "--text-column", "text_a", "--label-column", "label"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert f"metrics: {tmp_path / 'scored' / 'metrics.json'}" in printed and "engine dygraph, fp32" in printed
    assert not list(out.glob("eval-*"))
    exported = tmp_path / "paddle"
    assert main(["export", "--model", str(out), "--output", str(exported), "--verbose"]) == 0
    assert (exported / "inference.json").is_file() and not (exported / "export.log").exists()
    assert "what Paddle" not in capsys.readouterr().out


def test_a_failed_export_keeps_the_libraries_log_beside_it(run, tmp_path, capsys, monkeypatch):
    """A conversion that fails (a bug, not the user's error) leaves no half export, but what the libraries printed on
    file descriptor 2 before it is kept as OUTPUT-export.log, and standard error says where."""
    from ernie_ft.cli import main
    from ernie_ft.inference import libraries

    real_run = subprocess.run

    def failing(command, **kwargs):  # the conversion's own process prints a line on its fd 2 and fails
        script = 'import os, sys; os.write(2, b"[Paddle2ONNX] a library\'s own line\\n"); sys.exit(1)'
        return real_run([sys.executable, "-c", script], **kwargs)

    monkeypatch.setattr(libraries.subprocess, "run", failing)
    output = tmp_path / "out"
    with pytest.raises(RuntimeError, match="paddle2onnx could not convert"):
        main(["export", "--model", str(run[0]), "--output", str(output), "--format", "onnx"])
    kept = tmp_path / "out-export.log"
    assert not output.exists() and not (tmp_path / "out.tmp").exists()
    assert "[Paddle2ONNX] a library's own line" in kept.read_text()
    assert f"the libraries' messages during the failed export: {kept}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "module, flags, says",
    [
        ("onnx_graphsurgeon", (), "--format onnx needs onnx-graphsurgeon "),
        ("ml_dtypes", ("--quantize", "int8"), "--quantize needs ml_dtypes "),
    ],
)
def test_a_missing_onnx_dependency_is_one_error_line(run, module, flags, says, tmp_path, capsys, monkeypatch):
    """Each module the export needs (``libraries.REQUIRED``), missing, stops it with one line naming the package to
    install: Polygraphy never gets to install it."""
    import builtins

    from ernie_ft.cli import main

    real_import = builtins.__import__

    def missing(name, *args, **kwargs):
        if name == module:
            raise ImportError(f"No module named {module!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", missing)
    output = tmp_path / "out"
    assert main(["export", "--model", str(run[0]), "--output", str(output), "--format", "onnx", *flags]) == 2
    err = capsys.readouterr().err.strip()
    package = says.split()[-1]
    assert err.count("\n") == 0 and err.startswith(f"error: {says}") and f": pip install {package} " in err, err
    assert not output.exists()


def test_the_model_cards_command_trains_the_run_again(run, tmp_path):
    """export --format hf: the card's command, parsed by the training command line, gives the run's config (every
    setting away from its default is a flag there, with its value); --text-column, --label-column, --test included."""
    import yaml

    from ernie_ft.cli import main
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.task import resolve_task

    out, flags = run
    exported = tmp_path / "hf"
    assert main(["export", "--model", str(out), "--output", str(exported), "--format", "hf"]) == 0
    card = (exported / "README.md").read_text(encoding="utf-8")
    command = shlex.split(card.split("```bash\n")[1].split("\n```")[0])
    assert command[:3] == ["python", "-m", "ernie_ft.classify"]
    for flag, value in zip(flags, [*flags[1:], "--"]):
        if flag.startswith("--") and not value.startswith("--"):
            assert command[command.index(flag) + 1] == value, flag
    assert "--recompute" in command
    rebuilt = parse_train_args(command[3:], "classify", "", resolve_task("classify")).to_dict()
    recorded = yaml.safe_load((out / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))["run"]
    for section in ("data", "model", "train", "parallel", "task"):
        assert rebuilt[section] == recorded[section], section


@pytest.fixture(scope="module")
def pair_run(tiny_checkpoint, tmp_path_factory):
    """A classifier of text pairs (text_a, text_b)."""
    from ernie_ft.cli import main

    out = tmp_path_factory.mktemp("pairs") / "run"
    flags = ["--train", str(DATA / "pairs_train.tsv"), "--model", tiny_checkpoint, "--output", str(out)]
    assert main(["classify", *flags, "--epochs", "1", "--max-len", "48", "--threads", "1"]) == 0
    return out


@contextlib.contextmanager
def serving(model_dir):
    """The app of ``model_dir`` served on a port the system picks, in a thread of this process; yields its URL."""
    import uvicorn

    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    app = create_app(ServedModel(str(model_dir), "dygraph", "cpu"), Limits())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:  # polled until uvicorn says it listens, or the thread ended, or the deadline
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(60)


def test_info_names_the_fields_the_model_was_trained_with(run, pair_run):
    """The checkpoint records the input fields its training examples used; /v1/info tells them (trained_with) beside
    every field the API takes, which stay the task's: a single-text model still answers a text_pair."""
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    for model_dir, trained in ((run[0], ["text"]), (pair_run, ["text", "text_pair"])):
        info = ServedModel(str(model_dir), "dygraph", "cpu").info(Limits())["inputs"]
        assert info == {"required": ["text"], "optional": ["text_pair"], "trained_with": trained}, model_dir


def test_the_page_shows_a_text_pair_box_only_for_a_model_trained_on_pairs(run, pair_run, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    for model_dir, boxes in ((run[0], ["field-text"]), (pair_run, ["field-text", "field-text_pair"])):
        with serving(model_dir) as url:
            browser.get(url + "/")
            WebDriverWait(browser, 60).until(ready.visibility_of_element_located((By.ID, "form")))
            shown = [area.get_attribute("id") for area in browser.find_elements(By.CSS_SELECTOR, "#fields textarea")]
            assert shown == boxes, model_dir
