"""Start training from Label Studio on what the served model was trained on (``serving.run_data``), for the served
models issue 57 left out: a multi-label classifier trained on 0/1 columns or on one column of separated labels, and
an int8 export whose training file is gone. Tiny models trained in this process; the run's recipe is trained as
``retrain`` trains it (without Label Studio: the project's export is a file written here)."""

import json
import os
import shutil

import pytest
from conftest import DATA

from ernie_ft.cli import task_command
from ernie_ft.errors import UserError
from ernie_ft.serving import exported_model, run_data
from ernie_ft.serving.retrain import continued

TINY = ["--model", "scratch:tiny", "--max-len", "32", "--epochs", "1", "--threads", "1", "--seed", "1"]
TOPICS = {"体育": "比赛球队冠军进球", "娱乐": "电影明星演唱会", "财经": "股票市场银行利率"}


def project(texts_and_labels) -> list:
    """A Label Studio export: one annotated task per (text, labels), ids from 1."""
    return [
        {"id": i, "data": {"text": text}, "annotations": [{"result": [
            {"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": list(labels)}}]}]}
        for i, (text, labels) in enumerate(texts_and_labels, 1)
    ]  # fmt: skip


def topical(n: int, offset: int = 0) -> list:
    """``n`` (text, topics) pairs, each text made of its topics' characters."""
    rows = []
    for i in range(offset, offset + n):
        topics = [t for k, t in enumerate(TOPICS) if (i >> k) & 1]
        rows.append(("".join(TOPICS[t][i % 3 : i % 3 + 3] for t in topics) + f"第{i}条", topics))
    return rows


def retrain(model: str, tasks: list, tmp_path) -> str:
    """The run's data and recipe for the served ``model`` and the project's ``tasks``, then its training; the new
    model's directory."""
    export, run = tmp_path / "export.json", tmp_path / "run"
    export.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    run_data.write_data(model, str(export), ("text",), str(run))
    assert task_command("classify")(["--config", str(run / "recipe.yaml")]) == 0
    return str(run / "model" / "best")


@pytest.mark.parametrize("layout", ["columns", "separator"])
def test_a_multi_label_models_files_are_read_for_its_run_whatever_holds_the_labels(layout, tmp_path):
    """0/1 columns (--label-columns 'category_*') or one column split at '|' (--label-column tags
    --label-separator '|'): the run's recipe reads the Label Studio tasks it wrote, and its model learns the served
    model's labels (planted: the recipe keeping label_columns -> 'the pattern matches no column of --train', failed;
    keeping label_column tags -> 'no text has a label', failed)."""
    rows = topical(40)
    if layout == "columns":
        lines = ["text," + ",".join(f"category_{t}" for t in TOPICS)]
        lines += [text + "," + ",".join("1" if t in topics else "0" for t in TOPICS) for text, topics in rows]
        flags = ["--label-columns", "category_*"]
        name = lambda t: f"category_{t}"  # noqa: E731
    else:
        lines = ["tags\ttext", *(f"{'|'.join(topics)}\t{text}" for text, topics in rows)]
        flags = ["--label-column", "tags", "--label-separator", "|"]
        name = lambda t: t  # noqa: E731
    train = tmp_path / ("train.csv" if layout == "columns" else "train.tsv")
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    served = tmp_path / "served"
    args = ["--train", str(train), "--multi-label", *flags, *TINY, "--output", str(served)]
    assert task_command("classify")(args) == 0
    tasks = project((text, [name(t) for t in topics]) for text, topics in topical(30, offset=40))
    new = retrain(str(served), tasks, tmp_path)
    labels = json.loads((served / "best" / "labels.json").read_text(encoding="utf-8"))
    assert json.loads(open(os.path.join(new, "labels.json"), encoding="utf-8").read()) == labels
    summary = json.loads((tmp_path / "run" / "data" / "summary.json").read_text())
    assert summary["original"] == 40 and summary["gone"] is None  # the served model's texts, all of them


@pytest.fixture(scope="module")
def gone(tmp_path_factory):
    """(A classifier's run whose training file is gone, its int8 export as serve --export int8 writes it, the
    project's tasks.)"""
    home = tmp_path_factory.mktemp("gone")
    train = home / "train.tsv"
    shutil.copy(DATA / "sentiment_train.tsv", train)
    run = home / "run"
    assert task_command("classify")(["--train", str(train), *TINY, "--output", str(run)]) == 0
    exported = exported_model(str(run), False, None, "int8")  # calibrated on the training file, then gone
    train.unlink()
    lines = (DATA / "sentiment_dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    tasks = project((line.split("\t")[1], [line.split("\t")[0]]) for line in lines)
    return run, exported, tasks


def test_an_int8_export_whose_training_file_is_gone_continues_from_its_checkpoint(gone, tmp_path):
    """serve --export int8 serves DIR/best-int8, which keeps no fp32 weights: the run continues from DIR/best, whose
    weights are those the export recorded, and says so; a run's directory named as export --output RUN-int8 is found
    too (planted: continuing from the served directory itself -> 'not a model directory', failed; the run's best/
    not looked in -> the RUN-int8 copy failed)."""
    run, exported, tasks = gone
    named = shutil.copytree(exported, tmp_path / "run-int8")  # as `export --model run --output run-int8` names it
    shutil.copytree(run, tmp_path / "run")
    for served, checkpoint in ((exported, run / "best"), (named, tmp_path / "run" / "best")):
        out = tmp_path / "runs" / os.path.basename(served)
        out.mkdir(parents=True)
        new = retrain(str(served), tasks, out)
        summary = json.loads((out / "run" / "data" / "summary.json").read_text())
        assert summary["continue_from"] == str(checkpoint) and summary["original"] == 0, summary
        assert os.path.isfile(os.path.join(new, "model.safetensors"))
    line = continued(summary, "run-int8", str(named))
    assert "train.tsv is gone: training continues from the served weights (run-int8, exported from " in line, line
    assert line.endswith(f"{checkpoint}) on the project's {summary['train']} training tasks"), line


def test_without_that_checkpoint_the_run_stops_with_one_line_naming_what_is_missing(gone, tmp_path, capsys):
    """An int8 export elsewhere, or beside a checkpoint retrained since (its weights not the export's): one error
    line naming the training file and the weights, exit 2, no run written (planted: any checkpoint beside it taken,
    whatever its weights -> the retrained one was continued from, failed)."""
    run, exported, tasks = gone
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    elsewhere = shutil.copytree(exported, tmp_path / "deploy" / "sentiment")
    retrained = tmp_path / "retrained"
    shutil.copytree(run / "best", retrained)
    shutil.copytree(exported, tmp_path / "retrained-int8")
    (retrained / "model.safetensors").write_bytes((retrained / "model.safetensors").read_bytes() + b" ")
    for served in (elsewhere, tmp_path / "retrained-int8"):
        out = tmp_path / f"run-{served.name}"
        argv = ["--model", str(served), "--export", str(export), "--field", "text", "--output", str(out)]
        assert run_data.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("error: the served model's training file "), err
        assert "train.tsv is gone" in err and "model.safetensors" in err and str(served) in err, err
        assert not out.exists()
    with pytest.raises(UserError, match="put the training file back"):
        run_data.write_data(str(elsewhere), str(export), ("text",), str(tmp_path / "again"))
