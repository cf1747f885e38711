"""Pre-annotations in a project's own names, against the real Label Studio (issue 57, item 3): a file written by
predict --label-config for a project whose text is $review, a sentence-pair project's file with both texts, and the
pair model served as the pair project's ML backend, on conftest's Label Studio (skipped without its venv, failing in
CI)."""

import json

import httpx
import pytest
from conftest import DATA
from helpers.label_studio import TOKEN, LabelStudio
from test_label_studio_real import connect_and_retrieve
from test_pre_annotation_names import (
    PAIR,
    REVIEW,
    config,
    models,  # noqa: F401 (the tiny classifier and pair classifier)
)
from test_serve import Server

from ernie_ft.cli import main as cli

CHOICES = '<Choice value="正面"/><Choice value="负面"/>'


@pytest.fixture(scope="module")
def studio(studio, models):  # noqa: F811
    """conftest's Label Studio, up; the tiny models train while it starts."""
    studio.wait_up()
    return studio


def written(model, pool, xml: str, tmp_path) -> list[dict]:
    """The tasks ``predict --format label-studio --label-config`` writes for ``pool``."""
    out = tmp_path / "tasks.json"
    args = ["predict", "--model", str(model), "--input", str(pool), "--format", "label-studio"]
    assert cli([*args, "--label-config", config(tmp_path, xml), "--output", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def imported(studio: LabelStudio, xml: str, tasks: list[dict]) -> tuple[dict, dict]:
    """``tasks`` imported into a new project of config ``xml``: ({task id: its data}, {task id: its predictions})."""
    project = studio.project("ernie_ft names", xml)
    answer = studio.api("POST", f"/api/projects/{project}/import", tasks)
    assert answer["task_count"] == answer["prediction_count"] == len(tasks), answer
    return {t["id"]: t["data"] for t in studio.tasks(project)}, studio.predictions(project)


def assert_stored_as_written(stored: dict, data: dict, tasks: list[dict], key) -> None:
    by_text = {key(t["data"]): t["predictions"][0] for t in tasks}
    assert set(stored) == set(data) and len(data) == len(tasks)  # a prediction for every task
    for task, texts in data.items():
        [prediction] = stored[task]
        want = by_text[key(texts)]
        assert (prediction["model_version"], prediction["result"]) == (want["model_version"], want["result"])
        assert prediction["score"] == pytest.approx(want["score"])


def test_a_review_project_imports_the_file_written_in_its_names(studio, models, tmp_path):  # noqa: F811
    xml = REVIEW.format(choices=CHOICES)
    tasks = written(models["classify"], DATA / "predict.txt", xml, tmp_path)
    assert {tuple(t["data"]) for t in tasks} == {("review",)}
    data, stored = imported(studio, xml, tasks)
    assert_stored_as_written(stored, data, tasks, lambda d: d["review"])
    assert all(p[0]["model_version"] == "classify" for p in stored.values())  # the name serve gives --model RUN
    default = [{"data": {"text": t["data"]["review"]}, "predictions": t["predictions"]} for t in tasks]
    project = studio.project("ernie_ft template names", xml)  # what predict wrote before --label-config
    refused = httpx.post(f"{studio.url}/api/projects/{project}/import", json=default, timeout=120,
                         headers={"Authorization": f"Token {TOKEN}"})  # fmt: skip
    assert refused.status_code == 400 and "review" in refused.text, refused.text[:500]


def test_a_pair_project_imports_both_texts_with_their_predictions(studio, models, tmp_path):  # noqa: F811
    tasks = written(models["pair"], DATA / "pairs_dev.tsv", PAIR, tmp_path)
    assert {tuple(t["data"]) for t in tasks} == {("q1", "q2")}
    data, stored = imported(studio, PAIR, tasks)
    assert_stored_as_written(stored, data, tasks, lambda d: (d["q1"], d["q2"]))


def test_a_pair_models_backend_answers_the_pair_projects_tasks(studio, models, tmp_path):  # noqa: F811
    server = Server(str(models["pair"]), tmp_path)
    try:
        server.wait_ready()
        rows = [line.split("\t") for line in (DATA / "pairs_dev.tsv").read_text(encoding="utf-8").splitlines()[1:6]]
        inputs = [{"text": a, "text_pair": b} for a, b, _ in rows]
        served = httpx.post(server.url + "/v1/predict", json={"inputs": inputs}, timeout=120).json()["predictions"]
        project = studio.project("ernie_ft pair backend", PAIR)
        data, stored = connect_and_retrieve(studio, project, server.url, [{"q1": a, "q2": b} for a, b, _ in rows])
        version = httpx.get(server.url + "/label-studio/health").json()["model_version"]
    finally:
        server.stop()
    expected = {(r["text"], r["text_pair"]): r for r in served}
    assert set(stored) == set(data) and len(data) == len(rows)
    for task, texts in data.items():
        [prediction] = stored[task]
        record = expected[(texts["q1"], texts["q2"])]  # the label served for both texts, not for the first alone
        assert prediction["model_version"] == version == "pair"
        assert prediction["result"] == [{"from_name": "相同", "to_name": "问题一", "type": "choices",
                                         "value": {"choices": [record["label"]]}}]  # fmt: skip
        assert prediction["score"] == pytest.approx(record["probs"][record["label"]], abs=1e-5)
