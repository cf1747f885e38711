"""Label Studio's "Start training" against a real Label Studio (1.23.2, as tests/test_label_studio_real.py runs it):
annotations made through its API, training started by its own call (``POST /api/ml/{id}/train``, which posts
``{"action": "START_TRAINING", "project": {...}}`` to the backend's ``/webhook``), serve training a new model in
``label-studio-runs/NNN`` beside the served checkpoint, and swapping it in only when it scores no worse on the run's
dev tasks (every ``retrain.DEV_EVERY``-th annotated task by id), the predictions Label Studio stores afterwards
carrying the new version; a run that fails leaves the served model, naming its log.

The annotations decide the scores: a project labelled the opposite of what the served model predicts scores it 0 on
dev, so the new model cannot score lower; one whose dev tasks carry the served model's own predictions (both labels
among them) and whose training tasks carry the opposite scores it 1, which the new model trained on the opposite
cannot reach."""

import re
import time

import httpx
import pytest
from conftest import DATA
from helpers.label_studio import TOKEN
from test_label_studio_backend import TINY
from test_label_studio_real import SENTIMENT, served_records, studio  # noqa: F401 (Label Studio, a module fixture)
from test_serve import Server

from ernie_ft.cli import task_command
from ernie_ft.serving.retrain import DEV_EVERY, RUNS

FLIP = {"正面": "负面", "负面": "正面"}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    out = tmp_path_factory.mktemp("ls_train") / "classify"
    flags = ["--train", str(DATA / "sentiment_train.tsv"), "--lr", "3e-3", *TINY]
    assert task_command("classify")([*flags, "--output", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def backend(studio, classifier, tmp_path_factory):  # noqa: F811
    """serve for the classifier (its URL and the Server), Label Studio up, training from it on."""
    studio.wait_up()
    server = Server(str(classifier), tmp_path_factory.mktemp("serve_train"), "--label-studio-url", studio.url,
                    env={"LABEL_STUDIO_API_KEY": TOKEN})  # fmt: skip
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def reviews(count: int) -> list[str]:
    lines = (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()
    at = lines[0].split("\t").index("text_a")
    return [line.split("\t")[at] for line in lines[1 : count + 1]]


def project_with_backend(studio, url: str, title: str, texts: list[str]) -> tuple[int, int, list[dict]]:  # noqa: F811
    """(project, its ML backend, its tasks in id order): ``texts`` imported, serve connected (its /setup)."""
    project = studio.project(title, SENTIMENT)
    studio.api("POST", f"/api/projects/{project}/import", [{"comment": t} for t in texts])
    backend = studio.api("POST", "/api/ml", {"url": url + "/label-studio", "project": project, "title": "ernie_ft"})
    return project, backend["id"], sorted(studio.tasks(project), key=lambda t: t["id"])


def annotate(studio, tasks: list[dict], labels: list[str]) -> None:  # noqa: F811
    for task, label in zip(tasks, labels):
        result = [{"from_name": "情感", "to_name": "评论", "type": "choices", "value": {"choices": [label]}}]
        studio.api("POST", f"/api/tasks/{task['id']}/annotations", {"result": result})


def start_training(studio, ml: int) -> None:  # noqa: F811
    """What Label Studio's "Start training" button calls: it answers 200 with no body."""
    answer = httpx.post(
        f"{studio.url}/api/ml/{ml}/train", json={}, headers={"Authorization": f"Token {TOKEN}"}, timeout=120
    )
    assert answer.status_code == 200, answer.text


def finished(server: Server, project: int, timeout: float = 300) -> str:
    """serve's line on ``project``'s run once it ended (waits for it)."""
    pattern = re.compile(rf"label-studio: project {project}: {RUNS}/\d+ (dev|failed).*")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(server.output())
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"project {project}'s run did not end: {server.output()[-3000:]}")


def version(server: Server) -> str:
    return httpx.get(server.url + "/label-studio/health", timeout=30).json()["model_version"]


def test_start_training_keeps_a_worse_model_and_swaps_in_one_no_worse(studio, backend, classifier):  # noqa: F811
    texts = reviews(20)
    served = [r["label"] for r in served_records(backend.url, texts)]
    dev = [i for i in range(len(texts)) if i % DEV_EVERY == DEV_EVERY - 1]
    assert {served[i] for i in dev} == set(FLIP), "dev holds one label: a constant model would score 1"
    before = version(backend)

    # dev carries the served model's predictions, training the opposite: the new model scores lower, it is kept
    project, ml, tasks = project_with_backend(studio, backend.url, "ernie_ft kept", texts)
    annotate(studio, tasks, [label if i in dev else FLIP[label] for i, label in enumerate(served)])
    start_training(studio, ml)  # Label Studio's "Start training": its webhook reaches serve
    again = httpx.post(
        backend.url + "/label-studio/webhook", json={"action": "START_TRAINING", "project": {"id": project}}
    )
    assert again.json() == {"status": "already training", "job": f"{RUNS}/001"}
    line = finished(backend, project)
    assert re.fullmatch(rf".*{RUNS}/001 dev accuracy 0\.\d+, the served {before} 1\.0000: kept {before} .*", line), line
    assert version(backend) == before

    # everything labelled the opposite: the served model scores 0 on dev, the new one is swapped in
    project, ml, tasks = project_with_backend(studio, backend.url, "ernie_ft swapped", texts)
    annotate(studio, tasks, [FLIP[label] for label in served])
    start_training(studio, ml)
    line = finished(backend, project)
    assert re.fullmatch(rf".*{RUNS}/002 dev accuracy \d\.\d+, the served {before} 0\.0000: swapped in .*", line), line
    assert version(backend) == f"{RUNS}/002"
    run = classifier / RUNS / "002"
    assert {p.name for p in run.iterdir()} >= {"data", "recipe.yaml", "train.log", "model", "eval-served", "eval-new"}
    action = f"/api/dm/actions?id=retrieve_tasks_predictions&project={project}"
    studio.api("POST", action, {"selectedItems": {"all": True, "excluded": []}})
    stored = studio.predictions(project)
    assert set(stored) == {t["id"] for t in tasks}
    assert {p["model_version"] for found in stored.values() for p in found} == {f"{RUNS}/002"}


def test_a_failed_run_is_one_line_naming_its_log_and_the_model_stays(studio, backend, classifier):  # noqa: F811
    before = version(backend)
    project, ml, tasks = project_with_backend(studio, backend.url, "ernie_ft one label", reviews(6))
    annotate(studio, tasks, ["正面"] * len(tasks))  # a classifier needs two labels: training exits 2
    start_training(studio, ml)
    line = finished(backend, project)
    log = re.search(rf"see (\S*{RUNS}/\d+/train\.log)", line)
    assert "failed: training exited with 2" in line and line.endswith(f"serving {before} still") and log, line
    assert "a classifier needs at least two labels" in open(log[1], encoding="utf-8").read()
    assert version(backend) == before


def test_a_swap_waits_for_the_requests_of_the_old_model_and_holds_new_ones(classifier, monkeypatch):
    import asyncio

    from fastapi.testclient import TestClient

    from ernie_ft.serving.app import Service, create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    old, new = (ServedModel(str(classifier), "dygraph", "cpu", name=name) for name in ("old", "new"))

    async def scenario():
        service = Service(old, Limits())
        await (await service.start())
        async with service.model() as held:  # a request in flight
            swap = asyncio.create_task(service.swap(new))
            arriving = asyncio.create_task(service.predictions([{"text": "房间很干净"}]))
            for _ in range(5):
                await asyncio.sleep(0)  # let both run as far as they can
            assert held is old and service.served is old and not swap.done() and not arriving.done()
        await swap
        assert service.served is new and len(await arriving) == 1
        await service.stop()

    asyncio.run(scenario())
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    with TestClient(create_app(old, runs=str(classifier / "unused"))) as http:
        event = http.post("/label-studio/webhook", json={"action": "ANNOTATION_CREATED", "project": {"id": 1}})
        assert event.json() == {"status": "ignored", "action": "ANNOTATION_CREATED"}
        unknown = http.post("/label-studio/webhook", json={"action": "START_TRAINING", "project": {"id": 9}})
        assert unknown.status_code == 403 and "LABEL_STUDIO_URL" in unknown.text  # training off
