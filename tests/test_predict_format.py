"""predict --format label-studio|doccano: the answers written as an annotation tool's import, streamed as predict
streams (issue 49, item 2); Label Studio's JSON array continued by --resume after an interruption."""

import json

import pytest
from conftest import DATA

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.data import pre_annotations
from ernie_ft.errors import UserError
from ernie_ft.inference import outputs
from ernie_ft.task import load_task


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("format") / "run"
    train = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:2x64", "--threads", "1", "--epochs",
             "1", "--max-len", "32", "--output", str(out)]  # fmt: skip
    assert task_command("classify")(train) == 0
    return out


def test_the_imports_hold_the_answers_and_read_back_as_their_labels(model, tmp_path):
    pool = str(DATA / "predict.txt")
    answers = tmp_path / "answers.jsonl"
    assert cli(["predict", "--model", str(model), "--input", pool, "--output", str(answers)]) == 0
    records = [json.loads(line) for line in answers.read_text(encoding="utf-8").splitlines()]
    studio, doccano = tmp_path / "tasks.json", tmp_path / "doccano.jsonl"
    common = ["predict", "--model", str(model), "--input", pool, "--chunk-size", "3"]  # several chunks
    assert cli([*common, "--format", "label-studio", "--output", str(studio)]) == 0
    assert cli([*common, "--format", "doccano", "--output", str(doccano)]) == 0
    version = "run"  # the run's name, as serve calls it (outputs.model_name)
    assert json.loads(studio.read_text(encoding="utf-8")) == [
        pre_annotations.label_studio_task(r, version) for r in records
    ]
    assert [json.loads(line) for line in doccano.read_text(encoding="utf-8").splitlines()] == [
        pre_annotations.doccano_record(r) for r in records
    ]
    for path, on in ((studio, DataConfig(predictions_as_labels=True)), (doccano, DataConfig())):
        assert [e.label for e in load_task("classify").read(str(path), on, "--train")] == [r["label"] for r in records]


def test_a_label_studio_array_cut_by_a_kill_is_continued_to_a_whole_array(tmp_path):
    path = tmp_path / "tasks.json"
    first = outputs.JsonArray(str(path))
    first.write([{"n": 0}, {"n": 1}])
    first.file.write(',\n{"n": 2, "cut')  # killed while writing the third
    first.file.close()
    again = outputs.JsonArray(str(path), resume=True)
    assert again.done == 2
    again.write([{"n": 2}, {"n": 3}])
    again.close()
    assert json.loads(path.read_text(encoding="utf-8")) == [{"n": n} for n in range(4)]
    closed = outputs.JsonArray(str(path), resume=True)  # a whole array: its "]" goes, its answers stay
    assert closed.done == 4
    closed.close()
    assert json.loads(path.read_text(encoding="utf-8")) == [{"n": n} for n in range(4)]
    empty = tmp_path / "empty.json"
    outputs.JsonArray(str(empty)).close()
    assert json.loads(empty.read_text(encoding="utf-8")) == []
    (tmp_path / "other.json").write_text('{"n": 0}\n', encoding="utf-8")
    with pytest.raises(UserError, match="not a JSON array written by predict"):
        outputs.JsonArray(str(tmp_path / "other.json"), resume=True)


def test_formats_that_cannot_be_written_are_refused(model, tmp_path, capsys):
    common = ["predict", "--model", str(model), "--input", str(DATA / "predict.txt")]
    assert cli([*common, "--format", "label-studio", "--output", str(tmp_path / "t.parquet")]) == 2
    assert "--format label-studio writes JSON" in capsys.readouterr().err
    assert cli([*common, "--format", "label-studio", "--shard", "1/2", "--output", str(tmp_path / "t.json")]) == 2
    assert "the parts of one JSON array cannot be joined" in capsys.readouterr().err
