"""Checkpoints written by ernie_ft 0.1 (before the trainer was split into setup/fit) keep working.

``tests/fixtures/v0.1`` was written by the code at commit 0733a08 from a 1 x 16 ERNIE (``base/``):
a classifier stopped after 20 of 44 steps (``classify/best``, ``classify/last``), that run's
predictions on data/sentiment_test.csv, the weights the same command reached uninterrupted
(``classify_uninterrupted.pdparams``), and a CRF tagger (``ner``) with its predictions on
data/ner_dev.jsonl. Their weights are pickles, so they load with --trust-pickle (tests/test_pickle_safety.py:
without it they are refused).
"""

import json
import shutil

import numpy as np
import paddle
import pytest
from conftest import DATA, ROOT

from ernie_ft.cli import task_command

OLD = ROOT / "tests" / "fixtures" / "v0.1"
TRAIN = [
    "--train",
    str(DATA / "sentiment_train.tsv"),
    "--dev",
    str(DATA / "sentiment_dev.tsv"),
    "--model",
    str(OLD / "base"),
    "--max-len",
    "32",
    "--epochs",
    "2",
    "--batch-size",
    "16",
    "--lr",
    "1e-3",
    "--threads",
    "1",
    "--eval-steps",
    "10",
    "--trust-pickle",
]  # 0.1 wrote weights as pickles


def predict(task, model, data, out):
    """``python -m ernie_ft.TASK predict`` (in this process): the records it wrote."""
    args = ["predict", "--model", str(model), "--input", str(data), "--output", str(out), "--device", "cpu"]
    assert task_command(task)([*args, "--trust-pickle"]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def expected(name):
    return [json.loads(line) for line in (OLD / name).read_text(encoding="utf-8").splitlines()]


def test_an_old_classifier_predicts_what_it_predicted(tmp_path):
    got = predict("classify", OLD / "classify", DATA / "sentiment_test.csv", tmp_path / "p.jsonl")
    old = expected("classify_predictions.jsonl")
    assert [r["text"] for r in got] == [r["text"] for r in old]
    for a, b in zip(got, old):
        assert a["probs"] == pytest.approx(b["probs"], abs=2e-6)


def test_an_old_crf_tagger_predicts_the_same_entities(tmp_path):
    got = predict("ner", OLD / "ner", DATA / "ner_dev.jsonl", tmp_path / "p.jsonl")
    old = expected("ner_predictions.jsonl")
    assert [[(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in got] == [
        [(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in old
    ]


def test_an_old_resumable_state_resumes_to_the_uninterrupted_weights(tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(OLD / "classify", out)
    assert task_command("classify")([*TRAIN, "--output", str(out), "--resume"]) == 0
    assert "resumed at step 20 (epoch 1, batch 20)" in capsys.readouterr().err
    final = paddle.load(str(out / "last" / "model.pdparams"))
    reference = paddle.load(str(OLD / "classify_uninterrupted.pdparams"))
    assert final.keys() == reference.keys()
    # One process, the same operations in the same order, but the reference was written on another CPU: Paddle's
    # AdamW fuses multiply-adds on AVX-512 machines only, so each of the 24 steps after the resume may round every
    # weight (all below 2 in size) one unit in the last place apart. A resume that lost the optimizer's moments or
    # the schedule moves weights by about the learning rate (1e-3) instead.
    tolerance = 24 * float(np.spacing(np.float32(2)))  # 5.7e-6; every weight nudged each step: 1.1e-6 apart
    for name in reference:
        np.testing.assert_allclose(final[name].numpy(), reference[name].numpy(), rtol=0, atol=tolerance, err_msg=name)


def test_an_old_checkpoint_of_a_task_named_by_a_relative_file_loads_from_where_it_was_trained(
    tmp_path, monkeypatch, capsys
):
    """ernie_ft 0.2 recorded a custom task's file relative to the working directory of training."""
    from ernie_ft.cli import main

    project = tmp_path / "project"
    project.mkdir()
    (project / "mytask.py").write_text("from ernie_ft.classify.task import Classification\n", encoding="utf-8")
    shutil.copytree(OLD / "classify", project / "run")
    meta_file = project / "run" / "best" / "ernie_ft.yaml"
    meta_file.write_text(
        meta_file.read_text(encoding="utf-8").replace("task: classify", "task: mytask.py:Classification")
    )
    args = ["predict", "--model", str(project / "run"), "--input", str(DATA / "sentiment_test.csv"), "--trust-pickle"]
    monkeypatch.chdir(project)
    assert main([*args, "--output", str(tmp_path / "p.jsonl")]) == 0
    got = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["label"] for r in got] == [r["label"] for r in expected("classify_predictions.jsonl")]
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "mytask.py:Classification, is not found" in err and "pass --task path/to/file.py:Class" in err
    assert main([*args, "--task", "project/mytask.py:Classification", "--output", str(tmp_path / "q.jsonl")]) == 0
    assert (tmp_path / "q.jsonl").read_text(encoding="utf-8") == (tmp_path / "p.jsonl").read_text(encoding="utf-8")
