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
