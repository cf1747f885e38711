"""predict --format label-studio and select write the project's own names (issue 57, item 3): --label-config's text
field(s), tag names and labels; a sentence-pair model's tasks carry both texts; model_version is the name serve
gives the model. Label Studio's own acceptance of such files: test_label_studio_names_real.py."""

import json

import pytest
from conftest import DATA

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.inference.outputs import model_name
from ernie_ft.task import load_task

TINY = ["--model", "scratch:2x64", "--threads", "1", "--epochs", "1", "--max-len", "32"]
REVIEW = """<View>
  <Text name="评论" value="$review"/>
  <Choices name="情感" toName="评论" choice="single">{choices}</Choices>
</View>"""
PAIR = """<View>
  <Text name="问题一" value="$q1"/>
  <Text name="问题二" value="$q2"/>
  <Choices name="相同" toName="问题一"><Choice value="0"/><Choice value="1"/></Choices>
</View>"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{'classify': a sentiment classifier, 'pair': a sentence-pair classifier}, run directories."""
    tmp = tmp_path_factory.mktemp("names")
    found = {"classify": tmp / "classify", "pair": tmp / "pair"}
    for name, data in (("classify", "sentiment_train.tsv"), ("pair", "pairs_train.tsv")):
        assert task_command("classify")(["--train", str(DATA / data), *TINY, "--output", str(found[name])]) == 0
    return found


def config(tmp_path, xml: str, name: str = "config.xml") -> str:
    path = tmp_path / name
    path.write_text(xml, encoding="utf-8")
    return str(path)


def answers(model, pool, tmp_path) -> list[dict]:
    out = tmp_path / "answers.jsonl"
    assert cli(["predict", "--model", str(model), "--input", str(pool), "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_predict_and_select_write_the_projects_text_field_and_tag_names(models, tmp_path, capsys):
    model, pool = models["classify"], DATA / "predict.txt"
    records = answers(model, pool, tmp_path)
    xml = config(tmp_path, REVIEW.format(choices='<Choice value="正面"/><Choice value="负面"/>'))
    predicted, chosen = tmp_path / "tasks.json", tmp_path / "chosen.json"
    base = ["--model", str(model), "--input", str(pool), "--label-config", xml]
    assert cli(["predict", *base, "--format", "label-studio", "--output", str(predicted)]) == 0
    assert cli(["select", *base, "--size", "3", "--output", str(chosen)]) == 0
    tasks = json.loads(predicted.read_text(encoding="utf-8"))
    assert [t["data"] for t in tasks] == [{"review": r["text"]} for r in records]
    for task, record in zip(tasks, records):
        [prediction] = task["predictions"]
        assert prediction["model_version"] == model_name(str(model)) == "classify"  # serve's name for --model RUN
        assert prediction["result"] == [{"from_name": "情感", "to_name": "评论", "type": "choices",
                                         "value": {"choices": [record["label"]]}}]  # fmt: skip
    picked = json.loads(chosen.read_text(encoding="utf-8"))
    assert len(picked) == 3 and all(t in tasks for t in picked)  # the same tasks, the same names
    back = load_task("classify").read(str(predicted), DataConfig(predictions_as_labels=True, text_column="review"),
                                      "--train")  # fmt: skip
    assert [e.label for e in back] == [r["label"] for r in records]


def test_labels_the_config_does_not_offer_are_left_out_and_counted(models, tmp_path, capsys):
    model, pool = models["classify"], DATA / "predict.txt"
    records = answers(model, pool, tmp_path)
    dropped = records[0]["label"]  # the project does not offer it: its predictions are left out
    offered = [label for label in ("正面", "负面", "中性") if label != dropped]
    xml = config(tmp_path, REVIEW.format(choices="".join(f'<Choice value="{label}"/>' for label in offered)))
    out = tmp_path / "tasks.json"
    capsys.readouterr()
    args = ["predict", "--model", str(model), "--input", str(pool), "--label-config", xml]
    assert cli([*args, "--format", "label-studio", "--output", str(out)]) == 0
    results = [t["predictions"][0]["result"] for t in json.loads(out.read_text(encoding="utf-8"))]
    assert [bool(r) for r in results] == [record["label"] != dropped for record in records]
    left_out = sum(record["label"] == dropped for record in records)
    assert f"note: {left_out} predicted labels that --label-config {xml} does not offer were left out" in (
        capsys.readouterr().err
    )


def test_a_sentence_pair_models_tasks_carry_both_texts(models, tmp_path, capsys):
    model, pool = models["pair"], DATA / "pairs_dev.tsv"
    records = answers(model, pool, tmp_path)
    assert all(r.get("text_pair") for r in records)
    plain, named = tmp_path / "plain.json", tmp_path / "named.json"
    base = ["--model", str(model), "--input", str(pool), "--format", "label-studio"]
    assert cli(["predict", *base, "--output", str(plain)]) == 0
    assert cli(["select", *base, "--size", "50", "--output", str(named), "--label-config", config(tmp_path, PAIR)]) == 0
    assert [t["data"] for t in json.loads(plain.read_text(encoding="utf-8"))] == [
        {"text": r["text"], "text_pair": r["text_pair"]} for r in records
    ]
    chosen = json.loads(named.read_text(encoding="utf-8"))
    assert sorted((t["data"]["q1"], t["data"]["q2"]) for t in chosen) == sorted(
        {(r["text"], r["text_pair"]) for r in records}
    )
    assert {(r["from_name"], r["to_name"]) for t in chosen for r in t["predictions"][0]["result"]} == {
        ("相同", "问题一")
    }


@pytest.mark.parametrize(
    "case, extra, message",
    [
        ("doccano", ["--format", "doccano"], "--label-config is a Label Studio labelling config, for --format "
                                             "label-studio; doccano's import takes the text and label column names"),
        ("answers", [], "--label-config is a Label Studio labelling config, for --format label-studio"),
        ("missing", ["--format", "label-studio"], "--label-config {dir}/nothing.xml: cannot be read"),
        ("not XML", ["--format", "label-studio"], "--label-config {xml}: the labelling config is not XML"),
        ("one text", ["--format", "label-studio"], "--label-config {xml}: the labelling config shows 1 text "
                                                   "(data.review); this sentence-pair model reads 2"),
    ],
)  # fmt: skip
def test_a_label_config_that_cannot_serve_is_one_error_line_before_any_answer(models, tmp_path, capsys, case, extra,
                                                                               message):  # fmt: skip
    xml = {"not XML": "<View><Text", "one text": REVIEW.format(choices="")}.get(case, REVIEW.format(choices=""))
    path = config(tmp_path, xml) if case != "missing" else str(tmp_path / "nothing.xml")
    model = models["pair" if case == "one text" else "classify"]
    out = tmp_path / "out.json"
    capsys.readouterr()
    pool = DATA / ("pairs_dev.tsv" if case == "one text" else "predict.txt")
    args = ["predict", "--model", str(model), "--input", str(pool), "--label-config", path]
    assert cli([*args, *extra, "--output", str(out)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("error: ") and message.format(dir=tmp_path, xml=path) in line, line
    assert not out.exists()


def test_select_on_a_pool_with_each_line_twice_returns_each_text_once(models, tmp_path, capsys):
    lines = (DATA / "predict.txt").read_text(encoding="utf-8").splitlines()
    pool = tmp_path / "twice.txt"
    pool.write_text("".join(f"{line}\n{line}\n" for line in lines), encoding="utf-8")
    for strategy in ("entropy", "margin", "random"):
        out = tmp_path / f"{strategy}.json"
        capsys.readouterr()
        args = ["select", "--model", str(models["classify"]), "--input", str(pool), "--size", str(2 * len(lines))]
        assert cli([*args, "--strategy", strategy, "--output", str(out)]) == 0
        texts = [t["data"]["text"] for t in json.loads(out.read_text(encoding="utf-8"))]
        assert sorted(texts) == sorted(lines)  # every text, once
        line = f"chose {len(lines)} of {len(lines)} texts by {strategy} ({len(lines)} repeats in the pool left out)"
        assert line in capsys.readouterr().err


def test_the_backend_answers_a_pair_projects_tasks_for_both_texts(models, tmp_path):
    from test_label_studio_backend import client

    records = answers(models["pair"], DATA / "pairs_dev.tsv", tmp_path)[:6]
    tasks = [{"id": i, "data": {"q1": r["text"], "q2": r["text_pair"]}} for i, r in enumerate(records)]
    with client(models["pair"]) as http:
        http.post("/label-studio/setup", json={"project": "7.1700000000", "schema": PAIR})
        answer = http.post("/label-studio/predict", json={"tasks": tasks, "project": "7.1700000000"}).json()
        alone = http.post("/label-studio/predict", json={"tasks": [{"data": {"q1": "x"}}], "project": "7.1700000000"})
    out = tmp_path / "tasks.json"  # the same model's file: the same model_version as the backend's answers
    args = ["predict", "--model", str(models["pair"] / "best"), "--input", str(DATA / "pairs_dev.tsv")]
    assert cli([*args, "--format", "label-studio", "--output", str(out)]) == 0
    file_version = json.loads(out.read_text(encoding="utf-8"))[0]["predictions"][0]["model_version"]
    assert answer["model_version"] == file_version == "pair" and len(answer["results"]) == len(records)
    for result, record in zip(answer["results"], records):  # predict's answer to both texts
        assert result["result"][0]["value"]["choices"] == [record["label"]]
        assert result["score"] == pytest.approx(record["probs"][record["label"]], abs=1e-5)
    assert alone.status_code == 422 and alone.json()["error"]["field"] == "tasks[0].data.q2", alone.text


def test_select_refuses_a_config_without_the_models_control_before_writing(models, tmp_path, capsys):
    xml = config(tmp_path, '<View><Text name="t" value="$review"/><Labels name="l" toName="t"/></View>')
    out = tmp_path / "chosen.json"
    capsys.readouterr()
    args = ["select", "--model", str(models["classify"]), "--input", str(DATA / "predict.txt"), "--size", "3"]
    assert cli([*args, "--label-config", xml, "--output", str(out)]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line == (f"error: --label-config {xml}: the labelling config has no <Choices> or <Taxonomy> tag on its "
                    "text (data.review) for this model's classes")  # fmt: skip
    assert not out.exists()
