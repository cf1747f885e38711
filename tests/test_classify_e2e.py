"""The classification command line end to end on the project's sample data and a tiny checkpoint."""

import json
import shutil

import numpy as np
import pytest
import yaml
from conftest import DATA, ROOT, saved_weights

from ernie_ft.cli import task_command

main = task_command("classify")

TRAIN, DEV = str(DATA / "sentiment_train.tsv"), str(DATA / "sentiment_dev.tsv")
TEST_CSV, TEST_JSONL = str(DATA / "sentiment_test.csv"), str(DATA / "sentiment_test.jsonl")


def train_args(model, out, *extra):
    return [
        "--train",
        TRAIN,
        "--model",
        model,
        "--output",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "2e-3",
        "--max-len",
        "48",
        "--stride",
        "8",
        "--threads",
        "1",
        "--log-steps",
        "5",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(train_args(tiny_checkpoint, out, "--dev", DEV, "--test", TEST_CSV, "--eval-steps", "10")) == 0
    return out


def test_training_writes_a_ready_checkpoint_metrics_logs_and_curves(trained):
    best = trained / "best"
    assert not (best / "model_state.pdparams").exists()  # weights as safetensors, never a pickle
    for name in (
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer_config.json",
        "labels.json",
        "ernie_ft.yaml",
    ):
        assert (best / name).is_file(), name
    assert json.loads((best / "labels.json").read_text(encoding="utf-8")) == ["正面", "负面"]
    metrics = json.loads((trained / "metrics.json").read_text(encoding="utf-8"))
    for split in ("dev", "test"):
        assert 0.0 <= metrics[split]["accuracy"] <= 1.0 and "macro_f1" in metrics[split]
    evaluations = [json.loads(line) for line in (trained / "evaluations.jsonl").read_text().splitlines()]
    dev_evals = [e for e in evaluations if e["split"] == "dev"]
    assert len(dev_evals) >= 3 and max(e["accuracy"] for e in dev_evals) == metrics["dev"]["accuracy"]
    assert any((trained / "vdl").iterdir())
    assert (trained / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_loads_in_plain_paddlenlp(trained):
    from paddlenlp.transformers import ErnieForSequenceClassification, ErnieTokenizer

    model = ErnieForSequenceClassification.from_pretrained(str(trained / "best"))
    tokenizer = ErnieTokenizer.from_pretrained(str(trained / "best"))
    assert model.config.num_labels == 2 and tokenizer.vocab_size == model.config.vocab_size


def test_predict_writes_one_record_per_input_with_probabilities(trained, tmp_path):
    long_text = "这家酒店的服务非常好，" * 30  # far beyond --max-len 48: several windows, one record
    source = tmp_path / "in.txt"
    source.write_text("\n".join([long_text, "质量太差了，再也不买", "物流很快，推荐购买"]) + "\n", encoding="utf-8")
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(trained), "--input", str(source), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in records] == [long_text, "质量太差了，再也不买", "物流很快，推荐购买"]
    for r in records:
        assert r["label"] in ("正面", "负面") and abs(sum(r["probs"].values()) - 1) < 1e-4
        assert r["label"] == max(r["probs"], key=r["probs"].get)


def test_evaluate_reproduces_the_test_metrics_and_draws_the_confusion_matrix(trained, tmp_path, capsys):
    from ernie_ft.cli import evaluate

    metrics = json.loads((trained / "metrics.json").read_text(encoding="utf-8"))["test"]
    for source in (TEST_CSV, TEST_JSONL):  # same examples in two formats
        out_dir = tmp_path / source[-5:]
        assert evaluate(["--model", str(trained / "best"), "--input", source, "--output-dir", str(out_dir)]) == 0
        scored = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
        assert scored["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-9)
        assert (out_dir / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "正面" in printed and "macro" in printed


def test_default_evaluation_directories_are_beside_the_input_and_never_replace_another_checkpoints(
    trained, tmp_path, capsys
):
    """Without --output an evaluation goes to eval-<input name>/ beside the input, never into the model's or the
    run's directory (an export or a checkpoint is shared as it is); a second checkpoint's goes to -2/, and the same
    checkpoint on the same file again reuses its own. --output and its earlier name --output-dir choose the place, and
    one that cannot be made is one error line naming --output."""
    from ernie_ft.cli import evaluate

    run = tmp_path / "run"
    for name in ("best", "best-epoch1"):  # two checkpoints of one run
        shutil.copytree(trained / "best", run / name)
    rows = open(TEST_CSV, encoding="utf-8").read().splitlines(keepends=True)
    first, second = tmp_path / "a" / "test.csv", tmp_path / "b" / "test.csv"  # two files of the same name
    for path, lines in ((first, rows), (second, rows[:3])):
        path.parent.mkdir()
        path.write_text("".join(lines), encoding="utf-8")
    calls = [(run / "best", first), (run / "best", second), (run / "best-epoch1", first), (run / "best", first)]
    for model, source in calls:
        assert evaluate(["--model", str(model), "--input", str(source)]) == 0
    written = [
        line.split("metrics: ")[1] for line in capsys.readouterr().out.splitlines() if line.startswith("metrics: ")
    ]
    places = [first.parent / "eval-test", second.parent / "eval-test", first.parent / "eval-test-2"]
    assert written == [str(d / "metrics.json") for d in [*places, places[0]]]
    assert sorted(p.name for p in run.iterdir()) == ["best", "best-epoch1"]  # nothing in the run or its models
    assert not list(run.rglob("eval-*"))
    for d, (model, source) in zip(places, calls):
        held = json.loads((d / "source.json").read_text(encoding="utf-8"))
        assert held == {"model": str(model), "input": str(source)}
    for d, reviews in ((places[0], len(rows) - 1), (places[1], 2)):  # each file's evaluation, kept
        per_class = json.loads((d / "metrics.json").read_text(encoding="utf-8"))["per_class"]
        assert sum(c["support"] for c in per_class.values()) == reviews
    for flag in ("--output", "--output-dir"):
        assert evaluate(["--model", str(run / "best"), "--input", str(second), flag, str(tmp_path / flag)]) == 0
        assert (tmp_path / flag / "metrics.json").is_file()
    capsys.readouterr()
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    assert evaluate(["--model", str(run / "best"), "--input", str(second), "--output", str(blocked / "e")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    expected = f"cannot write the evaluation to {blocked / 'e'} (--output): Not a directory; give --output DIR"
    assert last == f"error: {expected}"


def _weights(path):
    return saved_weights(path / "best")


def test_resume_ends_with_the_same_weights_as_an_uninterrupted_run(tiny_checkpoint, tmp_path):
    common = ["--grad-accum", "2", "--seed", "3"]
    assert main(train_args(tiny_checkpoint, tmp_path / "full", *common)) == 0
    assert main(train_args(tiny_checkpoint, tmp_path / "cut", *common, "--stop-after-steps", "5")) == 0
    assert not (tmp_path / "cut" / "best").exists() and (tmp_path / "cut" / "last").is_dir()
    assert main(train_args(tiny_checkpoint, tmp_path / "cut", *common, "--resume")) == 0
    full, resumed = _weights(tmp_path / "full"), _weights(tmp_path / "cut")
    assert full.keys() == resumed.keys()
    for name in full:
        np.testing.assert_allclose(resumed[name], full[name], rtol=0, atol=1e-6, err_msg=name)
    # and the interruption was real: a run that stopped early differs from the full one
    assert main(train_args(tiny_checkpoint, tmp_path / "short", *common, "--epochs", "1")) == 0
    short = _weights(tmp_path / "short")
    assert any(not np.allclose(short[n], full[n]) for n in full)


def test_scratch_model_with_a_vocabulary_built_from_train_and_sentence_pairs(tmp_path):
    out = tmp_path / "pairs"
    args = [
        "--train",
        str(DATA / "pairs_train.tsv"),
        "--dev",
        str(DATA / "pairs_dev.tsv"),
        "--model",
        "scratch:tiny",
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--threads",
        "1",
    ]
    assert main(args) == 0
    vocab = (out / "best" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:4] == ["[PAD]", "[CLS]", "[SEP]", "[MASK]"] and vocab[-1] == "[UNK]"
    assert json.loads((out / "best" / "labels.json").read_text()) == ["0", "1"]


def test_custom_task_trains_through_the_same_trainer(tmp_path, monkeypatch):
    from ernie_ft.cli import main as ernie_ft_main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "intent"
    args = [
        "--task",
        "tasks/multilabel_intent.py:MultiLabelIntent",
        "--train",
        "data/intent_train.jsonl",
        "--dev",
        "data/intent_dev.jsonl",
        "--model",
        "scratch:tiny",
        "--output",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "2e-3",
        "--threads",
        "1",
        "--threshold",
        "0.9",
    ]  # a task option
    assert ernie_ft_main(args) == 0
    assert yaml.safe_load((out / "best" / "ernie_ft.yaml").read_text())["run"]["task"] == {"threshold": 0.9}
    assert "micro_f1" in json.loads((out / "metrics.json").read_text())["dev"]
    pred = tmp_path / "p.jsonl"
    assert (
        ernie_ft_main(["predict", "--model", str(out), "--input", "data/intent_dev.jsonl", "--output", str(pred)]) == 0
    )
    records = [json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines()]
    assert set(records[0]["probs"]) == set(json.loads((out / "best" / "labels.json").read_text()))
    for record in records:  # the checkpoint brought the task's threshold back
        assert record["labels"] == [label for label, p in record["probs"].items() if p >= 0.9]

    exported = tmp_path / "onnx"  # the custom task's model through ONNX Runtime predicts what dygraph predicts
    assert ernie_ft_main(["export", "--model", str(out), "--output", str(exported), "--format", "onnx"]) == 0
    onnx_pred = tmp_path / "onnx.jsonl"
    command = ["predict", "--model", str(exported), "--input", "data/intent_dev.jsonl", "--output", str(onnx_pred)]
    assert ernie_ft_main([*command, "--engine", "onnxruntime"]) == 0
    onnx_records = [json.loads(line) for line in onnx_pred.read_text(encoding="utf-8").splitlines()]
    assert len(onnx_records) == len(records)
    for a, b in zip(onnx_records, records):
        assert a["probs"].keys() == b["probs"].keys()
        assert all(abs(a["probs"][k] - b["probs"][k]) <= 1e-4 for k in a["probs"]), (a, b)


def test_exported_model_predicts_like_dygraph_with_paddle_inference(trained, tmp_path):
    from ernie_ft.cli import export as export_main
    from ernie_ft.inference.predict import resolve_engine

    exported = tmp_path / "exported"
    assert export_main(["--model", str(trained), "--output", str(exported)]) == 0
    assert (exported / "inference.pdiparams").is_file() and (exported / "labels.json").is_file()
    assert export_main(["--model", str(trained), "--output", str(exported)]) == 2  # refuses to overwrite
    long_text = "服务员态度很好，房间也干净，" * 20  # several windows
    source = tmp_path / "in.txt"
    source.write_text("\n".join([long_text, "质量太差了，再也不买", "还行吧"]) + "\n", encoding="utf-8")
    runs = {}
    for engine, model in (("dygraph", trained), ("inference", exported)):
        out = tmp_path / f"{engine}.jsonl"
        assert (
            main(["predict", "--model", str(model), "--input", str(source), "--output", str(out), "--engine", engine])
            == 0
        )
        runs[engine] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["label"] for r in runs["inference"]] == [r["label"] for r in runs["dygraph"]]
    for a, b in zip(runs["dygraph"], runs["inference"]):
        assert b["probs"] == pytest.approx(a["probs"], abs=1e-5)
    for model, engine in ((exported, "inference"), (trained, "dygraph")):  # without --engine: auto
        assert resolve_engine(str(model), "auto") == engine
        out = tmp_path / f"auto-{engine}.jsonl"
        assert main(["predict", "--model", str(model), "--input", str(source), "--output", str(out)]) == 0
        assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == runs[engine]
    assert main(["predict", "--model", str(trained), "--input", str(source), "--engine", "inference"]) == 2
