"""Predictions written as Label Studio and doccano imports (ernie_ft/data/pre_annotations.py) read back as training
data with the same labels: classes, label paths, entities after an emoji (Label Studio counts UTF-16 units) and
relations."""

import json

import pytest

from ernie_ft.config import DataConfig
from ernie_ft.data import pre_annotations
from ernie_ft.errors import UserError
from ernie_ft.task import load_task

ON = DataConfig(predictions_as_labels=True)

SINGLE = [
    {"text": "菜很好吃", "label": "正面", "probs": {"正面": 0.9, "负面": 0.1}},
    {"text": "太难吃了", "label": "负面", "probs": {"正面": 0.2, "负面": 0.8}},
]
PATHS = [
    {"text": "湖人夺冠", "labels": ["体育", "体育-篮球"], "probs": {"体育": 0.9, "体育-篮球": 0.8, "财经": 0.1}},
    {"text": "股市大涨，球队上市", "labels": ["体育", "财经"], "probs": {"体育": 0.6, "体育-篮球": 0.2, "财经": 0.7}},
]
ENTITIES = [
    {"text": "😀张三在北京😀工作", "entities": [
        {"start": 1, "end": 3, "type": "PER", "text": "张三", "score": 0.9},
        {"start": 4, "end": 6, "type": "LOC", "text": "北京", "score": 0.8},
    ]},
    {"text": "𠀀李四去上海", "entities": [{"start": 1, "end": 3, "type": "PER", "text": "李四", "score": 0.7}]},
]  # fmt: skip


def relation(s, st, p, o, ot, text):
    entity = lambda name, kind: {"text": name, "start": text.index(name), "end": text.index(name) + len(name),  # noqa: E731
                                 "type": kind}  # fmt: skip
    return {"subject": entity(s, st), "predicate": p, "object": entity(o, ot), "score": 0.9}


TEXT = "😀《红楼梦》的作者是曹雪芹，曹雪芹出生于南京"
RELATIONS = [
    {"text": TEXT, "relations": [relation("红楼梦", "图书作品", "作者", "曹雪芹", "人物", TEXT),
                                 relation("曹雪芹", "人物", "出生地", "南京", "地点", TEXT)], "entities": []},
]  # fmt: skip


def write(tmp_path, name, records, tool, separator=None):
    path = tmp_path / name
    if tool == "label-studio":
        tasks = [pre_annotations.label_studio_task(r, "run/best", separator=separator) for r in records]
        path.write_text(json.dumps(tasks, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        lines = [json.dumps(pre_annotations.doccano_record(r, separator), ensure_ascii=False) for r in records]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("tool", pre_annotations.FORMATS)
def test_classes_and_label_paths_come_back(tmp_path, tool, capsys):
    path = write(tmp_path, "single", SINGLE, tool)
    assert [e.label for e in load_task("classify").read(path, ON, "--train")] == ["正面", "负面"]
    path = write(tmp_path, "paths", PATHS, tool, separator="-")
    task = load_task("classify", {"multi_label": True, "hierarchy_separator": "-"})
    assert [set(e.label) for e in task.read(path, ON, "--train")] == [set(r["labels"]) for r in PATHS]


@pytest.mark.parametrize("tool", pre_annotations.FORMATS)
def test_entities_come_back_at_their_characters(tmp_path, tool, capsys):
    path = write(tmp_path, "ner", ENTITIES, tool)
    for options in ({}, {"nested": True}):
        examples = load_task("ner", options).read(path, ON, "--train")
        assert [e.entities for e in examples] == [tuple((x["start"], x["end"], x["type"]) for x in r["entities"])
                                                  for r in ENTITIES]  # fmt: skip
    if tool == "label-studio":  # UTF-16 units: one more per astral character before the entity
        region = json.loads(open(path, encoding="utf-8").read())[0]["predictions"][0]["result"][1]["value"]
        assert (region["start"], region["end"], region["text"]) == (5, 7, "北京")


@pytest.mark.parametrize("tool", pre_annotations.FORMATS)
def test_relations_come_back_with_their_types(tmp_path, tool, capsys):
    path = write(tmp_path, "rel", RELATIONS, tool)
    [example] = load_task("relation").read(path, ON, "--train")
    assert set(example.gold) == {("红楼梦", "作者", "曹雪芹"), ("曹雪芹", "出生地", "南京")}
    assert {c for _, c, _ in example.triples} == {"作者 (图书作品→人物)", "出生地 (人物→地点)"}
    assert len(example.entities) == 3  # 曹雪芹 once, though it is in both triples


def test_label_studio_tasks_carry_scores_and_the_projects_tag_names():
    task = pre_annotations.label_studio_task(ENTITIES[0], "v1", names=("ner", "doc"))
    prediction = task["predictions"][0]
    assert task["data"] == {"text": ENTITIES[0]["text"]} and prediction["model_version"] == "v1"
    assert prediction["score"] == 0.8 and [r["score"] for r in prediction["result"]] == [0.9, 0.8]
    assert {(r["from_name"], r["to_name"]) for r in prediction["result"]} == {("ner", "doc")}
    assert pre_annotations.label_studio_task(SINGLE[1], "v1")["predictions"][0]["score"] == 0.8
    # a label path is written once, by its end (a project's choices are the labels, not their parents)
    [choices] = pre_annotations.label_studio_task(PATHS[0], "v1", separator="-")["predictions"][0]["result"]
    assert choices["value"] == {"choices": ["体育-篮球"]}
    assert pre_annotations.doccano_record(PATHS[1], "-")["label"] == ["体育", "财经"]


def test_a_record_of_another_task_is_refused():
    with pytest.raises(UserError, match="writes classification, NER and relation predictions"):
        pre_annotations.doccano_record({"id": "q1", "answer": "北京", "start": 3})


PAIRS = [
    {"text": "酸奶过期一天还能喝吗", "text_pair": "酸奶要放冰箱吗", "label": "0", "probs": {"0": 0.7, "1": 0.3}},
    {"text": "去机场坐地铁方便吗", "text_pair": "坐地铁到机场方便不方便", "label": "1", "probs": {"0": 0.2, "1": 0.8}},
]


def test_a_sentence_pairs_tasks_come_back_as_pairs_for_retraining(tmp_path, capsys):
    path = write(tmp_path, "pairs", PAIRS, "label-studio")
    on = DataConfig(predictions_as_labels=True, text_pair_column="text_pair")
    back = load_task("classify").read(path, on, "--train")
    assert [(e.text, e.text_pair, e.label) for e in back] == [(r["text"], r["text_pair"], r["label"]) for r in PAIRS]
    assert "text from data.text, data.text_pair" in capsys.readouterr().err
    annotated = [  # a pair project's export, in its own keys (what Start training fetches)
        {"id": 7 + k, "data": {"q1": r["text"], "q2": r["text_pair"]}, "annotations": [{"result": [
            {"from_name": "相同", "to_name": "问题一", "type": "choices", "value": {"choices": [r["label"]]}}]}]}
        for k, r in enumerate(PAIRS)
    ]  # fmt: skip
    export = tmp_path / "export.json"
    export.write_text(json.dumps(annotated, ensure_ascii=False), encoding="utf-8")
    columns = DataConfig(text_column="q1", text_pair_column="q2")
    back = load_task("classify").read(str(export), columns, "--train")
    assert [(e.text, e.text_pair, e.label) for e in back] == [(r["text"], r["text_pair"], r["label"]) for r in PAIRS]
    with pytest.raises(UserError, match=r"task 7: no text under data.q3 .* with --text-pair-column"):
        load_task("classify").read(str(export), DataConfig(text_column="q1", text_pair_column="q3"), "--train")
    assert pre_annotations.doccano_record(PAIRS[0])["text_pair"] == PAIRS[0]["text_pair"]
