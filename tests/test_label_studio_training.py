"""Label Studio's "Start training" against a real Label Studio (1.23.2, conftest's ``studio``, one per test process):
annotations made through its API, training started by its own call (``POST /api/ml/{id}/train``,
which posts ``{"action": "START_TRAINING", "project": {...}}`` to the backend's ``/webhook``), for a classifier, an NER
tagger and a relation extractor, each served by ``serve --label-studio-url`` (tests/test_retrain_runs.py tests the
parts without Label Studio).

The annotations decide the outcome, not luck: the classifier was trained on its file's labels flipped, and the project
labels the same texts rightly, so the new model (the project's label replaces the file's on each text) is better on
the held-out tasks by a margin; the NER project's held-out tasks carry the served tagger's own predictions, which no
new model beats; the relation project has too few held-out tasks to decide anything."""

import json
import re
import time

import httpx
import pytest
import yaml
from conftest import DATA
from helpers.label_studio import TOKEN
from test_label_studio_backend import TINY
from test_label_studio_real import NER, SENTIMENT, served_records
from test_serve import Server

from ernie_ft.cli import task_command
from ernie_ft.serving.retrain import RUNS
from ernie_ft.serving.run_data import slice_of

FLIP = {"正面": "负面", "负面": "正面"}
RELATIONS = """<View>
  <Relations><Relation value="出生地"/><Relation value="毕业院校"/></Relations>
  <Labels name="实体" toName="句子"><Label value="人物"/><Label value="地点"/><Label value="学校"/></Labels>
  <Text name="句子" value="$sentence"/>
</View>"""


def rows(path, count: int) -> list[tuple[str, str]]:
    """(text, label) of the first ``count`` rows of a sample TSV."""
    lines = (DATA / path).read_text(encoding="utf-8").splitlines()
    head = lines[0].split("\t")
    return [(r[head.index("text_a")], r[head.index("label")]) for r in (line.split("\t") for line in lines[1:])][:count]


def relation_lines(count: int, offset: int = 0) -> list[dict]:
    """DuIE records: a person born in a city, or a graduate of a university."""
    people, places, schools = "张伟李娜王芳刘洋陈静杨磊赵敏黄勇", "北京上海杭州成都", ["清华大学", "复旦大学"]
    records = []
    for i in range(offset, offset + count):
        person, place = people[2 * (i % 8) : 2 * (i % 8) + 2], places[2 * (i % 4) : 2 * (i % 4) + 2]
        predicate, kind, obj = ("出生地", "地点", place) if i % 2 else ("毕业院校", "学校", schools[i % 4 // 2])
        text = f"{person}{'出生于' if kind == '地点' else '毕业于'}{obj}。"
        records.append({"text": text, "spo_list": [{"subject": person, "subject_type": "人物", "predicate": predicate,
                        "object": {"@value": obj}, "object_type": {"@value": kind}}]})  # fmt: skip
    return records


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{task: its served checkpoint} (tiny): a classifier trained on flipped labels, a tagger whose training file is
    deleted before its run, a relation extractor."""
    tmp = tmp_path_factory.mktemp("ls_train")
    flipped = tmp / "flipped.tsv"
    flipped.write_text("text_a\tlabel\n" + "".join(f"{t}\t{FLIP[y]}\n" for t, y in rows("sentiment_train.tsv", 120)),
                       encoding="utf-8")  # fmt: skip
    tagged, related = tmp / "ner.jsonl", tmp / "relation.jsonl"
    tagged.write_text("".join((DATA / "ner_train.jsonl").read_text(encoding="utf-8").splitlines(True)[:160]), "utf-8")
    related.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in relation_lines(40)), "utf-8")
    found = {}
    trainings = {"classify": (flipped, ["--lr", "3e-3", "--epochs", "3"]), "relation": (related, []),
                 "ner": (tagged, ["--lr", "5e-3", "--epochs", "4"])}  # fmt: skip
    for task, (train, flags) in trainings.items():
        found[task] = tmp / task
        assert task_command(task)(["--train", str(train), *TINY, *flags, "--output", str(found[task])]) == 0
    return found


@pytest.fixture(scope="module")
def backends(studio, models, tmp_path_factory):  # noqa: F811
    """{task: its serve (a Server)}, trained from the Label Studio started for the module."""
    minimum = {"classify": "8", "ner": "3", "relation": "20"}
    servers = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LABEL_STUDIO_API_KEY", TOKEN)
        studio.wait_up()
        try:
            for task, model in models.items():
                flags = ["--label-studio-url", studio.url, "--min-dev-tasks", minimum[task], "--keep-runs", "3"]
                servers[task] = Server(str(model), tmp_path_factory.mktemp(f"serve_{task}"), *flags)
            for server in servers.values():
                server.wait_ready()
            yield servers
        finally:
            for server in servers.values():
                server.stop()


def project_with_backend(studio, url: str, title: str, config: str, data: list[dict], results=None):  # noqa: F811
    """(project, its ML backend, its tasks in id order): ``data`` imported, each annotated with its ``results`` (one
    list of Label Studio results per task, in one import: a request per annotation takes minutes), serve connected
    (its /setup)."""
    project = studio.project(title, config)
    tasks = data if results is None else [{"data": d, "annotations": [{"result": r}]} for d, r in zip(data, results)]
    studio.api("POST", f"/api/projects/{project}/import", tasks)
    backend = studio.api("POST", "/api/ml", {"url": url + "/label-studio", "project": project, "title": "ernie_ft"})
    return project, backend["id"], sorted(studio.tasks(project), key=lambda t: t["id"])


def choices(label: str) -> list:
    return [{"from_name": "情感", "to_name": "评论", "type": "choices", "value": {"choices": [label]}}]


def region(key: str, text: str, start: int, end: int, kind: str) -> dict:
    value = {"start": start, "end": end, "text": text[start:end], "labels": [kind]}
    return {"id": key, "from_name": "实体", "to_name": "句子", "type": "labels", "value": value}


def start_training(studio, ml: int) -> None:  # noqa: F811
    """What Label Studio's "Start training" button calls: it answers 200 with no body."""
    answer = httpx.post(
        f"{studio.url}/api/ml/{ml}/train", json={}, headers={"Authorization": f"Token {TOKEN}"}, timeout=120
    )
    assert answer.status_code == 200, answer.text


def webhook(server: Server, project: int) -> dict:
    body = {"action": "START_TRAINING", "project": {"id": project}}
    return httpx.post(server.url + "/label-studio/webhook", json=body, timeout=30).json()


def finished(server: Server, project: int, timeout: float = 600) -> str:
    """serve's line on ``project``'s run once it ended (waits for it)."""
    pattern = re.compile(rf"label-studio: project {project}: {RUNS}/\d+ (dev|failed|trained).*")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(server.output())
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"project {project}'s run did not end: {server.output()[-3000:]}")


def version(server: Server) -> str:
    return httpx.get(server.url + "/label-studio/health", timeout=30).json()["model_version"]


def test_a_better_model_is_swapped_in_and_the_next_run_waits_and_beats_it(studio, backends, models):  # noqa: F811
    server, before = backends["classify"], version(backends["classify"])
    texts = rows("sentiment_train.tsv", 120)  # what the served model learnt with flipped labels
    data, results = [{"comment": t} for t, _ in texts], [choices(y) for _, y in texts]
    project, ml, tasks = project_with_backend(studio, server.url, "ernie_ft right", SENTIMENT, data, results)
    gold = dict(texts)
    assert all(t["total_annotations"] == 1 for t in tasks)
    decide = [t for t in tasks if slice_of(t["id"]) == "decide"]
    assert len(decide) >= 8 and {gold[t["data"]["comment"]] for t in decide} == set(FLIP)
    later = rows("sentiment_dev.tsv", 60)
    data, results = [{"comment": t} for t, _ in later], [choices(y) for _, y in later]
    second, ml2, tasks2 = project_with_backend(studio, server.url, "ernie_ft next", SENTIMENT, data, results)
    assert sum(slice_of(t["id"]) == "decide" for t in tasks2) >= 8

    start_training(studio, ml)  # Label Studio's "Start training": its webhook reaches serve
    start_training(studio, ml2)  # the second project's run waits for the first
    assert webhook(server, project) == {"status": "already training", "job": f"{RUNS}/001"}
    assert webhook(server, second) == {"status": "already training", "job": f"{RUNS}/002"}
    line = finished(server, project)
    found = re.fullmatch(rf".*{RUNS}/001 dev accuracy (\S+), the served {before} (\S+) on (\d+) held-out tasks: "
                         rf"swapped in as model version {RUNS}/001", line)  # fmt: skip
    assert found and float(found[1]) > float(found[2]) and int(found[3]) == len(decide), line
    run = models["classify"] / RUNS / "001"
    trained = json.loads((run / "data" / "train.json").read_text(encoding="utf-8"))
    assert {t["data"]["text"] for t in trained} == {t["data"]["comment"] for t in tasks if slice_of(t["id"]) == "train"}
    assert "header" not in yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8"))["data"]

    # the second run compares against the model served at its end (001's), not the one served when it was started
    line = finished(server, second)
    assert re.fullmatch(rf".*{RUNS}/002 dev accuracy \S+, the served {RUNS}/001 \S+ on \d+ held-out tasks: .*", line)
    swapped = line.endswith(f"swapped in as model version {RUNS}/002")
    assert version(server) == f"{RUNS}/{'002' if swapped else '001'}"
    trained = json.loads((models["classify"] / RUNS / "002" / "data" / "train.json").read_text(encoding="utf-8"))
    assert len(trained) > sum(slice_of(t["id"]) == "train" for t in tasks2)  # 001's training data came along
    action = f"/api/dm/actions?id=retrieve_tasks_predictions&project={project}"
    some = [t["id"] for t in tasks[:20]]  # Label Studio sends the selected tasks in one request: at most --max-inputs
    studio.api("POST", action, {"selectedItems": {"all": False, "included": some}})
    stored = studio.predictions(project)
    assert set(stored) == set(some) and {p["model_version"] for v in stored.values() for p in v} == {version(server)}


def test_an_ner_run_without_its_training_file_continues_from_the_served_weights(studio, backends, models):  # noqa: F811
    server, before = backends["ner"], version(backends["ner"])
    model = models["ner"]
    (model.parent / "ner.jsonl").unlink()  # the served model's training file is gone
    sentences = [json.loads(line)["text"] for line in (DATA / "ner_dev.jsonl").read_text(encoding="utf-8").splitlines()]
    config = NER.format(labels="".join(f'<Label value="{t}"/>' for t in ("PER", "LOC", "ORG")))
    predicted = {r["text"]: r["entities"] for r in served_records(server.url, sentences[:30])}
    results = [[region(f"r{k}", s, e["start"], e["end"], e["type"]) for k, e in enumerate(predicted[s])]
               for s in sentences[:30]]  # fmt: skip
    project, ml, tasks = project_with_backend(studio, server.url, "ernie_ft tagged", config,
                                              [{"sentence": s} for s in sentences[:30]], results)  # fmt: skip
    held = [t for t in tasks if slice_of(t["id"]) == "decide"]
    assert len(held) >= 3 and any(predicted[t["data"]["sentence"]] for t in held), "the tagger found nothing to beat"
    start_training(studio, ml)
    line = finished(server, project)
    why = "(a tie keeps the served model|the new model scores worse)"
    assert re.fullmatch(rf".*{RUNS}/001 dev f1 \S+, the served {before} 1\.0000 on {len(held)} held-out tasks: kept "
                        rf"{before} \({why}\)", line), line  # fmt: skip
    gone = re.search(rf"{RUNS}/001: the served model's training file \S*ner\.jsonl is gone: training continues from "
                     rf"the served weights \({before}\)", server.output())  # fmt: skip
    assert gone, server.output()[-3000:]
    recipe = yaml.safe_load((model / RUNS / "001" / "recipe.yaml").read_text(encoding="utf-8"))
    assert recipe["model"]["model"] == str(model / "best") and "header" not in recipe["data"]
    assert version(server) == before


def test_a_relation_run_with_too_few_held_out_tasks_is_kept_on_disk(studio, backends, models):  # noqa: F811
    server, before = backends["relation"], version(backends["relation"])
    records = relation_lines(12, offset=3)
    results = []
    for record in records:
        text, [spo] = record["text"], record["spo_list"]
        subject, obj = spo["subject"], spo["object"]["@value"]
        s, o = text.index(subject), text.index(obj)
        results.append([region("s", text, s, s + len(subject), "人物"), region("o", text, o, o + len(obj),
                        spo["object_type"]["@value"]), {"from_id": "s", "to_id": "o", "type": "relation",
                        "direction": "right", "labels": [spo["predicate"]]}])  # fmt: skip
    project, ml, tasks = project_with_backend(studio, server.url, "ernie_ft related", RELATIONS,
                                              [{"sentence": r["text"]} for r in records], results)  # fmt: skip
    held = sum(slice_of(t["id"]) == "decide" for t in tasks)
    start_training(studio, ml)
    line = finished(server, project)
    assert re.fullmatch(rf".*{RUNS}/001 trained and kept on disk in \S+{RUNS}/001/model/best, not swapped in: {held} "
                        rf"held-out tasks decide a swap and at least 20 are needed \(--min-dev-tasks\): annotate about "
                        rf"\d+ more tasks; serving {before} still", line), line  # fmt: skip
    assert (models["relation"] / RUNS / "001" / "model" / "best" / "ernie_ft.yaml").is_file()
    assert version(server) == before


def test_a_failed_run_is_one_line_naming_its_log_and_the_model_stays(studio, backends):  # noqa: F811
    server = backends["relation"]
    before = version(server)
    project, ml, _ = project_with_backend(studio, server.url, "ernie_ft nothing", RELATIONS, [{"sentence": "张三。"}])
    start_training(studio, ml)  # nothing is annotated
    line = finished(server, project)
    log = re.search(rf"see (\S*{RUNS}/\d+/data\.log)", line)
    assert "failed: writing the run's data exited with 2 (error: " in line and line.endswith(f"serving {before} still")
    assert log and "the project has no annotated task" in open(log[1], encoding="utf-8").read(), line
    assert version(server) == before


def test_a_swap_waits_for_the_requests_of_the_old_model_and_holds_new_ones(models, monkeypatch):
    import asyncio

    from fastapi.testclient import TestClient

    from ernie_ft.serving.app import Service, create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    old, new = (ServedModel(str(models["classify"]), "dygraph", "cpu", name=name) for name in ("old", "new"))

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
    with TestClient(create_app(old, runs=str(models["classify"] / "unused"))) as http:
        event = http.post("/label-studio/webhook", json={"action": "ANNOTATION_CREATED", "project": {"id": 1}})
        assert event.json() == {"status": "ignored", "action": "ANNOTATION_CREATED"}
        off = http.post("/label-studio/webhook", json={"action": "START_TRAINING", "project": {"id": 9}})
        assert off.status_code == 403 and "--label-studio-url" in off.text


def test_a_swap_keeps_serves_engine_threshold_and_task(models, tmp_path):
    """``swap_in`` loads the new model as the served one was loaded (``ServedModel.like``)."""
    import asyncio

    from ernie_ft.serving.app import Service
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    served = ServedModel(str(models["relation"]), "dygraph", "cpu", task="relation", name="old", threshold=0.7)

    async def scenario():
        service = Service(served, Limits())
        await (await service.start())
        await service.swap_in(str(models["relation"] / "best"), f"{RUNS}/009")
        await service.stop()
        return service.served

    swapped = asyncio.run(scenario())
    assert (swapped.name, swapped.engine, swapped.threshold, swapped.task_spec) == (f"{RUNS}/009", "dygraph", 0.7,
                                                                                     "relation")  # fmt: skip
    assert swapped.task.threshold == 0.7 and swapped.model_dir == str(models["relation"] / "best")
