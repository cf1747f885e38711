"""serve as a Label Studio ML backend (``/label-studio``): the calls Label Studio makes when a project connects a
backend and asks for predictions (health, setup with its labelling config, predict with its tasks), answered in the
project's own tag names, with the labels its config does not offer left out. The predictions are predict's."""

import json

import pytest
from conftest import DATA
from test_serve import ReadyClient

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command

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
