"""Label Studio's ``<Taxonomy>`` annotations read back as training data: each path of nodes is a label path joined by
``--hierarchy-separator``, several paths a task a label set; what serve's backend answered to a Taxonomy project reads
back as the labels the model predicted; a path of several nodes without a separator is one error naming the file and
the flag."""

import json

import pytest

from ernie_ft.data.annotations import classification_rows, load
from ernie_ft.data.pre_annotations import leaves
from ernie_ft.errors import UserError
from ernie_ft.serving.label_studio import answer_tasks

TAXONOMY = """<View>
  <Text name="headline" value="$title"/>
  <Taxonomy name="topic" toName="headline">
    <Choice value="体育"><Choice value="篮球"/><Choice value="足球"/></Choice>
    <Choice value="科技"><Choice value="人工智能"/></Choice>
    <Choice value="天气"/>
  </Taxonomy>
</View>"""

PREDICTED = [  # predict's records of a label-path model (--hierarchy-separator -, --multi-label)
    {"text": "湖人队主场击败勇士", "labels": ["体育", "体育-篮球"], "probs": {"体育": 0.9, "体育-篮球": 0.8}},
    {
        "text": "世界杯与大模型",
        "labels": ["体育", "体育-足球", "科技", "科技-人工智能"],
        "probs": {"体育": 0.7, "体育-足球": 0.6, "科技": 0.9, "科技-人工智能": 0.55},
    },  # fmt: skip
    {"text": "明天有雨", "labels": ["天气"], "probs": {"天气": 0.95}},
]


def exported(tasks: list) -> str:
    return json.dumps(tasks, ensure_ascii=False)


def read(text: str, separator, predictions_as_labels=False) -> list[tuple]:
    where = "--train: project.json"
    export = load(text, where, "title", predictions_as_labels)
    return [tuple(row["label"]) for _, row in classification_rows(export, where, True, separator)[1]]


def test_what_serve_answered_a_taxonomy_project_reads_back_as_the_predicted_label_paths():
    results, dropped = answer_tasks(PREDICTED, TAXONOMY, "run/best", "-")
    assert dropped == 0 and all(r["result"][0]["type"] == "taxonomy" for r in results)
    tasks = [{"id": i, "data": {"title": r["text"]}, "predictions": [p]}
             for i, (r, p) in enumerate(zip(PREDICTED, results))]  # fmt: skip
    expected = [tuple(leaves(r["labels"], "-")) for r in PREDICTED]
    assert read(exported(tasks), "-", predictions_as_labels=True) == expected


def annotated(*paths) -> dict:
    value = {"taxonomy": [list(p) for p in paths]}
    result = [{"from_name": "topic", "to_name": "headline", "type": "taxonomy", "value": value}]
    return {"id": 7, "data": {"title": "世界杯与大模型"}, "annotations": [{"result": result}]}


def test_annotated_paths_are_joined_by_the_separator_and_counted(capsys):
    text = exported([annotated(["体育", "足球"], ["科技", "人工智能"]), annotated(["天气"])])
    assert read(text, "/") == [("体育/足球", "科技/人工智能"), ("天气",)]
    assert "3 label paths from a <Taxonomy>" in load(text, "--train: project.json", "title").summary


def test_a_path_of_several_levels_without_a_separator_is_one_error_naming_the_file_and_the_flag():
    text = exported([annotated(["天气"]), annotated(["体育", "足球"])])
    with pytest.raises(UserError, match="pass --hierarchy-separator SEP") as e:
        read(text, None)
    assert str(e.value).startswith("--train: project.json:1: task 7: the Taxonomy label path 体育 > 足球 has 2 levels")
    with pytest.raises(UserError, match="its node '体育-足球' holds the separator '-'"):
        read(exported([annotated(["体育-足球", "篮球"])]), "-")


def test_classify_reads_a_taxonomy_export_as_label_paths_with_its_separator(tmp_path):
    """The separator reaches the export's reader from ``classify --hierarchy-separator``: the task reads each text's
    paths with their parents, as it reads label paths from a TSV."""
    from ernie_ft.classify.task import Classification
    from ernie_ft.config import DataConfig

    path = tmp_path / "project.json"
    path.write_text(exported([annotated(["体育", "足球"], ["科技", "人工智能"]), annotated(["天气"])]), "utf-8")
    task = Classification(multi_label=True, hierarchy_separator="-")
    examples = task.read(str(path), DataConfig(text_column="title"), "--train")
    assert [e.label for e in examples] == [("体育", "体育-足球", "科技", "科技-人工智能"), ("天气",)]
