"""Tests for ernie_ft.readers: every supported format, and one clear UserError per bad input."""

import json

import pytest

from ernie_ft.data.readers import Example, read_examples
from ernie_ft.data.sources import read_records, read_text_file
from ernie_ft.errors import UserError


def write(tmp_path, name, content, encoding="utf-8"):
    """Write `content` (str, or bytes written as is) to tmp_path/name and return the path as str."""
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode(encoding))
    return str(path)


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    return str(info.value)


# --- formats -------------------------------------------------------------------------------


def test_tsv_with_header_keeps_stray_quotes_and_line_numbers(tmp_path):
    path = write(tmp_path, "a.tsv", 'label\ttext_a\n正面\t房间"很干净\n\n负面\t送餐太慢了 \n')
    examples = read_examples(path)
    assert examples == [Example('房间"很干净', None, "正面", 2, path), Example("送餐太慢了", None, "负面", 4, path)]


def test_csv_with_quoted_commas_and_columns_in_other_order(tmp_path):
    path = write(tmp_path, "a.csv", 'text,label\n"价格便宜,质量也好",1\n"一般般，""还行""吧",0\n')
    examples = read_examples(path)
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("价格便宜,质量也好", "1", 2),
        ('一般般，"还行"吧', "0", 3),
    ]


def test_a_review_column_is_the_text(tmp_path):
    path = write(tmp_path, "r.csv", "id,review,stars\n1,房间很干净,5\n2,送餐太慢了,1\n")
    examples = read_examples(path, label_column="stars")
    assert [(e.text, e.label) for e in examples] == [("房间很干净", "5"), ("送餐太慢了", "1")]
    headed = write(tmp_path, "h.csv", "review\n房间很干净\n送餐太慢了\n")  # a header by its name alone
    assert [e.text for e in read_examples(headed, require_label=False)] == ["房间很干净", "送餐太慢了"]


def test_a_file_of_0_1_label_columns_without_a_label_column_names_label_columns(tmp_path):
    path = write(tmp_path, "c.csv", "text,category_体育,category_娱乐,other\n甲,1,0,x\n乙,0,1,y\n")
    assert "--multi-label --label-columns 'category_*'" in error_of(read_examples, path)
    mixed = write(tmp_path, "m.csv", "text,a,b\n甲,1,0\n乙,0,1\n")
    assert "--label-columns 'a,b'" in error_of(read_examples, mixed)
    one = write(tmp_path, "o.csv", "text,flag\n甲,1\n乙,0\n")
    assert "--label-columns" not in error_of(read_examples, one, label_column="label")


def test_csv_record_spanning_lines_reports_its_first_line(tmp_path):
    path = write(tmp_path, "a.csv", 'text,label\n"第一行\n第二行",1\n好,0\n')
    examples = read_examples(path)
    assert [(e.text, e.line) for e in examples] == [("第一行\n第二行", 2), ("好", 4)]


def test_jsonl_with_int_float_and_bool_labels(tmp_path):
    rows = [{"text": "不错", "label": 1}, {"text": "很差", "label": 0.0}, {"text": "行", "label": True}]
    path = write(tmp_path, "a.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    assert [e.label for e in read_examples(path)] == ["1", "0", "true"]
    columns, records = read_records(path)
    assert columns == ["text", "label"] and records[1] == (2, {"text": "很差", "label": 0.0})


def test_jsonl_list_labels_come_back_as_tuples(tmp_path):
    # a list is several labels (classify --multi-label takes them; without it a longer list is an error), not
    # one label "播放音乐,闲聊" that would silently become a class of its own
    lines = '{"text": "放首歌", "labels": ["播放音乐", "闲聊"]}\n{"text": "好", "labels": []}\n'
    examples = read_examples(write(tmp_path, "a.jsonl", lines), label_column="labels", require_label=False)
    assert [e.label for e in examples] == [("播放音乐", "闲聊"), None]


def test_headerless_tsv_text_then_label(tmp_path):
    path = write(tmp_path, "a.tsv", "服务很周到\t1\n菜都凉了\t0\n环境不错\t1\n")
    examples = read_examples(path)
    assert [(e.text, e.label) for e in examples] == [("服务很周到", "1"), ("菜都凉了", "0"), ("环境不错", "1")]
    assert read_records(path)[0] == ["0", "1"]


def test_headerless_tsv_label_then_text(tmp_path):
    path = write(tmp_path, "a.tsv", "1\t服务很周到\n0\t菜都凉了\n1\t环境不错\n")
    assert [(e.text, e.label) for e in read_examples(path)] == [
        ("服务很周到", "1"),
        ("菜都凉了", "0"),
        ("环境不错", "1"),
    ]


def test_headerless_tie_takes_last_column_as_label(tmp_path):
    path = write(tmp_path, "a.tsv", "甲\t乙\n丙\t丁\n")
    assert [(e.text, e.label) for e in read_examples(path)] == [("甲", "乙"), ("丙", "丁")]


def test_headerless_columns_by_position(tmp_path):
    path = write(tmp_path, "a.tsv", "x\t好吃\ty\n")
    example = read_examples(path, text_column="1", label_column="0", pair_column="2")[0]
    assert (example.text, example.text_pair, example.label) == ("好吃", "y", "x")


def test_headerless_sentence_pairs(tmp_path):
    path = write(tmp_path, "a.tsv", "今天几号\t今天是几号\t1\n你叫什么\t你多大了\t0\n")
    assert [(e.text, e.text_pair, e.label) for e in read_examples(path)] == [
        ("今天几号", "今天是几号", "1"),
        ("你叫什么", "你多大了", "0"),
    ]


def test_sentence_pairs_with_header(tmp_path):
    path = write(tmp_path, "a.tsv", "text_a\ttext_b\tlabel\n今天几号\t今天是几号\t1\n")
    assert read_examples(path)[0] == Example("今天几号", "今天是几号", "1", 2, path)


def test_txt_predict_input_is_one_text_per_line_without_labels(tmp_path):
    path = write(tmp_path, "p.txt", "快递很快\n\n{不是 JSON}\n")
    examples = read_examples(path, require_label=False, flag="--predict")
    assert [(e.text, e.label, e.line) for e in examples] == [("快递很快", None, 1), ("{不是 JSON}", None, 3)]
    message = error_of(read_examples, path)
    assert "p.txt" in message and "label" in message


def test_unlabelled_tsv_for_prediction(tmp_path):
    path = write(tmp_path, "a.tsv", "text_a\n很好\n")
    assert read_examples(path, require_label=False)[0].label is None


def test_unknown_extension_is_sniffed(tmp_path):
    assert read_records(write(tmp_path, "a.data", '{"text": "好"}\n'))[0] == ["text"]
    assert read_records(write(tmp_path, "b.data", "text\tlabel\n好\t1\n"))[1] == [(2, {"text": "好", "label": "1"})]
    assert read_records(write(tmp_path, "c.data", "text,label\n好,1\n"))[1] == [(2, {"text": "好", "label": "1"})]


def test_caller_header_names_mark_a_header(tmp_path):
    path = write(tmp_path, "a.tsv", "comment\tstars\n好\t5\n")
    assert read_records(path)[0] == ["0", "1"]
    assert read_records(path, header_names=["comment"])[0] == ["comment", "stars"]
    # Naming a column on the command line also marks the header that holds it.
    assert read_examples(path, text_column="comment", label_column="stars")[0] == Example("好", None, "5", 2, path)


# --- encodings and line endings ------------------------------------------------------------


def test_utf8_bom_is_dropped(tmp_path):
    path = write(tmp_path, "a.tsv", b"\xef\xbb\xbf" + "label\ttext_a\n1\t好\n".encode())
    assert read_records(path)[0] == ["label", "text_a"]


def test_utf16_with_bom_is_decoded(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好看\n", encoding="utf-16")
    assert read_examples(path)[0].text == "好看"


def test_windows_line_endings(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\r\n1\t好\r\n0\t差\r\n")
    assert read_text_file(path) == "label\ttext_a\n1\t好\n0\t差\n"
    assert [e.label for e in read_examples(path)] == ["1", "0"]


def test_trailing_blank_lines_are_skipped(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好\n\n  \n\n")
    assert len(read_examples(path)) == 1


def test_gbk_file_names_the_encoding_line_and_iconv_command(tmp_path):
    path = write(tmp_path, "gbk.tsv", "label\ttext_a\n正面\t这家店的菜很好吃，我们都很满意\n", encoding="gbk")
    message = error_of(read_examples, path)
    assert "GBK" in message and "iconv -f GB18030 -t UTF-8" in message
    assert f"{path}:2:" in message  # the first non-ASCII byte is on line 2


def test_big5_file_is_recognised(tmp_path):
    path = write(tmp_path, "big5.tsv", "label\ttext_a\n1\t這個手機的螢幕很好，我們都說不錯\n", encoding="big5")
    assert "Big5" in error_of(read_text_file, path)


def test_utf16_without_bom_is_reported(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n".encode("utf-16-le"))
    assert "UTF-16" in error_of(read_text_file, path)


# --- bad input -----------------------------------------------------------------------------


def test_missing_file_names_flag_and_path(tmp_path):
    message = error_of(read_examples, str(tmp_path / "nope.tsv"), flag="--dev")
    assert message.startswith("--dev: ") and "nope.tsv not found" in message


def test_directory(tmp_path):
    assert "is a directory" in error_of(read_text_file, str(tmp_path))


@pytest.mark.parametrize("content", ["", "  \n\n\t\n"])
def test_empty_file(tmp_path, content):
    assert "is empty" in error_of(read_examples, write(tmp_path, "e.tsv", content))


def test_header_only_has_no_records(tmp_path):
    path = write(tmp_path, "h.tsv", "label\ttext_a\n")
    assert f"{path} has no records" in error_of(read_examples, path)


def test_too_few_fields_names_file_and_line(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好\n0 很差\n")
    message = error_of(read_examples, path)
    assert f"{path}:3: expected 2 fields (label, text_a), found 1" in message and "tab" in message


def test_too_many_fields_hints_at_tab_in_text(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好\t吃\n")
    message = error_of(read_examples, path)
    assert f"{path}:2: expected 2 fields (label, text_a), found 3" in message
    assert "tab inside the text" in message


def test_too_many_csv_fields_hints_at_quoting(tmp_path):
    path = write(tmp_path, "a.csv", "text,label\n便宜,好用,1\n")
    message = error_of(read_examples, path)
    assert f"{path}:2: expected 2 fields" in message and "quoted" in message


def test_unclosed_csv_quote(tmp_path):
    path = write(tmp_path, "a.csv", 'text,label\n"好,1\n差,0\n')
    message = error_of(read_examples, path)
    assert f"{path}:2:" in message and "double quote" in message


def test_headerless_row_with_different_field_count(tmp_path):
    path = write(tmp_path, "a.tsv", "好\t1\n差\n")
    assert f"{path}:2: expected 2 fields like line 1, found 1" in error_of(read_examples, path)


@pytest.mark.parametrize("content", ["label\ttext_a\n1\t  \n", "label\ttext_a\n1\t\n"])
def test_empty_text(tmp_path, content):
    path = write(tmp_path, "a.tsv", content)
    assert f'{path}:2: empty text in column "text_a"' in error_of(read_examples, path)


def test_a_missing_json_text_key_is_called_missing_and_a_null_one_empty(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"text": "好", "label": 1}\n{"label": 0, "content": "差"}\n')
    message = error_of(read_examples, path)
    assert f'{path}:2: the text key "text" is missing' in message and "keys: label, content" in message
    null = write(tmp_path, "b.jsonl", '{"text": "好", "label": 1}\n{"text": null, "label": 1}\n')
    assert f'{null}:2: empty text in column "text"' in error_of(read_examples, null)


def test_empty_label_when_required(tmp_path):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好\n \t差\n")
    assert f'{path}:3: empty label in column "label"' in error_of(read_examples, path)
    assert read_examples(path, require_label=False)[1].label is None


@pytest.mark.parametrize(
    "option,kwargs",
    [
        ("--text-column", {"text_column": "review"}),
        ("--text-pair-column", {"pair_column": "other"}),
        ("--label-column", {"label_column": "stars"}),
    ],
)
def test_missing_column_names_flag_and_lists_columns(tmp_path, option, kwargs):
    path = write(tmp_path, "a.tsv", "label\ttext_a\n1\t好\n")
    message = error_of(read_examples, path, **kwargs)
    assert option in message and "columns found: label, text_a" in message and "a.tsv" in message


def test_missing_default_label_column(tmp_path):
    path = write(tmp_path, "a.tsv", "text_a\tscore\n好\t1\n")
    message = error_of(read_examples, path)
    assert "--label-column" in message and "text_a, score" in message


def test_no_text_column_asks_for_text_column_flag(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"comment": "好", "label": 1}\n')
    message = error_of(read_examples, path)
    assert "--text-column" in message and "comment, label" in message
    assert read_examples(path, text_column="comment")[0].text == "好"


def test_invalid_json_line_reports_line_and_column(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"text": "好", "label": 1}\n\n{"text": "差", "label": 0,}\n')
    message = error_of(read_examples, path)
    assert f"{path}:3:" in message and "invalid JSON" in message


def test_json_line_that_is_not_an_object(tmp_path):
    path = write(tmp_path, "a.jsonl", '{"text": "好", "label": 1}\n["差", 0]\n')
    assert f"{path}:2: expected a JSON object" in error_of(read_examples, path)


def test_pretty_printed_json_array_suggests_jq(tmp_path):
    path = write(tmp_path, "a.json", '[\n  {"text": "好", "label": 1}\n]\n')
    message = error_of(read_examples, path)
    assert f"{path}:1:" in message and "jq -c" in message


def test_header_names_match_in_any_case(tmp_path):
    path = write(tmp_path, "a.csv", "Text,Label\n好,1\n")
    assert read_examples(path)[0] == Example("好", None, "1", 2, path)


def test_explicit_label_column_may_be_absent_when_labels_are_optional(tmp_path):
    path = write(tmp_path, "a.tsv", "text_a\n好\n")
    assert read_examples(path, label_column="stars", require_label=False)[0].label is None


def test_headerless_prediction_file_is_text_then_pair(tmp_path):
    path = write(tmp_path, "a.tsv", "今天几号\t今天是几号\n")
    assert read_examples(path, require_label=False)[0] == Example("今天几号", "今天是几号", None, 1, path)


def test_txt_with_tabs_is_read_as_tsv(tmp_path):
    path = write(tmp_path, "lcqmc.txt", "今天几号\t今天是几号\t1\n")
    assert read_examples(path)[0] == Example("今天几号", "今天是几号", "1", 1, path)


def test_shipped_sample_files_read_cleanly():
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "data"
    train = read_examples(str(data / "sentiment_train.tsv"))
    assert len(train) == 240 and {e.label for e in train} == {"正面", "负面"}
    assert max(len(e.text) for e in train) > 200
    csv_test, jsonl_test = (
        read_examples(str(data / "sentiment_test.csv")),
        read_examples(str(data / "sentiment_test.jsonl")),
    )
    assert [(e.text, e.label) for e in csv_test] == [(e.text, e.label) for e in jsonl_test]
    assert any("," in e.text for e in csv_test)
    pairs = read_examples(str(data / "pairs_train.tsv"))
    assert all(e.text_pair for e in pairs) and {e.label for e in pairs} == {"0", "1"}
    assert len(read_examples(str(data / "predict.txt"), require_label=False)) == 10
    intents = read_examples(str(data / "intent_train.jsonl"), label_column="labels")
    assert len(intents) == 150 and any(len(e.label) == 2 for e in intents)


def test_csv_rows_of_empty_fields_count_as_blank_lines(tmp_path):
    path = write(tmp_path, "a.csv", "text,label\n好,1\n,\n \n")
    assert [e.line for e in read_examples(path)] == [2]


@pytest.mark.parametrize("content", [",", '"', ",,\n,\n", '""'])
def test_a_csv_with_no_text_at_all_is_one_user_error(tmp_path, content):  # found by tests/test_fuzz.py
    path = write(tmp_path, "a.csv", content)
    assert error_of(read_examples, path).startswith(f"--train: {path} has no row with any text")


def labelled_examples(task: str, labels: list[str]) -> list:
    """One dev example per label, as each task's reader makes them, all at dev.tsv:3."""
    from ernie_ft.ner.formats import NerExample
    from ernie_ft.task import resolve_task

    if task == "classify":
        return [Example("好", None, label, 3, "dev.tsv") for label in labels]
    if task == "ner":
        return [NerExample("张三去北京", ((0, 2, "PER"), (3, 5, label)), 3, "dev.tsv") for label in labels]
    utterance = resolve_task("tasks/multilabel_intent.py:Utterance")
    return [utterance("好", ("PER", label), 3, "dev.tsv") for label in labels]


@pytest.mark.parametrize(
    "task,spec,noun",
    [
        ("classify", "classify", "label"),
        ("ner", "ner", "entity type"),
        ("intent", "tasks/multilabel_intent.py:MultiLabelIntent", "intent"),
    ],
)
def test_every_task_refuses_labels_train_never_had_unless_allowed(task, spec, noun, monkeypatch):
    from pathlib import Path

    from ernie_ft.config import DataConfig
    from ernie_ft.task import load_task

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    instance = load_task(spec)
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"] if task == "ner" else ["LOC", "PER"]
    dev = labelled_examples(task, ["LOC", "新类"])
    message = error_of(instance.check_labels, dev, labels, DataConfig(), "--dev")
    assert message.startswith(f"dev.tsv:3: {noun} '新类' (--dev) does not occur in the training data")
    assert f"({noun}s: LOC, PER)" in message and "--allow-new-labels" in message
    instance.check_labels(dev, labels, DataConfig(allow_new_labels=True), "--dev")
    instance.check_labels(dev[:1], labels, DataConfig(), "--dev")


def test_a_directory_saved_by_datasets_reads_like_the_same_rows_in_a_file(tmp_path):
    import datasets

    rows = {"review": ["质量很好", "物流太慢了", "还行"], "label": [1, 0, 1]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "train"))
    tsv = write(tmp_path, "train.tsv", "review\tlabel\n质量很好\t1\n物流太慢了\t0\n还行\t1\n")
    saved = read_examples(str(tmp_path / "train"), text_column="review")
    assert [(e.text, e.label, e.line) for e in saved] == [
        ("质量很好", "1", 1),
        ("物流太慢了", "0", 2),
        ("还行", "1", 3),
    ]
    assert [(e.text, e.label) for e in saved] == [(e.text, e.label) for e in read_examples(tsv, text_column="review")]
    assert saved[0].source == str(tmp_path / "train")  # messages name the directory and the row

    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
    ).save_to_disk(str(tmp_path / "all"))
    message = error_of(read_examples, str(tmp_path / "all"), text_column="review")
    assert "holds the splits test, train" in message and str(tmp_path / "all" / "test") in message
    (tmp_path / "all" / "train" / "state.json").write_text("{", encoding="utf-8")
    assert "cannot be loaded" in error_of(read_examples, str(tmp_path / "all" / "train"))


def test_a_text_pair_field_is_read_as_the_pair_from_files_and_from_records(tmp_path):
    """``text_pair`` is the second text's field in ``serve``'s requests and in HF pipelines: read, not dropped."""
    from ernie_ft.data.readers import record_examples

    records = [{"text": "房间干净吗", "text_pair": "房间很干净"}, {"text": "早餐好吗", "text_pair": "早餐一般"}]
    path = write(tmp_path, "pairs.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    from_file = read_examples(path, label_column=None, require_label=False)
    assert [(e.text, e.text_pair) for e in from_file] == [("房间干净吗", "房间很干净"), ("早餐好吗", "早餐一般")]
    in_memory = record_examples(records, label_column=None)
    assert [(e.text, e.text_pair) for e in in_memory] == [(e.text, e.text_pair) for e in from_file]


def test_json_records_may_carry_a_text_pair_on_some_records_only(tmp_path):
    """A JSON record without the pair's key is a single text, wherever it stands; an empty pair is an error."""
    from ernie_ft.data.readers import record_examples

    records = [{"text": "太差了"}, {"text": "位置不错", "text_pair": "早餐一般"}]
    path = write(tmp_path, "mixed.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    expected = [("太差了", None), ("位置不错", "早餐一般")]
    assert [(e.text, e.text_pair) for e in read_examples(path, label_column=None, require_label=False)] == expected
    assert [(e.text, e.text_pair) for e in record_examples(records, label_column=None)] == expected
    empty = [{"text": "太差了", "text_pair": ""}]
    assert error_of(record_examples, empty, label_column=None).startswith("inputs[0].text_pair: empty text")


def test_a_header_of_known_names_reads_quietly_and_a_found_one_is_named(tmp_path, capsys):
    assert len(read_examples(write(tmp_path, "a.tsv", "label\ttext_a\n正面\t很好\n负面\t很差\n"))) == 2
    assert capsys.readouterr().err == ""
    found = write(tmp_path, "b.tsv", "情感\t评论\n正面\t很好吃\n负面\t太难吃\n正面\t还不错\n")
    assert [(e.text, e.label) for e in read_examples(found)][0] == ("很好吃", "正面")
    assert capsys.readouterr().err.strip() == f"--train: {found}: TSV, 3 rows, header: line 1 (情感, 评论)"
