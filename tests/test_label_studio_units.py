"""Label Studio's offsets in UTF-16 code units against Python's own UTF-16 codec, and which broken JSON texts
count as truncated."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ernie_ft.data.annotations import Truncated, load
from ernie_ft.data.label_studio import utf16_to_index
from ernie_ft.errors import UserError

CHARACTERS = st.sampled_from(["a", "中", "😀", "𠀀", "\U0010ffff", "\uffff", " "])


@settings(max_examples=200, deadline=None, database=None)
@given(text=st.lists(CHARACTERS, max_size=12).map("".join))
def test_every_utf16_offset_maps_to_the_python_index_of_the_same_place(text):
    index = utf16_to_index(text)
    inside = set()
    for i in range(len(text) + 1):
        unit = len(text[:i].encode("utf-16-le")) // 2  # the codec: how JavaScript counts
        assert index(unit) == i
        if i < len(text) and ord(text[i]) > 0xFFFF:
            inside.add(unit + 1)  # between the two halves of a surrogate pair
    assert all(index(unit) is None for unit in inside)


def test_a_text_without_astral_characters_keeps_its_offsets():
    index = utf16_to_index("张三去北京")
    assert [index(u) for u in range(6)] == list(range(6))


TASKS = [{"id": 1, "data": {"text": "张三去北京"}, "annotations": [{"result": []}]}] * 2
WHOLE = json.dumps(TASKS, ensure_ascii=False)


@pytest.mark.parametrize(
    "text",
    [
        WHOLE[:-1],  # no closing ]
        WHOLE[: WHOLE.index("张三") + 1],  # inside a string
        WHOLE[: WHOLE.index(": [{") + 2],  # after a key's colon
        WHOLE[: WHOLE.index("}]}") + 2] + ", ",  # between two tasks
        WHOLE.replace('"id": 1', '"id": 1.5').split("1.5")[0] + "1.",  # inside a number
        WHOLE.replace('"id": 1', '"id": true')[: WHOLE.index('"id": 1') + 8],  # inside true
        WHOLE.replace("张三", "\\u5f20")[: WHOLE.index("张三") + 4],  # inside a \\u escape
    ],
    ids=["bracket", "string", "colon", "between", "number", "literal", "escape"],
)
def test_a_json_array_cut_anywhere_is_truncated(text):
    with pytest.raises(Truncated, match="is truncated"):
        load(text, "--train: x.json")


@pytest.mark.parametrize(
    "text",
    [WHOLE.replace('"张三去北京"', "张三去北京"), WHOLE.replace("}]", "}}]", 1), WHOLE[:-1] + "}]"],
    ids=["bare-word", "extra-brace", "extra-brace-at-end"],
)
def test_a_json_array_broken_before_its_end_is_not_truncated(text):
    assert load(WHOLE, "--train: x.json").records[1].text == "张三去北京"
    try:
        load(text, "--train: x.json")
    except UserError as e:
        assert not isinstance(e, Truncated) and "truncated" not in str(e)


PAIR_CONFIG = """<View>
  <Header value="相似吗？"/>
  <Text name="问题一" value="$q1"/>
  <Text name="问题二" value="$q2"/>
  <Choices name="相似" toName="问题二"><Choice value="0"/><Choice value="1"/></Choices>
</View>"""


def test_the_text_fields_of_a_config_one_rule_for_one_text_and_a_pair():
    from ernie_ft.data.label_config import ConfigError, text_fields

    assert text_fields(PAIR_CONFIG) == ("q2",)  # one text: the one the control labels
    assert text_fields(PAIR_CONFIG, 2) == ("q1", "q2")  # a pair: the first two <Text> tags in their order
    review = '<View><Labels name="l" toName="t"/><Text name="x" value="$other"/><Text name="t" value="$review"/></View>'
    assert text_fields(review) == ("review",)
    assert text_fields('<View><Text name="t" value="$review"/></View>') == ("review",)  # no control: the first
    with pytest.raises(ConfigError, match="shows 1 text \\(data.review\\); this sentence-pair model reads 2"):
        text_fields(review.replace('<Text name="x" value="$other"/>', ""), 2)
    with pytest.raises(ConfigError, match="not XML"):
        text_fields("<View>")


def test_an_exports_text_fields_without_a_config_follow_its_data():
    from ernie_ft.data.label_config import task_text_fields

    tasks = [{"data": {"review": "好", "id": 3}}, {"data": {"review": "差"}}]
    assert task_text_fields(None, tasks) == ("review",)  # the one string field
    assert task_text_fields("<View>broken", tasks) == ("review",)  # a config that shows nothing: the data
    assert task_text_fields(PAIR_CONFIG, tasks, 2) == ("q1", "q2")  # a config that does: the config
    both = [{"data": {"a": "x", "b": "y"}}]
    assert task_text_fields(None, both, 2) == ("a", "b") and task_text_fields(None, both) == ("text",)
    assert task_text_fields(None, [{"data": {"text": "x", "text_pair": "y", "c": "z"}}], 2) == ("text", "text_pair")


def test_a_tasks_record_holds_each_text_under_the_models_input_name():
    from ernie_ft.data.label_config import MissingText, task_record

    task = {"data": {"q1": "酸奶能喝吗", "q2": "酸奶要冷藏吗"}}
    assert task_record(task, ("q1", "q2")) == {"text": "酸奶能喝吗", "text_pair": "酸奶要冷藏吗"}
    assert task_record(task, ("q2",), ("text",)) == {"text": "酸奶要冷藏吗"}
    with pytest.raises(MissingText) as missing:
        task_record({"data": {"q1": "x", "q2": 3}}, ("q1", "q2"), where="tasks[4]")
    assert missing.value.where == "tasks[4].data.q2"
