"""One meaning of --threshold and --tune-thresholds in every task that decides by a threshold (ernie_ft/thresholds.py):
a probability in (0, 1); tuned on the dev part whatever made it (--dev or --dev-split), never on the test file;
taken by predict (and evaluate and serve) to decide with another probability; refused where it means nothing."""

import json
from pathlib import Path

import numpy as np
import pytest
import test_nested_ner
import test_relation
import yaml
from conftest import DATA

from ernie_ft import thresholds
from ernie_ft.classify import Classification
from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.relation.task import Relation
from ernie_ft.training.checkpoint import recorded_task

TINY = ["--model", "scratch:2x64", "--threads", "1", "--max-len", "32", "--batch-size", "8", "--seed", "3"]


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def run_files(tmp_path):
    """Per tuning task: (command, its training flags) on a file where every label occurs three times, so that
    --dev-split can hold some out."""
    news = (DATA / "news_tags_train.tsv").read_text(encoding="utf-8")
    return {
        "classify": [
            "--train", write(tmp_path / "news.tsv", news), "--label-column", "labels", "--multi-label",
            "--label-separator", "|", "--lr", "3e-3", "--epochs", "2",
        ],
        "ner": [
            "--nested", "--train", write(tmp_path / "cmeee.json", test_nested_ner.cmeee(test_nested_ner.SENTENCES * 3)),
            "--lr", "5e-3", "--epochs", "2",
        ],
        "relation": [
            "--train", write(tmp_path / "duie.jsonl", test_relation.duie(test_relation.SENTENCES * 3)),
            "--lr", "3e-3", "--epochs", "2",
        ],
    }  # fmt: skip


def saved_task(out) -> dict:
    return yaml.safe_load((out / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))["run"]["task"]


def tuned(saved: dict):
    """What the best checkpoint decides with: per-label thresholds (classify) or the one threshold."""
    return json.loads(saved["thresholds"]) if "thresholds" in saved else saved["threshold"]


@pytest.mark.parametrize("command", ["classify", "ner", "relation"])
def test_thresholds_are_tuned_on_the_dev_split_and_kept_by_the_best_checkpoint(tmp_path, capsys, command):
    """--dev-split with --tune-thresholds tunes on the held-out part (it used to tune nothing: the task compared
    example sources with --dev, None then), says so once, and the checkpoint decides with what the best dev
    evaluation chose; predict takes it."""
    out = tmp_path / "run"
    args = [*run_files(tmp_path)[command], *TINY, "--dev-split", "0.3", "--tune-thresholds", "--output", str(out)]
    assert task_command(command)(args) == 0
    err = capsys.readouterr().err
    assert err.count("thresholds tuned on the dev split held out of --train") == 1, err
    dev = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["dev"]
    key = "thresholds" if command == "classify" else "threshold"
    assert tuned(saved_task(out)) == dev[key]
    values = dev[key].values() if command == "classify" else [dev[key]]
    assert all(t in thresholds.GRID for t in values)


def test_the_test_file_is_scored_with_the_dev_threshold_never_tuned_on(tmp_path, capsys, monkeypatch):
    """Every tuning of a run with --dev and --test is on dev's texts, and the test file is scored at the threshold of
    the best dev evaluation, once, without a threshold of its own (it used to be tuned again on the test file). The
    test file differs from dev: a test file equal to dev would score the same whichever of the two was tuned on."""
    out, files = tmp_path / "run", run_files(tmp_path)
    dev = files["relation"][1]
    test = write(tmp_path / "test.jsonl", test_relation.duie(test_relation.SENTENCES[::-1][:4]))
    calls = []
    tune, evaluate = Relation.tune, Relation.evaluate

    def spy_tune(self, logits, features, examples, *rest):
        calls.append(("tune", examples[0].source, None))
        return tune(self, logits, features, examples, *rest)

    def spy_evaluate(self, logits, features, examples, *rest):
        calls.append(("evaluate", examples[0].source, self.threshold))
        return evaluate(self, logits, features, examples, *rest)

    monkeypatch.setattr(Relation, "tune", spy_tune)
    monkeypatch.setattr(Relation, "evaluate", spy_evaluate)
    args = [*files["relation"], *TINY, "--dev", dev, "--test", test, "--tune-thresholds", "--output", str(out)]
    assert task_command("relation")(args) == 0
    assert f"thresholds tuned on --dev {dev} (18 texts)" in capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    tuned_on = [source for kind, source, _ in calls if kind == "tune"]
    assert len(tuned_on) >= 2 and set(tuned_on) == {dev}, calls
    assert [c for c in calls if c[1] == test] == [("evaluate", test, metrics["dev"]["threshold"])], calls
    assert "threshold" not in metrics["test"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A model of each task that decides by a threshold (briefly trained: it finds many outputs at a low threshold,
    few at a high one), and a single-label classifier; with the texts to predict for each."""
    tmp_path = tmp_path_factory.mktemp("models")
    files, found = run_files(tmp_path), {}
    for command in ("relation", "ner", "classify"):
        found[command] = tmp_path / command
        assert task_command(command)([*files[command], *TINY, "--output", str(found[command])]) == 0
    found["single"] = tmp_path / "single"
    train = str(DATA / "sentiment_train.tsv")
    assert task_command("classify")(["--train", train, *TINY, "--epochs", "1", "--output", str(found["single"])]) == 0
    texts = write(tmp_path / "texts.txt", "".join(f"{t}\n" for t, _ in test_relation.SENTENCES))
    news = write(tmp_path / "news.txt", "\n".join(r.split("\t")[1] for r in files_rows()[:6]) + "\n")
    return found, {"relation": texts, "ner": texts, "classify": news, "single": news}


def predicted(model, inputs, out, *flags) -> list[dict]:
    assert cli(["predict", "--model", str(model), "--input", inputs, "--output", str(out), *flags]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_predict_decides_with_the_threshold_given_as_a_probability(models, tmp_path, capsys):
    """predict --threshold P: every predicted relation, entity, span and label scores above P, and a lower P never
    finds fewer; a value that is not a probability, or a model that decides by none, is a clear error."""
    dirs, inputs = models
    for command, items in (("relation", ("relations", "entities")), ("ner", ("entities",)), ("classify", ("labels",))):
        found = {}
        for p in (0.1, 0.9):
            records = predicted(
                dirs[command], inputs[command], tmp_path / f"{command}-{p}.jsonl", "--threshold", str(p)
            )
            if command == "classify":
                assert all(r["probs"][label] >= p for r in records for label in r["labels"])
                assert all(label in r["labels"] for r in records for label, v in r["probs"].items() if v >= p)
                found[p] = sum(len(r["labels"]) for r in records)
            else:
                scores = [x["score"] for r in records for item in items for x in r[item]]
                assert all(s > p for s in scores), (command, p)
                found[p] = len(scores)
        assert found[0.1] >= found[0.9] and found[0.1] > 0, (command, found)
    capsys.readouterr()
    assert cli(["predict", "--model", str(dirs["relation"]), "--input", inputs["relation"], "--threshold", "0"]) == 2
    assert "--threshold 0.0: give a probability between 0 and 1" in capsys.readouterr().err
    assert cli(["predict", "--model", str(dirs["single"]), "--input", inputs["single"], "--threshold", "0.3"]) == 2
    assert "--threshold does not apply to this classify model" in capsys.readouterr().err


def test_serve_decides_with_its_threshold_and_a_request_with_its_own(models, tmp_path):
    """serve --threshold P answers as predict --threshold P; a request's parameters.threshold decides that request
    alone (the next one without it gets the server's); a threshold a model cannot take is a 422 naming it."""
    from test_serve import ReadyClient

    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    dirs, inputs = models
    for command in ("relation", "ner", "classify"):
        texts = Path(inputs[command]).read_text(encoding="utf-8").splitlines()
        expected = {p: predicted(dirs[command], inputs[command], tmp_path / f"{command}-{p}.jsonl", "--threshold",
                                 str(p)) for p in (0.1, 0.6)}  # fmt: skip
        served = ServedModel(str(dirs[command]), "dygraph", "cpu", threshold=0.6)
        with ReadyClient(create_app(served)) as client:
            assert client.get("/v1/info").json()["threshold"] == {"request_range": [0.05, 1.0]}
            own = client.post("/v1/predict", json={"inputs": texts, "parameters": {"threshold": 0.1}})
            assert own.status_code == 200 and own.json()["predictions"] == expected[0.1], command
            server = client.post("/v1/predict", json={"inputs": texts})
            assert server.json()["predictions"] == expected[0.6], command
            for bad in (0.01, 1, "0.5", True):
                answer = client.post("/v1/predict", json={"inputs": texts, "parameters": {"threshold": bad}})
                assert answer.status_code == 422 and answer.json()["error"]["field"] == "parameters.threshold"
            answer = client.post("/v1/predict", json={"inputs": texts, "parameters": {"top_k": 2}})
            assert answer.status_code == 422 and answer.json()["error"]["field"] == "parameters.top_k"
    with ReadyClient(create_app(ServedModel(str(dirs["single"]), "dygraph", "cpu"))) as client:
        assert client.get("/v1/info").json()["threshold"] is None
        answer = client.post("/v1/predict", json={"inputs": ["很好"], "parameters": {"threshold": 0.3}})
        assert answer.status_code == 422 and "decides by no threshold" in answer.json()["error"]["message"]


def files_rows() -> list[str]:
    return (DATA / "news_tags_train.tsv").read_text(encoding="utf-8").splitlines()[1:]


@pytest.mark.parametrize(
    "command, flags, message",
    [
        ("classify", ["--threshold", "0.3"], "--threshold is for several labels per text: add --multi-label"),
        ("classify", ["--tune-thresholds"], "--tune-thresholds is for several labels per text: add --multi-label"),
        ("ner", ["--threshold", "0.3"], "--threshold is for the nested span model (--nested)"),
        ("ner", ["--tune-thresholds"], "--tune-thresholds is for the nested span model (--nested)"),
        ("relation", ["--threshold", "-0.5"], "--threshold -0.5: give a probability between 0 and 1"),
        ("relation", ["--tune-threshold"], "unknown flag --tune-threshold"),
    ],
)
def test_a_threshold_flag_that_means_nothing_is_an_error(tmp_path, capsys, command, flags, message):
    train = run_files(tmp_path)[command][1 if command != "ner" else 2]
    args = [command, "--train", train, *TINY, "--output", str(tmp_path / "out"), *flags]
    try:
        status = cli(args)
    except SystemExit as stop:  # argparse's own exit, for a flag it does not know
        status = stop.code
    assert status == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_tuning_without_dev_examples_is_an_error(tmp_path, capsys):
    out = tmp_path / "run"
    args = [*run_files(tmp_path)["relation"], *TINY, "--tune-thresholds", "--output", str(out)]
    assert task_command("relation")(args) == 2
    assert "--tune-thresholds needs dev examples to tune on: give --dev FILE or --dev-split" in capsys.readouterr().err


def recorded_relation(run: dict) -> Relation:
    """The task a relation checkpoint whose run file holds ``run`` loads with."""
    return recorded_task({"task": "relation", "run": run}, "ckpt")


def test_checkpoints_of_earlier_versions_decide_as_they_did():
    """Relation recorded a logit (with or without tune_threshold, which a run of this version never records): it keeps
    exactly the cells the logit kept, at and around it; a run of this version keeps its probability. Every classifier
    recorded threshold 0.5."""
    new = RunConfig(task={"threshold": 0.3}).to_dict()
    old = {**new, "data": {k: v for k, v in new["data"].items() if k != "predictions_as_labels"}}
    assert recorded_relation(new).threshold == 0.3
    scores = np.array([-9.0, -2.0, -1.5, -1.0, -0.5, -0.3, 0.0, 0.3, 0.5, 1.0, 2.0, 5.0], dtype="float32")
    scores = np.concatenate([scores, np.nextafter(scores, -np.inf), np.nextafter(scores, np.inf)])
    for x in (-2.0, -1.5, -1.0, -0.5, -0.3, 0.0, 0.3, 0.5, 1.0, 2.0, 5.0):
        untuned = recorded_relation({**old, "task": {"threshold": x}})
        tuned = recorded_relation({**new, "task": {"threshold": x, "tune_threshold": True, "schema": ""}})
        assert tuned.tune_thresholds and not untuned.tune_thresholds
        for task in (untuned, tuned):
            floor = thresholds.logit(task.threshold)
            assert floor >= x and (scores > floor).tolist() == (scores > x).tolist(), (x, floor)
            assert (scores.astype("float64") > floor).tolist() == (scores.astype("float64") > x).tolist(), (x, floor)
    assert recorded_relation({**old, "task": {}}).threshold is None  # 0.5, as the logit 0 it had
    Classification(**Classification.recorded_options({"threshold": 0.5, "multi_label": False}))  # no error
    assert Classification.recorded_options({"threshold": 0.5, "multi_label": True})["threshold"] == 0.5


def test_the_grid_and_the_tie_rule():
    assert thresholds.GRID[0] == 0.05 and thresholds.GRID[-1] == 0.95 and len(thresholds.GRID) == 19
    assert thresholds.best(lambda t: 1.0) == (0.5, 1.0)  # a flat score keeps the default
    assert thresholds.best(lambda t: 1.0 if t <= 0.3 else 0.0) == (0.3, 1.0)  # the nearest to 0.5 of the best
    assert thresholds.logit(0.5) == 0 and thresholds.logit(0.75) == pytest.approx(1.0986, abs=1e-4)
    for bad in (0, 1, -0.2, 1.5, "x"):
        with pytest.raises(UserError, match="give a probability between 0 and 1"):
            thresholds.check(bad)
