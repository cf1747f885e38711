"""--label-names: integer-coded labels get names that the checkpoint keeps and every output shows."""

import json

import pytest
from conftest import DATA

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError
from ernie_ft.recipes import build_config

classify = task_command("classify")
CODES = {"负面": "0", "正面": "1"}


def coded_copy(source, target, codes=CODES):
    """The sample reviews with their labels written as codes."""
    lines = source.read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t", 1) for line in lines[1:]]
    target.write_text(lines[0] + "\n" + "".join(f"{codes[label]}\t{text}\n" for label, text in rows), "utf-8")
    return target


def test_the_mapping_is_parsed_and_checked_before_any_file_is_read():
    assert DataConfig(label_names="0=负面, 1=正面").label_name_map() == {"0": "负面", "1": "正面"}
    assert DataConfig().label_name_map() == {}
    for bad, fragment in (
        ("0:负面", "not CODE=NAME"),
        ("0=负面,0=差评", "named twice"),
        ("0=好,1=好", "more than one"),
    ):
        with pytest.raises(UserError, match=fragment):
            DataConfig(label_names=bad)
    recipe = {"data": {"train": "t.tsv", "label_names": {0: "负面", 1: "正面"}}}  # YAML gives integer keys
    assert build_config(recipe, {}).data.label_name_map() == {"0": "负面", "1": "正面"}


def test_coded_labels_train_predict_and_evaluate_under_their_names(tmp_path, capsys):
    train = coded_copy(DATA / "sentiment_train.tsv", tmp_path / "train.tsv")
    dev = coded_copy(DATA / "sentiment_dev.tsv", tmp_path / "dev.tsv")
    out = tmp_path / "run"
    args = ["--train", str(train), "--dev", str(dev), "--model", "scratch:tiny", "--epochs", "1", "--threads", "1"]
    assert classify([*args, "--label-names", "0=负面,1=正面", "--max-len", "32", "--output", str(out)]) == 0
    assert json.loads((out / "best" / "labels.json").read_text(encoding="utf-8")) == ["负面", "正面"]  # codes' order

    (tmp_path / "new.txt").write_text("房间很干净\n服务太差了\n", encoding="utf-8")
    predictions = tmp_path / "pred.jsonl"
    assert (
        cli(["predict", "--model", str(out), "--input", str(tmp_path / "new.txt"), "--output", str(predictions)]) == 0
    )
    records = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 and all(
        r["label"] in ("负面", "正面") and set(r["probs"]) == {"负面", "正面"} for r in records
    )

    # a file still in codes is scored with the saved names; one with the names reads the same
    for name, path in (("coded", dev), ("named", DATA / "sentiment_dev.tsv")):
        assert cli(["evaluate", "--model", str(out), "--input", str(path), "--output-dir", str(tmp_path / name)]) == 0
        metrics = json.loads((tmp_path / name / "metrics.json").read_text(encoding="utf-8"))
        assert set(metrics["per_class"]) == {"负面", "正面"}
    assert (tmp_path / "coded" / "metrics.json").read_text() == (tmp_path / "named" / "metrics.json").read_text()

    # a code the mapping does not name is an error at its line, not a new class
    bad = tmp_path / "bad.tsv"
    bad.write_text("label\ttext_a\n1\t很好\n2\t一般\n", encoding="utf-8")
    capsys.readouterr()
    assert cli(["evaluate", "--model", str(out), "--input", str(bad), "--output-dir", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: the label '2' has no name in --label-names (0=负面, 1=正面); add 2=NAME" in err


def test_tasks_without_a_label_set_refuse_the_flag(capsys):
    with pytest.raises(SystemExit) as exit:  # argparse's own exit, as for every unknown flag
        task_command("ner")(["--train", str(DATA / "ner_train.jsonl"), "--label-names", "0=a", "--output", "x"])
    assert exit.value.code == 2
    assert "error: --label-names does not apply to python -m ernie_ft.ner (entity types are named in the data)" in (
        capsys.readouterr().err
    )
