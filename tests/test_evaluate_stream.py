"""``evaluate`` over a labelled file chunk by chunk: the same metrics, report, pictures and errors.txt as the file read
whole, a bad record of a later chunk named by its line in the file, the note where a file is read whole, and memory
that does not grow with the input."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from test_relation import duie

from ernie_ft import cli
from ernie_ft.inference.evaluate import EvaluateOptions, evaluate_whole
from ernie_ft.inference.predict import load_for_inference, run_inference

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0.1"
TAGGER = str(FIXTURES / "ner")


def spread(source: Path, weights: str, data: Path, to: Path, scale: float) -> str:
    """A copy of the random checkpoint ``source`` whose output layer is ``scale`` times wider and centred on ``data``
    (each output's median over its rows subtracted), so that its predictions differ between texts: the fixtures' own
    predict one label for every text and no entity, which any order of gold labels scores alike."""
    import paddle

    shutil.copytree(source, to)
    loaded, config = load_for_inference(str(to), "cpu", {}, trust_pickle=True)
    _, _, logits = run_inference(loaded, config, str(data), "--input", True, 64)
    rows = np.concatenate(list(logits)) if isinstance(logits, list) else logits
    state = paddle.load(str(to / weights))
    bias = state["classifier.bias"].numpy()
    state["classifier.weight"] = state["classifier.weight"] * scale
    state["classifier.bias"] = paddle.to_tensor((scale * (bias - np.median(rows, axis=0))).astype(bias.dtype))
    paddle.save(state, str(to / weights))
    return str(to)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """The v0.1 classifier and CRF tagger, spread (``spread``)."""
    home = tmp_path_factory.mktemp("spread")
    classify = FIXTURES / "classify"
    nested = home / "nested"  # a span model (ner --nested): its decode and errors.txt are the tagger's tally's too
    train = ["--train", str(DATA / "ner_train.jsonl"), "--nested", "--model", "scratch:2x64", "--threads", "1",
             "--epochs", "6", "--max-len", "64", "--threshold", "0.1", "--output", str(nested)]  # fmt: skip
    assert cli.task_command("ner")(train) == 0
    paths = home / "paths"  # label paths, several a text (classify --multi-label --hierarchy-separator)
    train = ["--train", str(DATA / "news_tags_train.tsv"), "--dev", str(DATA / "news_tags_dev.tsv"),
             "--label-column", "labels", "--multi-label", "--label-separator", "|", "--hierarchy-separator", "-",
             "--model", "scratch:2x64", "--threads", "1", "--epochs", "30", "--batch-size", "16", "--lr", "3e-3",
             "--dropout", "0", "--max-len", "64", "--output", str(paths)]  # fmt: skip
    assert cli.task_command("classify")(train) == 0
    relations, triples = home / "relations", home / "duie.jsonl"  # a relation model that finds entities, some wrong
    triples.write_text(duie(), encoding="utf-8")
    train = ["--train", str(triples), "--dev", str(triples), "--model", "scratch:2x64", "--threads", "1",
             "--max-len", "32", "--epochs", "40", "--batch-size", "6", "--lr", "3e-3", "--dropout", "0", "--seed", "2",
             "--output", str(relations)]  # fmt: skip
    assert cli.task_command("relation")(train) == 0
    return {
        "duie.jsonl": triples,
        "relations": str(relations),
        "paths": str(paths),
        "classifier": spread(classify, "best/model_state.pdparams", DATA / "sentiment_test.jsonl", home / "c", 1000),
        "tagger": spread(FIXTURES / "ner", "model_state.pdparams", DATA / "ner_dev.jsonl", home / "t", 100),
        "nested": str(nested),
    }


def evaluate(model, path, out_dir, *extra, status=0) -> str:
    args = ["evaluate", "--model", model, "--trust-pickle", "--device", "cpu", "--input", str(path)]
    assert cli.main([*args, "--output-dir", str(out_dir), *extra]) == status
    return str(out_dir)


def whole_file_report(model, path, out_dir) -> str:
    """The report of the whole-file path ``evaluate`` took for every input before it streamed."""
    loaded, data = load_for_inference(model, "cpu", {}, trust_pickle=True)
    where = {"model": loaded.directory, "input": str(path)}
    _, _, report = evaluate_whole(loaded, data, EvaluateOptions(model, str(path)), str(out_dir), where)
    return report


@pytest.mark.parametrize(
    "model, source, written",
    [("classifier", "sentiment_test.jsonl", "confusion_matrix.png"),
     ("classifier", "sentiment_dev.tsv", "confusion_matrix.png"), ("tagger", "ner_dev.jsonl", "errors.txt"),
     ("nested", "ner_dev.jsonl", "errors.txt"), ("paths", "news_tags_dev.tsv", "label_scores.png"),
     ("relations", "duie.jsonl", None)],
    ids=["classify-jsonl", "classify-tsv", "ner-jsonl", "nested-ner-jsonl", "label-paths-tsv", "relation-duie"],
)  # fmt: skip
def test_streamed_metrics_equal_the_whole_file_ones(model, source, written, models, tmp_path, capsys):
    model, source = models[model], models.get(source, DATA / source)
    chunk = "2" if written is None else "7"  # the six relation sentences in three chunks
    streamed = evaluate(model, source, tmp_path / "streamed", "--chunk-size", chunk)
    out, err = capsys.readouterr()
    assert "is read whole" not in err  # it did stream
    whole = tmp_path / "whole"
    report = whole_file_report(model, source, whole)
    assert report.replace(str(whole), streamed) in out
    metrics = json.loads((Path(streamed) / "metrics.json").read_text("utf-8"))
    assert metrics == json.loads((whole / "metrics.json").read_text("utf-8"))
    if written is None:  # relations: a table of counts, no file
        assert metrics["predicted_triples"] > 0 and 0 < metrics["entity_f1"] < 1, metrics
        return
    assert (Path(streamed) / written).read_bytes() == (whole / written).read_bytes()
    if written == "confusion_matrix.png":  # the predictions differ between texts, so the order of gold labels counts
        assert 0 < metrics["accuracy"] < 1 and all(row["f1"] > 0 for row in metrics["per_class"].values()), metrics
    elif written == "label_scores.png":  # label sets decided text by text, scored over the whole file
        assert 0 < metrics["subset_accuracy"] < metrics["level1_micro_f1"] < 1, metrics
    else:  # mistakes listed by their line in the file
        assert f"\n{source}:" in (whole / written).read_text("utf-8")
        assert 0 < metrics["f1"] < 1, metrics


def test_a_bad_record_in_a_later_chunk_is_named_by_its_file_line(models, tmp_path, capsys):
    classifier = models["classifier"]
    lines = (DATA / "sentiment_test.jsonl").read_text("utf-8").splitlines()[:12]
    lines[9] = json.dumps({"text": "好", "label": "中性"}, ensure_ascii=False)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + "\n".join(lines) + "\n", encoding="utf-8")  # a blank first line: lines are not positions
    evaluate(classifier, path, tmp_path / "out", "--chunk-size", "4", status=2)
    err = capsys.readouterr().err
    assert f"error: {path}:11: label '中性' (--input) does not occur in the training data" in err, err
    lines[9] = json.dumps({"text": "好"}, ensure_ascii=False)  # the reader's own message
    path.write_text("\n" + "\n".join(lines) + "\n", encoding="utf-8")
    evaluate(classifier, path, tmp_path / "out", "--chunk-size", "4", status=2)
    err = capsys.readouterr().err
    assert f"--input: {path}:11" in err and "ernie_ft-evaluate-" not in err, err


def test_a_file_that_cannot_stream_is_read_whole_with_a_note(tmp_path, capsys):
    path = DATA / "ner_test_bio.conll"  # CoNLL: a text over several lines
    evaluate(TAGGER, path, tmp_path / "streamed")
    out, err = capsys.readouterr()
    assert f"note: --input {path} is read whole: it looks like CoNLL" in err
    assert (
        whole_file_report(TAGGER, path, tmp_path / "whole").replace(str(tmp_path / "whole"), str(tmp_path / "streamed"))
        in out
    )


# ------------------------------------------------------------------------------------- in its own process: memory


def peak_rss(args) -> int:
    """The peak resident memory (KiB) of ``python -m ernie_ft ARGS``, measured around it by a fresh process."""
    code = (
        "import resource, subprocess, sys; status = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if status == 0 else -1)"
    )
    command = [sys.executable, "-c", code, sys.executable, "-m", "ernie_ft", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    peak = done.stdout.split()[-1]  # after evaluate's own report
    assert peak != "-1", done.stderr[-3000:]
    return int(peak)


def test_memory_does_not_grow_with_the_input(tmp_path):
    records = (DATA / "sentiment_test.jsonl").read_text("utf-8").splitlines()
    memory = {}
    for name, n in (("small", 2_000), ("large", 20_000)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(records[i % len(records)] + "\n" for i in range(n)), encoding="utf-8")
        args = ["evaluate", "--model", str(FIXTURES / "classify"), "--trust-pickle", "--device", "cpu"]
        memory[name] = peak_rss(
            [*args, "--input", str(path), "--output-dir", str(tmp_path / name), "--chunk-size", "64"]
        )
    # read whole, 2,000 to 20,000 of these lines grew 25 % (613 to 768 MB); streamed, 0.4 % (592 to 594 MB)
    assert memory["large"] < 1.10 * memory["small"], memory
