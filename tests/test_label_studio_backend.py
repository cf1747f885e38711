"""serve as a Label Studio ML backend (``/label-studio``): the calls Label Studio makes when a project connects a
backend and asks for predictions (health, setup with its labelling config, predict with its tasks), answered in the
project's own tag names, with the labels its config does not offer left out. The predictions are predict's."""

import json

import pytest
from conftest import DATA
from test_pre_annotations import relation
from test_serve import ReadyClient

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.data import pre_annotations
from ernie_ft.serving import label_studio

TINY = ["--model", "scratch:2x64", "--threads", "1", "--max-len", "32", "--batch-size", "8", "--epochs", "2"]

SENTIMENT = """<View>
  <Text name="review" value="$comment"/>
  <Choices name="polarity" toName="review" choice="single">
    <Choice value="正面"/><Choice value="负面"/>
  </Choices>
</View>"""

NER_CONFIG = """<View>
  <Labels name="entity" toName="doc">{labels}</Labels>
  <Text name="doc" value="$sentence"/>
</View>"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ls")
    found = {"classify": tmp_path / "classify", "ner": tmp_path / "ner"}
    sentiment = ["--train", str(DATA / "sentiment_train.tsv"), "--lr", "3e-3"]
    assert task_command("classify")([*sentiment, *TINY, "--output", str(found["classify"])]) == 0
    ner = ["--train", str(DATA / "ner_train.jsonl"), "--lr", "5e-3", "--epochs", "6"]
    assert task_command("ner")([*ner, *TINY, "--output", str(found["ner"])]) == 0
    return found


def client(model_dir):
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    return ReadyClient(create_app(ServedModel(str(model_dir), "dygraph", "cpu")))


def predicted(model_dir, texts, tmp_path) -> list[dict]:
    source, out = tmp_path / "texts.txt", tmp_path / "pred.jsonl"
    source.write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
    assert cli(["predict", "--model", str(model_dir), "--input", str(source), "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_a_classifier_answers_label_studio_in_the_projects_names(models, tmp_path):
    texts = ["房间很干净，服务也好", "太吵了，再也不来了", "早餐一般"]
    expected = predicted(models["classify"], texts, tmp_path)
    tasks = [{"id": i, "data": {"comment": t}} for i, t in enumerate(texts)]
    with client(models["classify"]) as http:
        health = http.get("/label-studio/health").json()
        assert health["status"] == "UP" and health["model_class"] == "ernie_ft classify"
        setup = http.post("/label-studio/setup", json={"project": "3.1700000000", "schema": SENTIMENT})
        version = setup.json()["model_version"]
        answer = http.post("/label-studio/predict", json={"tasks": tasks, "project": "3.1700000000"}).json()
    assert answer["model_version"] == version and len(answer["results"]) == 3
    for result, record in zip(answer["results"], expected):
        [choice] = result["result"]
        assert (choice["from_name"], choice["to_name"], choice["type"]) == ("polarity", "review", "choices")
        assert choice["value"]["choices"] == [record["label"]]
        assert result["score"] == pytest.approx(record["probs"][record["label"]], abs=1e-6)
        assert result["model_version"] == version


def test_retrieve_predictions_answers_more_tasks_than_max_inputs(models):
    """Label Studio 1.23 sends every selected task in one /predict request: --max-inputs bounds a slice, not them."""
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    texts = ["房间很干净，服务也好", "太吵了，再也不来了", "早餐一般", "位置方便", "空调坏了"] * 3
    tasks = [{"id": i, "data": {"comment": t}} for i, t in enumerate(texts)]
    app = create_app(ServedModel(str(models["classify"]), "dygraph", "cpu"), Limits(max_inputs=4, max_chars=12))
    with ReadyClient(app) as http:
        answer = http.post("/label-studio/predict", json={"tasks": tasks, "label_config": SENTIMENT})
        alone = [http.post("/label-studio/predict", json={"tasks": [t], "label_config": SENTIMENT}) for t in tasks[:5]]
        tasks[13]["data"]["comment"] = "很" * 13  # over --max-chars, in the fourth slice
        refused = http.post("/label-studio/predict", json={"tasks": tasks, "label_config": SENTIMENT})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(results) == 15
    for i, one in enumerate(alone):  # the same answers as the tasks sent one by one
        assert results[i]["result"] == results[i + 5]["result"] == one.json()["results"][0]["result"]
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "tasks[13].text", refused.text


def test_an_ner_model_answers_regions_and_leaves_out_labels_the_config_lacks(models, tmp_path, capsys):
    texts = ["张三在北京的清华大学读书", "李四去了上海"]
    expected = predicted(models["ner"], texts, tmp_path)
    found = sorted({e["type"] for r in expected for e in r["entities"]})
    assert found, "the tagger found no entity: the test would compare nothing"
    offered = found[:-1] if len(found) > 1 else []
    labels = "".join(f'<Label value="{t}"/>' for t in offered) or '<Label value="其他"/>'
    tasks = [{"id": i, "data": {"sentence": t}} for i, t in enumerate(texts)]
    with client(models["ner"]) as http:
        config = NER_CONFIG.format(labels=labels)
        answer = http.post("/label-studio/predict", json={"tasks": tasks, "label_config": config}).json()
    for result, record in zip(answer["results"], expected):
        regions = [r for r in result["result"] if r["type"] == "labels"]
        assert {(r["from_name"], r["to_name"]) for r in regions} <= {("entity", "doc")}
        want = [e for e in record["entities"] if e["type"] in offered]
        assert [(r["value"]["start"], r["value"]["end"], r["value"]["labels"]) for r in regions] == [
            (e["start"], e["end"], [e["type"]]) for e in want
        ]
    left_out = sum(e["type"] not in offered for r in expected for e in r["entities"])
    assert f"label-studio: {left_out} predicted labels the project's config does not offer" in capsys.readouterr().err


def test_what_label_studio_cannot_use_is_a_422_naming_it(models):
    with client(models["classify"]) as http:
        no_config = http.post("/label-studio/predict", json={"tasks": [{"data": {"comment": "好"}}], "project": "9"})
        assert no_config.status_code == 422 and no_config.json()["error"]["field"] == "label_config"
        wrong_key = http.post(
            "/label-studio/predict", json={"tasks": [{"data": {"text": "好"}}], "label_config": SENTIMENT}
        )
        assert wrong_key.status_code == 422 and wrong_key.json()["error"]["field"] == "tasks[0].data.comment"
        labels_only = NER_CONFIG.format(labels='<Label value="PER"/>')
        no_choices = http.post("/label-studio/predict", json={"tasks": [{"data": {"sentence": "好"}}],
                                                              "label_config": labels_only})  # fmt: skip
        assert no_choices.status_code == 422 and "<Choices>" in no_choices.json()["error"]["message"]


# ------------------------------------------------------------------ label paths, nested entities, relations

TAXONOMY = """<View>
  <Text name="headline" value="$title"/>
  <Taxonomy name="topic" toName="headline">{choices}</Taxonomy>
</View>"""


@pytest.fixture(scope="module")
def paths_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("ls_paths") / "paths"
    flags = ["--train", str(DATA / "news_tags_train.tsv"), "--label-column", "labels", "--hierarchy-separator", "-"]
    assert task_command("classify")([*flags, *TINY, "--epochs", "8", "--lr", "5e-3", "--output", str(out)]) == 0
    return out


def test_label_paths_go_to_a_taxonomy_as_lists_of_their_parts(paths_model, tmp_path, capsys):
    rows = (DATA / "news_tags_train.tsv").read_text(encoding="utf-8").splitlines()[1:9]
    texts = [row.split("\t")[1] for row in rows]  # headlines the model was trained on: it tells their topics apart
    expected = predicted(paths_model, texts, tmp_path)
    ends = [[p.split("-") for p in pre_annotations.leaves(r["labels"], "-")] for r in expected]
    found = sorted({tuple(p) for e in ends for p in e})
    tops = sorted({p[0] for p in found})
    assert len(tops) > 1, "the model predicted one topic: the test would not both keep and leave out"
    offered = [p for p in found if p[0] != tops[0]]  # the first topic is not in the project's taxonomy: left out
    tree: dict = {"其他": set()}
    for path in offered:
        tree.setdefault(path[0], set()).update(path[1:])
    choices = "".join(f'<Choice value="{top}">' + "".join(f'<Choice value="{c}"/>' for c in sorted(below)) + "</Choice>"
                      for top, below in tree.items())  # fmt: skip
    tasks = [{"id": i, "data": {"title": t}} for i, t in enumerate(texts)]
    with client(paths_model) as http:
        config = TAXONOMY.format(choices=choices)
        answer = http.post("/label-studio/predict", json={"tasks": tasks, "label_config": config}).json()
    for result, want in zip(answer["results"], ends):
        want = [p for p in want if tuple(p) in offered]
        got = result["result"]
        assert got == ([{"from_name": "topic", "to_name": "headline", "type": "taxonomy", "value": {"taxonomy": want}}]
                       if want else [])  # fmt: skip
    left_out = sum(tuple(p) not in offered for e in ends for p in e)
    assert left_out and f"label-studio: {left_out} predicted labels" in capsys.readouterr().err


NESTED = {"text": "😀北京大学的学生", "entities": [
    {"start": 1, "end": 5, "type": "ORG", "text": "北京大学", "score": 0.9},
    {"start": 1, "end": 3, "type": "LOC", "text": "北京", "score": 0.8},
    {"start": 6, "end": 8, "type": "ROLE", "text": "学生", "score": 0.7},
]}  # fmt: skip


def test_nested_entities_are_overlapping_regions_in_utf16_units():
    config = NER_CONFIG.format(labels='<Label value="ORG"/><Label value="LOC"/>')
    [answer], dropped = label_studio.answer_tasks([NESTED], config, "v1")
    regions = [(r["value"]["start"], r["value"]["end"], r["value"]["text"], r["value"]["labels"], r["score"])
               for r in answer["result"]]  # fmt: skip
    assert regions == [(2, 6, "北京大学", ["ORG"], 0.9), (2, 4, "北京", ["LOC"], 0.8)]  # 😀 is two UTF-16 units
    assert dropped == 1 and answer["model_version"] == "v1"


RELATION_CONFIG = """<View>
  <Relations><Relation value="作者"/></Relations>
  <Labels name="ends" toName="body"><Label value="图书作品"/><Label value="人物"/></Labels>
  <Text name="body" value="$content"/>
</View>"""


def test_relations_link_regions_with_the_projects_relation_labels():
    text = "《红楼梦》的作者是曹雪芹，曹雪芹出生于南京，曹雪芹字梦阮"
    record = {"text": text, "entities": [], "relations": [
        relation("红楼梦", "图书作品", "作者", "曹雪芹", "人物", text),
        relation("曹雪芹", "人物", "出生地", "南京", "地点", text),  # 地点 is not a label of the project: left out
        relation("曹雪芹", "人物", "字", "梦阮", "人物", text),  # 字 is not a relation of the project: left out
    ]}  # fmt: skip
    [answer], dropped = label_studio.answer_tasks([record], RELATION_CONFIG, "v1")
    regions = {
        r["id"]: (r["value"]["text"], r["value"]["labels"][0]) for r in answer["result"] if r["type"] == "labels"
    }
    links = [
        (regions[r["from_id"]], r["labels"], regions[r["to_id"]]) for r in answer["result"] if r["type"] == "relation"
    ]
    assert links == [(("红楼梦", "图书作品"), ["作者"], ("曹雪芹", "人物"))]
    assert {(r["from_name"], r["to_name"]) for r in answer["result"] if r["type"] == "labels"} == {("ends", "body")}
    assert dropped == 3  # the region 南京, the relation to it, and the relation 字
    with pytest.raises(label_studio.ConfigError, match="<Labels>"):
        label_studio.answer_tasks([record], SENTIMENT, "v1")
