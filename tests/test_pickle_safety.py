"""Loading a model directory never unpickles a file from it unless the user passes --trust-pickle.

Each test plants a pickle that would create a marker file when loaded, where ernie_ft might read
weights, and checks that the marker never appears.
"""

import os
import pickle
import shutil
from dataclasses import dataclass

import pytest
from conftest import DATA

from ernie_ft.cli import main

TRAIN = ["--train", str(DATA / "sentiment_train.tsv"), "--max-len", "32", "--epochs", "1", "--threads", "1"]


class Payload:
    """Unpickling this runs ``open(marker, "w")``: what a crafted checkpoint could do with any code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(directory, marker):
    with open(os.path.join(directory, "model_state.pdparams"), "wb") as f:
        pickle.dump(Payload(marker), f)


@dataclass
class Result:
    returncode: int
    stderr: str


@pytest.fixture
def run(capsys):
    """``python -m ernie_ft ARGS`` in this process: its exit status and what it printed to stderr."""

    def call(*args):
        capsys.readouterr()
        status = main([str(a) for a in args])
        return Result(status, capsys.readouterr().err)

    return call


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("safety") / "run"
    assert main(["classify", *TRAIN, "--model", "scratch:tiny", "--output", str(out)]) == 0
    return out


def test_a_pickle_beside_the_safetensors_is_never_read(trained, tmp_path, run):
    model = tmp_path / "model"
    shutil.copytree(trained / "best", model)
    marker = tmp_path / "pwned"
    plant(model, marker)
    (tmp_path / "in.txt").write_text("房间很干净\n", encoding="utf-8")
    for command in (
        ["predict", "--model", model, "--input", tmp_path / "in.txt", "--output", tmp_path / "p.jsonl"],
        ["evaluate", "--model", model, "--input", DATA / "sentiment_test.csv", "--output-dir", tmp_path / "eval"],
        ["export", "--model", model, "--output", tmp_path / "exported"],
        ["classify", *TRAIN, "--model", model, "--output", tmp_path / "again"],
    ):
        proc = run(*command)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not marker.exists(), command
    assert not (tmp_path / "exported" / "model_state.pdparams").exists()  # the deployment copy holds no pickle


@pytest.mark.parametrize("command", ["predict", "evaluate", "export", "serve", "classify"])
def test_a_directory_whose_weights_are_only_a_pickle_is_refused_in_one_line(trained, tmp_path, command, run):
    model = tmp_path / "model"
    shutil.copytree(trained / "best", model)
    (model / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    plant(model, marker)
    args = {
        "predict": ["--input", DATA / "predict.txt"],
        "evaluate": ["--input", DATA / "sentiment_test.csv"],
        "export": ["--output", tmp_path / "exported"],
        "serve": ["--port", "0"],
        "classify": [*TRAIN, "--output", tmp_path / "again"],
    }[command]
    proc = run(command, "--model", model, *args)
    assert proc.returncode == 2 and not marker.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --model {model}: its weights are a pickle")
    assert "--trust-pickle" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "exported").exists() and not (tmp_path / "again").exists()  # nothing written


def test_trust_pickle_loads_an_old_style_checkpoint_and_export_rewrites_it_as_safetensors(trained, tmp_path, run):
    import paddle
    from safetensors.numpy import load_file

    model = tmp_path / "model"
    shutil.copytree(trained / "best", model)
    weights = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    paddle.save({k: paddle.to_tensor(v) for k, v in weights.items()}, str(model / "model_state.pdparams"))
    proc = run("export", "--model", model, "--output", tmp_path / "exported", "--trust-pickle")
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported = tmp_path / "exported"
    assert not (exported / "model_state.pdparams").exists()
    again = load_file(str(exported / "model.safetensors"))
    assert again.keys() == weights.keys() and all((again[k] == weights[k]).all() for k in weights)
