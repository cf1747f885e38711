"""ernie_ft against a real Label Studio (1.23.2, from its own venv .venv-label-studio, which scripts/test.sh makes;
never a dependency of the package): projects with their own tag names, ernie_ft's serve connected as their ML backend,
predictions retrieved and stored for every task (a classifier and an NER tagger), a pre-annotation file imported, and
a model trained from a project's annotations through ``--train label-studio://HOST:PORT/PROJECT``.

One Label Studio for the test process (conftest's ``studio``), started from a copy of a data directory whose database
was made once (``helpers.label_studio.template``: seconds instead of a minute of migrations); everything is on
127.0.0.1, and Label Studio's calls out (its version check, its error reports) are switched off. Without the venv the
module skips, saying so; in CI (CI=true) it fails.
"""

import json
import socket

import httpx
import pytest
from conftest import DATA
from helpers.label_studio import TOKEN, LabelStudio
from test_label_studio_backend import models  # noqa: F401 (the tiny classifier and tagger, a module fixture)
from test_serve import Server

from ernie_ft.cli import main as cli
from ernie_ft.data.pre_annotations import label_studio_task


@pytest.fixture(scope="module")
def backends(studio, models, tmp_path_factory):  # noqa: F811
    """{'classify': URL, 'ner': URL} of ``serve`` for the tiny classifier and tagger, Label Studio up."""
    servers = {}
    try:
        for name in ("classify", "ner"):
            servers[name] = Server(str(models[name]), tmp_path_factory.mktemp(f"serve_{name}"))
        for server in servers.values():
            server.wait_ready()
        studio.wait_up()
        yield {name: server.url for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def served_records(url: str, texts: list[str]) -> list[dict]:
    """What the backend's model predicts for ``texts`` (``predict``'s records, from the same server)."""
    answer = httpx.post(url + "/v1/predict", json={"inputs": [{"text": t} for t in texts]}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["predictions"]


def connect_and_retrieve(studio: LabelStudio, project: int, url: str, data: list[dict]) -> tuple[dict, dict]:
    """ernie_ft at ``url`` connected as ``project``'s ML backend, ``data`` imported as its tasks, and "Retrieve
    predictions" run on all of them: ({task id: its data}, {task id: its stored predictions})."""
    backend = studio.api("POST", "/api/ml", {"url": url + "/label-studio", "project": project, "title": "ernie_ft"})
    assert backend["readable_state"] == "Connected", backend
    studio.api("POST", f"/api/projects/{project}/import", data)
    action = "/api/dm/actions?id=retrieve_tasks_predictions&project=" + str(project)
    studio.api("POST", action, {"selectedItems": {"all": True, "excluded": []}})
    return {t["id"]: t["data"] for t in studio.tasks(project)}, studio.predictions(project)


REVIEWS = ["房间很干净，服务也好", "太吵了，再也不来了", "早餐一般", "位置方便，性价比高", "空调坏了也没人修"]
SENTIMENT = """<View>
  <Text name="评论" value="$comment"/>
  <Choices name="情感" toName="评论" choice="single">
    <Choice value="正面"/><Choice value="负面"/><Choice value="中性"/>
  </Choices>
</View>"""


def test_a_classifier_backend_stores_a_prediction_for_every_task(studio, backends):
    project = studio.project("ernie_ft sentiment", SENTIMENT)
    tasks, stored = connect_and_retrieve(studio, project, backends["classify"], [{"comment": t} for t in REVIEWS])
    version = httpx.get(backends["classify"] + "/label-studio/health").json()["model_version"]
    expected = {r["text"]: r for r in served_records(backends["classify"], REVIEWS)}
    assert sorted(d["comment"] for d in tasks.values()) == sorted(REVIEWS)
    assert set(stored) == set(tasks)  # every task
    for task, data in tasks.items():
        [prediction] = stored[task]
        record = expected[data["comment"]]
        assert prediction["model_version"] == version
        assert prediction["score"] == pytest.approx(record["probs"][record["label"]], abs=1e-5)
        assert prediction["result"] == [{"from_name": "情感", "to_name": "评论", "type": "choices",
                                         "value": {"choices": [record["label"]]}}]  # fmt: skip


SENTENCES = ["张三在北京的清华大学读书", "李四去了上海", "王五是阿里巴巴的工程师", "今天天气很好"]
NER = """<View>
  <Labels name="实体" toName="句子">{labels}</Labels>
  <Text name="句子" value="$sentence"/>
</View>"""


def test_an_ner_backend_stores_regions_in_the_projects_labels(studio, backends):
    expected = {r["text"]: r for r in served_records(backends["ner"], SENTENCES)}
    found = sorted({e["type"] for r in expected.values() for e in r["entities"]})
    assert found, "the tagger found no entity: the test would compare nothing"
    offered = found[:-1] if len(found) > 1 else []  # the last type is not in the project: its regions are left out
    labels = "".join(f'<Label value="{t}"/>' for t in [*offered, "其他"])
    project = studio.project("ernie_ft entities", NER.format(labels=labels))
    tasks, stored = connect_and_retrieve(studio, project, backends["ner"], [{"sentence": t} for t in SENTENCES])
    version = httpx.get(backends["ner"] + "/label-studio/health").json()["model_version"]
    assert set(stored) == set(tasks)
    for task, data in tasks.items():
        [prediction] = stored[task]
        entities = [e for e in expected[data["sentence"]]["entities"] if e["type"] in offered]
        assert prediction["model_version"] == version
        regions = prediction["result"]
        assert {(r["from_name"], r["to_name"], r["type"]) for r in regions} <= {("实体", "句子", "labels")}
        assert [
            (r["value"]["start"], r["value"]["end"], r["value"]["text"], r["value"]["labels"]) for r in regions
        ] == [(e["start"], e["end"], e["text"], [e["type"]]) for e in entities]
        assert [r["score"] for r in regions] == pytest.approx([e["score"] for e in entities], abs=1e-5)


IMPORTED = """<View>
  <Text name="review" value="$text"/>
  <Choices name="sentiment" toName="review"><Choice value="正面"/><Choice value="负面"/></Choices>
</View>"""


def test_an_imported_pre_annotation_file_is_stored_as_written(studio, backends, tmp_path):
    records = served_records(backends["classify"], REVIEWS)
    written = [label_studio_task(r, "run/best", names=("sentiment", "review")) for r in records]
    path = tmp_path / "import.json"  # as predict --format label-studio writes it
    path.write_text(json.dumps(written, ensure_ascii=False), encoding="utf-8")
    project = studio.project("ernie_ft import", IMPORTED)
    answer = studio.api("POST", f"/api/projects/{project}/import", json.loads(path.read_text(encoding="utf-8")))
    assert answer["task_count"] == answer["prediction_count"] == len(REVIEWS)
    tasks, stored = {t["id"]: t["data"]["text"] for t in studio.tasks(project)}, studio.predictions(project)
    by_text = {w["data"]["text"]: w["predictions"][0] for w in written}
    assert set(stored) == set(tasks)
    for task, text in tasks.items():
        [prediction] = stored[task]
        want = by_text[text]
        assert (prediction["model_version"], prediction["result"]) == (want["model_version"], want["result"])
        assert prediction["score"] == pytest.approx(want["score"])


def test_a_model_trains_from_the_projects_annotations(studio, backends, tmp_path, monkeypatch, capsys):
    lines = (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()
    head, rows = lines[0].split("\t"), [line.split("\t") for line in lines[1:17]]
    label_at, text_at = head.index("label"), head.index("text_a")
    project = studio.project("ernie_ft training", SENTIMENT)
    studio.api("POST", f"/api/projects/{project}/import", [{"comment": r[text_at]} for r in rows])
    gold = {r[text_at]: r[label_at] for r in rows}
    for task in studio.tasks(project)[:12]:  # 4 tasks stay unannotated: the export leaves them out
        choice = {"choices": [gold[task["data"]["comment"]]]}
        result = [{"from_name": "情感", "to_name": "评论", "type": "choices", "value": choice}]
        studio.api("POST", f"/api/tasks/{task['id']}/annotations", {"result": result})
    source = f"label-studio://127.0.0.1:{studio.url.rsplit(':', 1)[1]}/{project}"
    out = tmp_path / "run"
    flags = ["--text-column", "comment", "--model", "scratch:tiny", "--epochs", "1", "--threads", "1"]
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", TOKEN)
    assert cli(["classify", "--train", source, *flags, "--output", str(out)]) == 0
    saved = out / "logs" / f"label-studio-127.0.0.1-{studio.url.rsplit(':', 1)[1]}-{project}.json"
    exported = json.loads(saved.read_text(encoding="utf-8"))
    assert sorted(t["data"]["comment"] for t in exported) == sorted(t["data"]["comment"] for t in studio.tasks(project)
                                                                    if t["total_annotations"])  # fmt: skip
    err = capsys.readouterr()
    assert "Label Studio JSON export, 12 tasks, text from data.comment" in err.out + err.err
    assert (out / "best").is_dir()


def test_a_project_that_cannot_be_read_is_one_error_naming_what_to_do(studio, backends, tmp_path, monkeypatch, capsys):
    port = studio.url.rsplit(":", 1)[1]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]  # bound, never listening: connections to it are refused
        cases = [
            (None, f"label-studio://127.0.0.1:{port}/1", "set LABEL_STUDIO_API_KEY to your Label Studio access token"),
            ("not-the-token", f"label-studio://127.0.0.1:{port}/1", "refused the token in LABEL_STUDIO_API_KEY (401)"),
            (TOKEN, f"label-studio://127.0.0.1:{port}/9999", "has no project 9999 (404)"),
            (TOKEN, f"label-studio://127.0.0.1:{nobody}/1", f"cannot reach Label Studio at http://127.0.0.1:{nobody}"),
            (TOKEN, "label-studio://127.0.0.1/1", "expected label-studio://HOST:PORT/PROJECT"),
        ]
        for i, (token, source, message) in enumerate(cases):
            if token is None:
                monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
            else:
                monkeypatch.setenv("LABEL_STUDIO_API_KEY", token)
            out = tmp_path / f"run{i}"
            assert cli(["classify", "--train", source, "--model", "scratch:tiny", "--output", str(out)]) == 2
            [line] = capsys.readouterr().err.strip().splitlines()
            assert line.startswith(f"error: --train {source}: ") and message in line, line
            assert not out.exists()  # nothing written for a run that did not start
