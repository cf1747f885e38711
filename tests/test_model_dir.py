"""A model directory is read once (``ernie_ft.models.model_dir``): its kind for each of the five kinds, one error for a
directory that is missing or holds no model, and ``predict``, ``evaluate`` and ``Predictor`` (``serve``'s model)
examining each file of the directory at most once."""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

import ernie_ft
from ernie_ft.errors import UserError
from ernie_ft.models.model_dir import GRAPH_FILES, ONNX_FILES, ONNX_MANIFEST, Kind, read_model_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
RUN = FIXTURES / "v0.1" / "classify" / "best"  # an ernie_ft checkpoint (pickled weights: --trust-pickle)
PADDLENLP = FIXTURES / "v0.1" / "base"  # save_pretrained of PaddleNLP: config.json, model_state.pdparams
TRANSFORMERS = FIXTURES / "hf" / "bert-seq"  # transformers' BertForSequenceClassification
DATA = ROOT / "data"
STDLIB = (sysconfig.get_paths()["stdlib"], "<frozen")
PACKAGE = os.path.dirname(ernie_ft.__file__)


def test_the_inference_layer_names_the_export_files_the_reader_looks_for():
    from ernie_ft.inference import onnx, static_graph

    assert (f"{static_graph.PREFIX}.json", f"{static_graph.PREFIX}.pdmodel") == GRAPH_FILES
    assert ONNX_FILES == onnx.FILES and ONNX_MANIFEST == onnx.MANIFEST


def test_each_kind_is_recognised(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run / "best")  # a run's output directory stands for its best/
    found = read_model_dir(str(run))
    assert (found.kind, found.path, found.given) == (Kind.RUN, str(run / "best"), str(run))
    assert found.task == "classify" and found.labels == json.loads((RUN / "labels.json").read_text("utf-8"))
    assert (
        found.weights == "pickle"
        and found.tokenizer.get("rules", "ernie_ft") == "ernie_ft"
        and found.run["run"]["data"]
    )

    base = read_model_dir(str(PADDLENLP))
    assert (base.kind, base.run, base.hf_config, base.labels) == (Kind.PADDLENLP, None, None, None)
    assert base.tokenizer["rules"] == "paddlenlp"  # saved by PaddleNLP itself: ErnieTokenizer's ids

    hf = read_model_dir(str(TRANSFORMERS))
    assert (hf.kind, hf.head, hf.weights, hf.tokenizer["rules"]) == (
        Kind.TRANSFORMERS,
        "sequence",
        "safetensors",
        "bert",
    )
    assert hf.labels == [hf.config["id2label"][str(i)] for i in range(len(hf.config["id2label"]))]

    graph = tmp_path / "exported"
    shutil.copytree(RUN, graph)
    (graph / GRAPH_FILES[0]).write_text("{}")
    assert read_model_dir(str(graph)).kind is Kind.PADDLE_INFERENCE
    assert read_model_dir(str(graph)).graph == str(graph / GRAPH_FILES[0])

    onnx = tmp_path / "onnx"
    shutil.copytree(graph, onnx)
    (onnx / ONNX_FILES["int8"]).write_bytes(b"")
    (onnx / ONNX_MANIFEST).write_text(json.dumps({"files": {ONNX_FILES["int8"]: {"sha256": "0"}}}))
    found = read_model_dir(str(onnx))
    assert (found.kind, found.onnx(), found.onnx("int8")) == (Kind.ONNX, None, str(onnx / ONNX_FILES["int8"]))
    assert found.onnx_manifest["files"][ONNX_FILES["int8"]] == {"sha256": "0"} and found.run is not None


def test_a_missing_or_unrecognisable_directory_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match=f"^--teacher {tmp_path / 'none'}: directory not found$"):
        read_model_dir(str(tmp_path / "none"), "--teacher")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=rf"^--model {notes}: not an ernie_ft checkpoint .*found notes\.txt\)"):
        read_model_dir(str(notes))
    (notes / "last").mkdir()
    with pytest.raises(UserError, match="stopped before it saved a best/ model .* --resume"):
        read_model_dir(str(notes))


@pytest.fixture
def examined(monkeypatch):
    """A function of a directory that gives, per name in it, how often ernie_ft's own code opened or stat'ed it
    (``os.stat`` under ``os.path.isfile``, ``Path.is_file`` and the like) since the fixture started. Calls made
    by other libraries (PaddleNLP loading weights) are not ernie_ft examining the directory."""
    calls: list[tuple[str, str]] = []
    real_open, real_stat = builtins.open, os.stat

    def ours() -> bool:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(STDLIB):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(PACKAGE)

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and ours():
            calls.append(("open", os.path.abspath(file)))
        return real_open(file, *args, **kwargs)

    def counting_stat(path, *args, **kwargs):
        if isinstance(path, (str, os.PathLike)) and ours():
            calls.append(("stat", os.path.abspath(path)))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(os, "stat", counting_stat)

    def of(directory: Path) -> dict[str, Counter]:
        inside = {}
        for what, path in calls:
            if os.path.dirname(path) == str(directory):
                inside.setdefault(os.path.basename(path), Counter())[what] += 1
        return inside

    return of


def _assert_read_once(found: dict[str, Counter]) -> None:
    assert found, "nothing of the directory was read"
    for name, counts in found.items():
        assert counts["open"] <= 1 and counts["stat"] <= 1, (name, dict(counts))


@pytest.mark.parametrize("source", [RUN, TRANSFORMERS], ids=["ernie_ft-run", "transformers"])
def test_predict_examines_each_file_of_the_model_directory_once(source, tmp_path, examined):
    from ernie_ft.cli import main as cli

    model = tmp_path / "model"
    shutil.copytree(source, model)
    out = tmp_path / "out.jsonl"
    args = ["predict", "--model", str(model), "--input", str(DATA / "predict.txt"), "--output", str(out)]
    assert cli([*args, "--trust-pickle", "--device", "cpu"]) == 0
    assert len(out.read_text("utf-8").splitlines()) == len((DATA / "predict.txt").read_text("utf-8").splitlines())
    found = examined(model)
    assert "tokenizer_config.json" in found
    _assert_read_once(found)


def test_evaluate_and_the_served_model_examine_each_file_once(tmp_path, examined):
    from ernie_ft.inference.evaluate import EvaluateOptions, evaluate
    from ernie_ft.inference.predictor import Predictor

    model = tmp_path / "run" / "best"
    shutil.copytree(RUN, model)
    dev = tmp_path / "sentiment_dev.tsv"
    shutil.copy(DATA / "sentiment_dev.tsv", dev)
    metrics = evaluate(EvaluateOptions(str(model.parent), str(dev), device="cpu", trust_pickle=True))
    assert "accuracy" in metrics and (tmp_path / "eval-sentiment_dev" / "metrics.json").is_file()
    _assert_read_once(examined(model))
    served = tmp_path / "served"
    shutil.copytree(RUN, served)
    predictor = Predictor(str(served), device="cpu", trust_pickle=True)
    assert len(predictor([{"text": "房间很干净"}])) == 1
    _assert_read_once(examined(served))


@pytest.mark.parametrize("source", [TRANSFORMERS, RUN], ids=["transformers", "ernie_ft-run"])
def test_fine_tuning_examines_each_file_of_its_model_directory_once(source, tmp_path, examined):
    """What ``setup`` does with --model DIR: read it (``model_dir_of``), then its pipeline and the model."""
    from ernie_ft.config import DataConfig, ModelConfig
    from ernie_ft.models import model_source, modeling

    model = tmp_path / "model"
    shutil.copytree(source, model)
    config = ModelConfig(model=str(model), trust_pickle=True)
    model_dir = model_source.model_dir_of(config)
    pipeline = modeling.load_pipeline(config, DataConfig(cache_dir=str(tmp_path / "cache")), None, False, model_dir)
    labels = len(model_dir.labels)  # the head it has: nothing newly initialised
    net = modeling.build_model(config, "sequence", labels, pipeline, None, model_dir)
    assert net.classifier.weight.shape[-1] == labels and pipeline.vocab_size <= net.config.vocab_size
    _assert_read_once(examined(model))


def test_distill_reads_its_teacher_once(tmp_path, examined):
    """What distill asks of --teacher before training (its checkpoint, task, run, labels, inherited settings)."""
    from ernie_ft.distill import teacher

    best = tmp_path / "teacher" / "best"
    shutil.copytree(RUN, best)
    found = teacher.teacher_dir(str(best.parent))
    assert found == str(best)
    assert teacher.teacher_task(found) == "classify" and teacher.recorded_run(found)["task"] == "classify"
    assert teacher.teacher_labels(found) == json.loads((RUN / "labels.json").read_text("utf-8"))
    assert teacher.inherited_data(found, {})["max_len"] == teacher.recorded_run(found)["run"]["data"]["max_len"]
    assert teacher.label_set_options(found, {}) == {}
    _assert_read_once(examined(best))
    best.rename(best.parent / "best.old")  # a new checkpoint swapped in (as training saves one) is read again
    shutil.copytree(RUN, best, ignore=shutil.ignore_patterns("labels.json"))
    with pytest.raises(UserError, match=f"^--teacher {best}: no labels.json"):
        teacher.teacher_labels(found)
