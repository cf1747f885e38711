"""Files as users have them: doccano and Label Studio exports, headers of any names, Excel, --dev-split.

Each layout is covered by small files written here; the exports under ../shared/data/annotation-exports
are read too when present (skipped otherwise).
"""

import json

import pytest
from conftest import shared
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ernie_ft.config import DataConfig
from ernie_ft.data.readers import read_examples
from ernie_ft.data.sources import read_records
from ernie_ft.dev_split import split_dev
from ernie_ft.errors import UserError
from ernie_ft.ner.formats import read_ner
from ernie_ft.task import load_task

EXPORTS = "annotation-exports"


def write(tmp_path, name, content) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False), "utf-8")
    return str(path)


def jsonl(records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def ls_task(task_id, text, results, **extra):
    """A Label Studio task with one annotation holding ``results``."""
    return {"id": task_id, "data": {"text": text}, "annotations": [{"id": task_id, "result": results}], **extra}


def region(rid, start, end, text, label):
    value = {"start": start, "end": end, "text": text, "labels": [label]}
    return {"id": rid, "type": "labels", "from_name": "label", "to_name": "text", "value": value}


def choice(*names):
    return {"type": "choices", "from_name": "sentiment", "to_name": "text", "value": {"choices": list(names)}}


# ------------------------------------------------------------------------------------------------- doccano


def test_doccano_classification_keeps_label_lists_and_trains_single_label(tmp_path, capsys):
    path = write(
        tmp_path,
        "cls.jsonl",
        jsonl([{"id": 1, "text": "菜很好吃", "label": ["正面"]}, {"data": "太咸了", "label": ["负面"]}]),
    )
    columns, rows = read_records(path)
    assert columns == ["text", "label"]
    assert rows == [(1, {"text": "菜很好吃", "label": ["正面"]}), (2, {"text": "太咸了", "label": ["负面"]})]
    examples = load_task("classify").read(path, DataConfig(), "--train")
    assert [(e.text, e.label, e.line) for e in examples] == [("菜很好吃", "正面", 1), ("太咸了", "负面", 2)]
    assert "doccano JSONL (text classification, the older data key), 2 records" in capsys.readouterr().err


def test_doccano_shared_classification_example():
    examples = load_task("classify").read(
        str(shared(EXPORTS, "doccano_text_classification_example.jsonl")), DataConfig(), "--train"
    )
    assert [e.label for e in examples] == ["negative", "positive", "positive"]


def test_doccano_sequence_labelling_spans_are_exact(tmp_path, capsys):
    text = "张三在北京大学读书"
    path = write(tmp_path, "ner.jsonl", jsonl([{"text": text, "label": [[3, 7, "ORG"], [0, 2, "PER"]]}]))
    [example] = read_ner(path, "--train")
    assert example.entities == ((0, 2, "PER"), (3, 7, "ORG")) and example.line == 1
    assert "doccano JSONL (sequence labelling), 1 record" in capsys.readouterr().err
    shared_file = shared(EXPORTS, "doccano_sequence_labeling_example.jsonl")
    examples = read_ner(str(shared_file), "--train")
    assert [e.entities for e in examples] == [
        ((0, 2, "ORG"), (11, 17, "MISC")),
        ((0, 15, "PERSON"),),
        ((10, 15, "PERSON"),),
    ]


def test_doccano_entities_and_relations_are_kept(tmp_path):
    record = {
        "id": 7,
        "text": "马云创办了阿里巴巴",
        "entities": [
            {"id": 1, "start_offset": 0, "end_offset": 2, "label": "人物"},
            {"id": 2, "start_offset": 5, "end_offset": 9, "label": "公司"},
        ],
        "relations": [{"id": 3, "from_id": 1, "to_id": 2, "type": "创办"}],
    }
    # pretty-printed, as doccano's own example is
    [example] = read_ner(write(tmp_path, "rel.jsonl", json.dumps(record, ensure_ascii=False, indent=2)), "--train")
    assert example.entities == ((0, 2, "人物"), (5, 9, "公司"))
    assert example.relations == (((0, 2, "人物"), (5, 9, "公司"), "创办"),)
    [english] = read_ner(str(shared(EXPORTS, "doccano_relation_extraction_example.jsonl")), "--train")
    assert english.entities[0] == (0, 6, "ORG") and len(english.relations) == 3
    assert english.relations[1] == ((0, 6, "ORG"), (44, 54, "PERSON"), "foundedBy")


def test_doccano_line_with_neither_label_nor_entities_is_an_unknown_layout(tmp_path):
    path = write(tmp_path, "d.jsonl", jsonl([{"text": "好", "label": [[0, 1, "X"]]}, {"text": "差", "meta": {}}]))
    message = error_of(read_ner, path, "--train")
    assert f"{path}:2:" in message and "neither label nor entities" in message
    path = write(tmp_path, "c.jsonl", jsonl([{"data": "好", "label": ["正面"]}, {"data": "差"}]))
    assert f"{path}:2:" in error_of(read_examples, path)


# ------------------------------------------------------------------------------------------- Label Studio


def test_label_studio_choices_cancelled_several_annotations_and_predictions(tmp_path, capsys):
    cancelled = {"id": 9, "was_cancelled": True, "result": [choice("负面")], "updated_at": "2024-05-01T00:00:00Z"}
    older = {"id": 10, "result": [choice("负面")], "updated_at": "2024-01-01T00:00:00Z"}
    newer = {"id": 11, "result": [choice("正面")], "updated_at": "2024-03-01T00:00:00Z"}
    oldest = {"id": 13, "result": [choice("负面")], "updated_at": "2023-12-01T00:00:00Z"}
    tasks = [  # the most recent annotation of task 1 is neither its first nor its last non-cancelled one
        {"id": 1, "data": {"text": "好吃"}, "annotations": [cancelled, older, newer, oldest]},
        {"id": 2, "data": {"text": "难吃"}, "annotations": [cancelled], "predictions": [{"result": [choice("负面")]}]},
        {"id": 3, "data": {"text": "还没标"}, "annotations": []},
        {"id": 4, "data": {"text": "一般"}, "annotations": [{"id": 12, "result": [choice("中性")]}]},
    ]
    path = write(tmp_path, "export.json", tasks)
    examples = load_task("classify").read(path, DataConfig(), "--train")
    assert [(e.text, e.label) for e in examples] == [("好吃", "正面"), ("一般", "中性")]  # task 2: predictions only
    err = capsys.readouterr().err
    assert "Label Studio JSON export" in err and "most recent non-cancelled annotation" in err
    assert "2 cancelled annotations skipped" in err and "1 task with predictions only" in err
    assert "1 task without annotations or predictions" in err
    # prediction reads every task's text, the unlabelled one too
    unlabelled = read_examples(path, require_label=False)
    assert [e.text for e in unlabelled] == ["好吃", "难吃", "还没标", "一般"]


def test_label_studio_entities_and_text_key(tmp_path):
    tasks = [
        ls_task(5, "李四去上海", [region("a", 0, 2, "李四", "PER"), region("b", 3, 5, "上海", "LOC")]),
        {"id": 6, "data": {"sentence": "王五在家"}, "annotations": [{"result": [region("c", 0, 2, "王五", "PER")]}]},
    ]
    path = write(tmp_path, "ner.json", tasks[:1])
    [example] = read_ner(path, "--train")
    assert example.entities == ((0, 2, "PER"), (3, 5, "LOC"))
    other = write(tmp_path, "sentence.json", tasks[1:])
    assert "no text under data.text (data keys: sentence)" in error_of(read_ner, other, "--train")
    classification = write(tmp_path, "c.json", [dict(tasks[1], annotations=[{"result": [choice("在家")]}])])
    [record] = load_task("classify").read(classification, DataConfig(text_column="sentence"), "--train")
    assert (record.text, record.label) == ("王五在家", "在家")


def test_label_studio_span_text_that_does_not_match_its_offsets_names_the_task(tmp_path):
    path = write(tmp_path, "bad.json", [ls_task(42, "李四去上海", [region("a", 0, 2, "上海", "LOC")])])
    message = error_of(read_ner, path, "--train")
    assert path in message and "task 42" in message and "'上海'" in message and "'李四'" in message


def test_messages_about_a_label_studio_example_name_its_task_not_line_1(tmp_path):
    """Label Studio writes its export on one line: a message about an example read from it (a dev label that train
    never had, a list of labels without --multi-label, an overlap) names the task, as the reader's own do."""
    from ernie_ft.data.annotated import TaskLine
    from ernie_ft.label_set import check_known_labels

    ner = write(tmp_path, "ner.json", [ls_task(5, "李四去上海", [region("a", 0, 2, "李四", "PER")]),
                                        ls_task(6, "王五在北京", [region("b", 3, 5, "北京", "GPE")])])  # fmt: skip
    examples = read_ner(ner, "--dev")
    with pytest.raises(UserError, match=rf"^{ner}:1: task 6: entity type 'GPE' \(--dev\)"):
        check_known_labels(examples, lambda e: [t for *_, t in e.entities], ["PER"], False, "--dev", "entity type")
    tasks = [ls_task(21, "好吃", [choice("正面")]), ls_task(22, "一般", [choice("中性", "正面")])]
    listed = write(tmp_path, "c.json", tasks)
    assert f"{listed}:1: task 22: the label is a list of 2 labels" in error_of(
        load_task("classify").read, listed, DataConfig(), "--dev"
    )
    overlap = [region("a", 0, 2, "李四", "PER"), region("b", 0, 5, "李四去上海", "EVT")]
    nested = write(tmp_path, "overlap.json", [ls_task(7, "李四去上海", overlap)])
    assert error_of(read_ner, nested, "--train").count("task 7") == 1
    line = TaskLine(3, "9")  # the line number in every other use
    assert line == 3 and json.dumps({"line": line}) == '{"line": 3}' and f"{line:>3}" == "  3" and line + 1 == 4


def test_label_studio_image_export_and_unknown_json_array_are_one_error_line(tmp_path):
    image = shared(EXPORTS, "label_studio_min_example.json")
    message = error_of(read_ner, str(image), "--train")
    assert "task 87" in message and "data.text" in message and "image" in message
    path = write(tmp_path, "array.json", [{"sentence": "好", "tags": []}])
    message = error_of(read_ner, path, "--train")
    assert f"{path}:1:" in message and "not" in message and "Label Studio" in message


# UTF-16 offsets: 😀 (an emoji) and 𠀀 (CJK Extension B) are one character in Python and two UTF-16 units in
# JavaScript, where Label Studio counts value.start and value.end (its issue #1347)
ASTRAL_TEXT = "😀今天张三去了𠀀城北京开会"
ASTRAL_ENTITIES = ((3, 5, "PER"), (7, 9, "LOC"), (9, 11, "LOC"))  # 张三, 𠀀城 (holds 𠀀), 北京: Python indices


def utf16(text, i):
    """The UTF-16 offset of Python index ``i``, as JavaScript counts it (an outside reference: the codec)."""
    return len(text[:i].encode("utf-16-le")) // 2


def astral_tasks(offsets="utf-16", with_text=True, nested=False, relation=None):
    """One Label Studio task over ASTRAL_TEXT, its regions' offsets counted in ``offsets`` (utf-16 or python)."""
    entities = [*ASTRAL_ENTITIES, *([(7, 11, "ORG")] if nested else [])]  # 𠀀城北京 holds 𠀀城 and 北京
    results = []
    for n, (start, end, label) in enumerate(entities):
        place = (utf16(ASTRAL_TEXT, start), utf16(ASTRAL_TEXT, end)) if offsets == "utf-16" else (start, end)
        value = {"start": place[0], "end": place[1], "labels": [label]}
        value.update({"text": ASTRAL_TEXT[start:end]} if with_text else {})
        results.append({"id": f"r{n}", "type": "labels", "from_name": "label", "to_name": "text", "value": value})
    if relation is not None:
        results.append({"id": "rel", "type": "relation", "from_id": "r0", "to_id": "r2", **relation})
    return [ls_task(1, ASTRAL_TEXT, results)]


@pytest.mark.parametrize("with_text", [True, False], ids=["value.text", "no-value.text"])
def test_label_studio_offsets_after_an_emoji_count_utf16_units(tmp_path, capsys, with_text):
    from ernie_ft.ner.task import NER
    from ernie_ft.relation.formats import read_relations

    assert utf16(ASTRAL_TEXT, 9) == 11  # the export's offsets differ from Python's: the test reads a real shift
    [flat] = read_ner(write(tmp_path, "flat.json", astral_tasks(with_text=with_text)), "--train")
    assert flat.entities == ASTRAL_ENTITIES
    assert [flat.text[s:e] for s, e, _ in flat.entities] == ["张三", "𠀀城", "北京"]
    nested_file = write(tmp_path, "nested.json", astral_tasks(with_text=with_text, nested=True))
    [nested] = NER(nested=True).read(nested_file, DataConfig(), "--train")
    assert nested.entities == tuple(sorted([*ASTRAL_ENTITIES, (7, 11, "ORG")]))
    related = write(tmp_path, "rel.json", astral_tasks(with_text=with_text, relation={"labels": ["去过"]}))
    [example] = read_relations(related, "--train")
    assert example.triples == (((3, 5, "PER"), "去过 (PER→LOC)", (9, 11, "LOC")),)
    assert example.gold == (("张三", "去过", "北京"),)
    assert "count characters" not in capsys.readouterr().err  # every offset was read as UTF-16 units


def test_label_studio_offsets_in_characters_are_read_when_value_text_says_so(tmp_path, capsys):
    """An export made by a tool that counts code points: value.text matches only under that reading."""
    [example] = read_ner(write(tmp_path, "points.json", astral_tasks(offsets="python")), "--train")
    assert example.entities == ASTRAL_ENTITIES
    assert "3 regions whose offsets count characters, not UTF-16 units" in capsys.readouterr().err
    # without value.text nothing tells the readings apart: Label Studio's own rule, UTF-16, holds
    cut = write(tmp_path, "cut.json", astral_tasks(offsets="python", with_text=False))
    assert "between the two UTF-16 halves" in error_of(read_ner, cut, "--train")  # 𠀀城's end, 9, splits 𠀀


def predicted_tasks():
    regions = [region("a", 0, 2, "李四", "PER"), region("b", 3, 5, "上海", "LOC")]
    relation = {"id": "r", "type": "relation", "from_id": "a", "to_id": "b", "labels": ["去过"]}
    return [
        ls_task(1, "张三去北京", [region("c", 0, 2, "张三", "PER"), region("d", 3, 5, "北京", "LOC"),
                                  dict(relation, from_id="c", to_id="d")]),
        {"id": 2, "data": {"text": "李四去上海"}, "annotations": [], "predictions": [{"result": [*regions, relation]}]},
    ]  # fmt: skip


def test_predictions_are_labels_only_with_the_flag(tmp_path, capsys):
    from ernie_ft.data import annotations
    from ernie_ft.relation.formats import read_relations

    path = write(tmp_path, "pre.json", predicted_tasks())
    assert [e.text for e in read_ner(path, "--train")] == ["张三去北京"]  # task 2 is unannotated
    err = capsys.readouterr().err
    assert "1 task with predictions only, read as unannotated (--predictions-as-labels" in err
    assert [e.entities for e in read_ner(path, "--train", predictions_as_labels=True)][1] == (
        (0, 2, "PER"),
        (3, 5, "LOC"),
    )
    assert "1 task labelled by its predictions (--predictions-as-labels)" in capsys.readouterr().err
    assert len(read_relations(path, "--train")) == 1
    assert read_relations(path, "--train", predictions_as_labels=True)[1].gold == (("李四", "去过", "上海"),)
    assert len(read_ner(path, "--input", labelled=False)) == 2  # prediction inputs: every task's text
    # classification: the same rule, and an export of predictions alone names the flag
    only = [{"id": 2, "data": {"text": "难吃"}, "predictions": [{"result": [choice("负面")]}]}]
    message = error_of(load_task("classify").read, write(tmp_path, "only.json", only), DataConfig(), "--train")
    assert "1 have predictions only" in message and "--predictions-as-labels" in message
    export = annotations.load(json.dumps(only), "--train: only.json", predictions_as_labels=True)
    rows = annotations.classification_rows(export, "--train: only.json", True)[1]
    assert rows == [(1, {"text": "难吃", "label": ["负面"]})]


def test_every_task_that_reads_exports_takes_the_flag(tmp_path, capsys):
    """--predictions-as-labels reaches the readers through each task's read (DataConfig), classify included."""
    path = write(tmp_path, "pre.json", predicted_tasks())
    on, off = DataConfig(predictions_as_labels=True), DataConfig()
    for spec, options in (("ner", {}), ("ner", {"nested": True}), ("relation", {})):
        task = load_task(spec, options)
        assert len(task.read(path, off, "--train")) == 1 and len(task.read(path, on, "--train")) == 2, spec
    only = [{"id": 1, "data": {"text": "好吃"}, "annotations": [{"result": [choice("正面")]}]},
            {"id": 2, "data": {"text": "难吃"}, "predictions": [{"result": [choice("负面")]}]}]  # fmt: skip
    texts = write(tmp_path, "cls.json", only)
    assert [e.label for e in load_task("classify").read(texts, on, "--train")] == ["正面", "负面"]
    multi = load_task("classify", {"multi_label": True}).read(texts, on, "--train")
    assert [e.label for e in multi] == [("正面",), ("负面",)]
    capsys.readouterr()


def test_the_data_setting_becomes_the_flag_and_defaults_off():
    from ernie_ft.recipes import build_config

    assert DataConfig().predictions_as_labels is False
    config = build_config({}, {"predictions_as_labels": True}, source="flags")
    assert config.data.predictions_as_labels is True


def cut_files(tmp_path, tasks):
    """A Label Studio export as Label Studio writes it (indented), cut at several places, and a doccano JSONL
    file whose last line is cut: (path, the line and character where its text ends)."""
    whole = json.dumps(tasks, ensure_ascii=False, indent=2)
    for n, at in enumerate((whole.index('"李四"') + 2, whole.index('"end"'), len(whole) - 1, whole.rindex("},") + 2)):
        text = whole[:at].rstrip()  # where a cut file's text ends: its last character other than space
        yield write(tmp_path, f"cut{n}.json", whole[:at]), text.count("\n") + 1, len(text.split("\n")[-1])
    lines = jsonl([{"text": "张三去北京", "label": [[0, 2, "PER"]]}] * 3)
    text = lines[: len(lines) - 12]
    yield write(tmp_path, "cut.jsonl", text), 3, len(text.rstrip().split("\n")[-1])


def test_a_truncated_export_is_named_truncated_with_where_it_ends(tmp_path):
    from ernie_ft.relation.formats import read_relations

    for path, line, column in cut_files(tmp_path, predicted_tasks()):
        for read in (lambda p: read_ner(p, "--train"), lambda p: read_relations(p, "--train"), read_examples):
            message = error_of(read, path)
            assert f"{path}:{line}:{column}: the file is truncated" in message, message
            assert f"ends at line {line}, character {column}" in message
    # an error in the middle of the file is no truncation
    broken = json.dumps(predicted_tasks(), ensure_ascii=False, indent=2).replace('"李四"', "李四", 1)
    assert "is truncated" not in error_of(read_ner, write(tmp_path, "broken.json", broken), "--train")


def test_odd_annotations_are_counted_in_the_loading_line(tmp_path, capsys):
    from ernie_ft.relation.formats import read_relations

    unlabelled = region("u", 3, 5, "北京", "LOC")
    unlabelled["value"]["labels"] = []
    results = [
        region("a", 0, 2, "张三", "PER"),
        region("b", 3, 5, "北京", "LOC"),
        region("a2", 0, 2, "张三", "PER"),  # the same span and type again
        unlabelled,
        {"id": "r1", "type": "relation", "from_id": "a", "to_id": "b", "labels": []},
        {"id": "r2", "type": "relation", "from_id": "a", "to_id": "u", "labels": ["去过"]},
        {"id": "n", "type": "textarea", "value": {"text": ["备注"]}},
    ]
    path = write(tmp_path, "odd.json", [ls_task(1, "张三去北京", results)])
    [example] = read_ner(path, "--train")
    assert example.entities == ((0, 2, "PER"), (3, 5, "LOC")) and example.relations == ()
    err = capsys.readouterr().err
    for part in (
        "1 labelled span given twice in one annotation",
        "1 region without a label skipped",
        "1 relation without a label not read",
        "1 relation to a region without a label skipped",
        "1 result of other kinds not read (textarea 1)",
    ):
        assert part in err, part
    # relation extraction learns predicates: a relation without one is an error naming the task and the relation
    message = error_of(read_relations, path, "--train")
    assert f"{path}:1: task 1: relation r1 has no label" in message and '"labels": []' in message
    doccano = {
        "text": "张三去北京",
        "entities": [{"id": 1, "label": "PER", "start_offset": 0, "end_offset": 2},
                     {"id": 2, "label": "LOC", "start_offset": 3, "end_offset": 5}],
        "relations": [{"id": 7, "from_id": 1, "to_id": 2}, {"id": 8, "from_id": 1, "to_id": 2, "type": ""}],
    }  # fmt: skip
    path = write(tmp_path, "d.jsonl", jsonl([doccano]))
    assert read_ner(path, "--train")[0].relations == ()
    assert "2 relations without a type not read" in capsys.readouterr().err
    assert 'relation 7 has no label (no "type")' in error_of(read_relations, path, "--train")


def test_relation_direction_left_points_from_to_id_and_bi_reads_both_ways(tmp_path, capsys):
    from ernie_ft.relation.formats import read_relations

    def triples(direction):
        tasks = astral_tasks(relation={"labels": ["邻近"], "direction": direction})
        return read_relations(write(tmp_path, f"{direction}.json", tasks), "--train")[0].triples

    person, place = (3, 5, "PER"), (9, 11, "LOC")
    assert triples("right") == ((person, "邻近 (PER→LOC)", place),)
    assert triples("left") == ((place, "邻近 (LOC→PER)", person),)
    assert set(triples("bi")) == {(person, "邻近 (PER→LOC)", place), (place, "邻近 (LOC→PER)", person)}
    assert "1 bidirectional relation read both ways" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ overlaps


def test_overlapping_entities_name_the_line_and_the_options(tmp_path):
    path = write(tmp_path, "o.jsonl", jsonl([{"text": "北京大学", "label": [[0, 4, "ORG"], [0, 2, "LOC"]]}]))
    message = error_of(read_ner, path, "--train")
    assert f"{path}:1" in message and "--overlapping keep-longest" in message and "ner --nested" in message
    [kept] = read_ner(path, "--train", overlapping="keep-longest")
    assert kept.entities == ((0, 4, "ORG"),)
    # doccano's "overlapping" example lists one entity twice with the same type: a tagger holds it, once
    [same] = read_ner(str(shared(EXPORTS, "doccano_sequence_labeling_overlapping.jsonl")), "--train")
    assert same.entities == ((0, 1, "LOC"),)
    real = shared(EXPORTS, "doccano_relation_zh.jsonl")  # one span labelled with two types
    assert "--nested" in error_of(read_ner, str(real), "--train")


# ------------------------------------------------------------------------------------------------ dev split


def test_dev_split_is_reproducible_disjoint_and_keeps_every_label_in_train(capsys):
    from ernie_ft.data.readers import Example

    train = [
        Example(f"文本{i}", None, "甲" if i % 5 else ("乙" if i < 40 else "丙"), i + 1, "t.tsv") for i in range(60)
    ]

    def labels(e):
        return (e.label,)

    rest, dev = split_dev(train, 0.25, labels)
    again_rest, again_dev = split_dev(list(train), 0.25, labels)
    assert (rest, dev) == (again_rest, again_dev) and len(dev) == 15
    assert not set(rest) & set(dev) and sorted(rest + dev, key=lambda e: e.line) == train
    assert {e.label for e in rest} == {"甲", "乙", "丙"}  # 丙 has 4 examples: at most 3 go to dev
    assert "15 of the 60 examples of t.tsv held out as dev" in capsys.readouterr().err
    assert split_dev(train, None) == (train, None)
    assert "holds out none" in error_of(split_dev, train[:3], 0.1)


def test_every_task_without_its_own_hook_holds_out_dev_split(capsys):
    from ernie_ft.task import TaskHooks

    rest, dev = TaskHooks().held_out(list(range(10)), DataConfig(dev_split=0.3))
    assert len(dev) == 3 and sorted(rest + dev) == list(range(10))
    assert TaskHooks().held_out([1, 2], DataConfig()) == ([1, 2], None)


def test_prediction_inputs_find_their_own_header():
    from ernie_ft.inference.predict import inference_data

    data = inference_data({"header": False, "sheet": "训练", "dev_split": 0.1}, {})
    assert (data.header, data.sheet) == (None, None)


def test_dev_split_is_a_fraction_and_excludes_dev():
    assert "--dev-split" in error_of(DataConfig, dev_split=1.5)
    message = error_of(DataConfig, dev="d.tsv", dev_split=0.1)
    assert "--dev FILE" in message and "--dev-split" in message


# ---------------------------------------------------------------------------------------------- headers


def test_a_header_of_other_names_is_found_by_its_content(tmp_path, capsys):
    path = write(tmp_path, "zh.csv", "评论,情感\n这家店很好吃,正面\n太难吃了,负面\n服务不错,正面\n")
    examples = read_examples(path)
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("这家店很好吃", "正面", 2),
        ("太难吃了", "负面", 3),
        ("服务不错", "正面", 4),
    ]
    assert "CSV, 3 rows, header: line 1 (评论, 情感)" in capsys.readouterr().err
    texts = write(tmp_path, "texts.csv", "评论\n这家店很好吃\n太难吃了\n服务不错\n")
    assert [e.text for e in read_examples(texts, require_label=False)] == ["这家店很好吃", "太难吃了", "服务不错"]
    # a data row, not a header: its label occurs again below it
    plain = write(tmp_path, "plain.csv", "这家店很好吃,正面\n太难吃了,负面\n服务不错,正面\n")
    assert len(read_examples(plain)) == 3
    assert "no header, columns numbered from 0" in capsys.readouterr().err


def test_header_flags_override_what_the_content_says(tmp_path, capsys):
    path = write(tmp_path, "a.tsv", "好吃\t正面\n难吃\t负面\n")
    assert read_records(path)[0] == ["0", "1"]
    assert read_records(path, header=True) == (["好吃", "正面"], [(2, {"好吃": "难吃", "正面": "负面"})])
    known = write(tmp_path, "k.tsv", "text\tlabel\n好\t1\n")
    columns, rows = read_records(known, header=False)
    assert columns == ["0", "1"] and rows[0] == (1, {"0": "text", "1": "label"})
    examples = read_examples(path, header=False, text_column="0", label_column="1")
    assert [(e.text, e.label, e.line) for e in examples] == [("好吃", "正面", 1), ("难吃", "负面", 2)]
    examples = load_task("classify").read(
        write(tmp_path, "zh.csv", "评论,情感\n好,正面\n差,负面\n"), DataConfig(header=True), "--train"
    )
    assert [(e.text, e.label) for e in examples] == [("好", "正面"), ("差", "负面")]
    assert "(--header)" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- Excel


def test_xlsx_is_read_as_a_table_with_its_sheets(tmp_path, capsys):
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "说明"
    sheet.append(["这个表只有说明"])
    data = book.create_sheet("数据")
    for row in (["评论", "评分"], ["很好吃", 5], [None, None], ["一般", 3], ["太咸", 1.0], ["不错", 5]):
        data.append(row)
    path = str(tmp_path / "reviews.xlsx")
    book.save(path)
    examples = read_examples(path, sheet="数据")
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("很好吃", "5", 2),
        ("一般", "3", 4),
        ("太咸", "1", 5),
        ("不错", "5", 6),
    ]
    assert "Excel, 4 rows, header: line 1 (评论, 评分)" in capsys.readouterr().err
    assert [e.text for e in read_examples(path, require_label=False)] == ["这个表只有说明"]
    assert "its sheets: 说明, 数据" in error_of(read_examples, path, sheet="训练")


def test_xls_and_missing_openpyxl_are_one_line_each(tmp_path, monkeypatch):
    xls = write(tmp_path, "old.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 64)
    assert ".xls" in error_of(read_examples, xls) and "save it as .xlsx" in error_of(read_examples, xls)
    monkeypatch.setitem(__import__("sys").modules, "openpyxl", None)
    path = write(tmp_path, "book.xlsx", b"PK\x03\x04")
    assert "pip install openpyxl" in error_of(read_examples, path)


# ---------------------------------------------------------------------------------- through the command line


def doccano_reviews(path) -> str:
    good, bad = ["菜很好吃", "服务热情", "环境干净", "分量很足"], ["太咸了", "态度很差", "上菜太慢", "不卫生"]
    rows = [
        {"id": i, "text": (good if i % 2 else bad)[i % 4] + "。" * (i % 3), "label": ["正面" if i % 2 else "负面"]}
        for i in range(24)
    ]
    path.write_text(jsonl(rows), "utf-8")
    return str(path)


def label_studio_people(path) -> str:
    tasks = []
    for i, (name, city) in enumerate([("张三", "北京"), ("李四", "上海"), ("王五", "广州")] * 6):
        text = f"{name}昨天去{city}开会"
        results = [region(f"p{i}", 0, 2, name, "PER"), region(f"c{i}", 5, 7, city, "LOC")]
        tasks.append(ls_task(100 + i, text, results))
    path.write_text(json.dumps(tasks, ensure_ascii=False), "utf-8")
    return str(path)


def cli(command, train, out, *extra):
    from ernie_ft.cli import task_command

    args = ["--train", train, "--dev-split", "0.25", "--model", "scratch:tiny", "--output", str(out), "--epochs", "1"]
    return task_command(command)([*args, "--batch-size", "8", "--max-len", "32", "--threads", "1", *extra])


def test_classify_trains_on_a_doccano_file_with_a_held_out_dev(tmp_path, capsys):
    train = doccano_reviews(tmp_path / "reviews.jsonl")
    assert cli("classify", train, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "doccano JSONL (text classification), 24 records" in err and "6 of the 24 examples" in err
    assert "\ntrain: 18 examples -> " in err  # trained on the other 18 only: the dev texts held out of train
    dev = json.loads((tmp_path / "out" / "metrics.json").read_text("utf-8"))["dev"]
    assert sum(row["support"] for row in dev["per_class"].values()) == 6
    assert set(json.loads((tmp_path / "out" / "best" / "labels.json").read_text("utf-8"))) == {"正面", "负面"}


def test_ner_trains_on_a_label_studio_export_and_predicts_its_texts(tmp_path, capsys):
    train = label_studio_people(tmp_path / "export.json")
    assert cli("ner", train, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "Label Studio JSON export, 18 tasks" in err and "4 of the 18 examples" in err
    assert "\ntrain: 14 examples -> " in err  # trained on the other 14 only: the dev texts held out of train
    labels = json.loads((tmp_path / "out" / "best" / "labels.json").read_text("utf-8"))
    assert set(labels) >= {"B-PER", "I-PER", "B-LOC", "I-LOC"}
    out = tmp_path / "predictions.jsonl"
    assert cli("ner", train, tmp_path / "refused", "--dev", train) == 2  # --dev and --dev-split: one or the other
    assert "give either --dev FILE or --dev-split" in capsys.readouterr().err and not (tmp_path / "refused").exists()
    from ernie_ft.cli import task_command

    assert (
        task_command("ner")(["predict", "--model", str(tmp_path / "out"), "--input", train, "--output", str(out)]) == 0
    )
    predictions = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert [p["text"] for p in predictions][:2] == ["张三昨天去北京开会", "李四昨天去上海开会"] and len(
        predictions
    ) == 18


# ------------------------------------------------------------------------------------------------- fuzzing

KEYS = ["text", "data", "label", "entities", "relations", "annotations", "predictions", "result", "value", "type"]
KEYS += ["start", "end", "labels", "choices", "id", "was_cancelled", "start_offset", "end_offset", "from_id", "to_id"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.sampled_from(["", "好", "北京大学", "labels", "choices"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(JSON, min_size=1, max_size=4), array=st.booleans())
def test_random_exports_parse_or_fail_with_one_user_error(tmp_path, values, array):
    path = tmp_path / ("x.json" if array else "x.jsonl")
    path.write_text(json.dumps(values, ensure_ascii=False) if array else jsonl(values), "utf-8")
    for read in (lambda p: read_ner(p, "--train"), read_examples, lambda p: read_examples(p, require_label=False)):
        try:
            read(str(path))
        except UserError as e:
            assert str(path) in str(e) and "\n" not in str(e), e


RESULT = st.fixed_dictionaries(
    {"type": st.sampled_from(["labels", "choices", "relation", "textarea"]), "value": JSON},
    optional={"id": st.sampled_from(["a", "b"]), "from_id": st.just("a"), "to_id": st.just("b"), "labels": JSON},
)
TASK = st.fixed_dictionaries(
    {"id": st.integers(0, 9), "data": st.fixed_dictionaries({"text": st.sampled_from(["北京大学", "好", "x"])})},
    optional={
        "annotations": st.lists(
            st.fixed_dictionaries({"result": st.lists(RESULT, max_size=3)}, optional={"was_cancelled": st.booleans()}),
            max_size=3,
        ),
        "predictions": JSON,
    },
)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tasks=st.lists(TASK, min_size=1, max_size=3))
def test_random_label_studio_tasks_parse_or_fail_with_one_user_error(tmp_path, tasks):
    test_random_exports_parse_or_fail_with_one_user_error.hypothesis.inner_test(tmp_path, tasks, True)
