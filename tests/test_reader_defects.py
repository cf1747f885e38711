"""Files read as a new user's files are (issue #47): label columns that differ between splits, column names with
spaces, a workbook whose first sheet is a cover, a JSON Lines key ``labels`` holding label sets. Each case was a
silent wrong result or an error that did not say what to do."""

import json

import pytest

from ernie_ft.classify import Classification
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.data.readers import Example, TrainedColumn, read_examples
from ernie_ft.errors import UserError

classify = task_command("classify")
FAST = ["--model", "scratch:tiny", "--threads", "1", "--max-len", "16", "--epochs", "1"]
TRAIN = "text,category_a,category_b,category_c\n今天下雨,1,0,1\n球赛很精彩,0,1,0\n新歌好听,1,1,0\n股价大涨,0,0,1\n"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    return str(info.value)


def read_sets(path, flag="--train", **data):
    task = Classification(multi_label=True, label_columns=data.pop("spec", "category_*"))
    return [(e.text, e.text_pair, e.label) for e in task.read(path, DataConfig(**data), flag)]


# --- 1. label columns: every labelled split has the training file's ----------------------------------------------


def test_a_dev_file_without_a_label_column_of_train_named_by_a_pattern_is_exit_2(tmp_path, capsys):
    train = write(tmp_path / "train.csv", TRAIN)
    dev = write(tmp_path / "dev.csv", "text,category_a,category_b\n今天下雨,1,0\n球赛很精彩,0,1\n")
    for spec in ("category_*", "category_a,category_b,category_c"):  # a pattern, as named one by one
        args = ["--train", train, "--dev", dev, "--multi-label", "--label-columns", spec, *FAST]
        assert classify([*args, "--output", str(tmp_path / "run")]) == 2  # before: the pattern trained, exit 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
        assert len(err) == 1 and "category_c" in err[0] and f"--dev: {dev}" in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_pattern_split_missing_or_adding_a_label_column_names_it_and_what_to_do(tmp_path):
    train = write(tmp_path / "train.csv", TRAIN)
    less = write(tmp_path / "less.csv", "text,category_a,category_b\n今天下雨,1,0\n")
    message = error_of(read_sets, less, "--test", train=train)
    assert f"--test: {less} has no column category_c, which --train: {train} has" in message
    assert "add the column (1 where a text has the label, else 0)" in message
    more = write(tmp_path / "more.csv", "text,category_a,category_b,category_c,category_d\n今天下雨,1,0,0,0\n")
    message = error_of(read_sets, more, "--dev", train=train)  # before: read, category_d silently never a label
    assert f"--dev: {more} has the column category_d, which --train: {train} lacks" in message
    assert "--allow-new-labels" in message
    assert read_sets(more, "--dev", train=train, allow_new_labels=True) == [("今天下雨", None, ("category_a",))]
    same = write(tmp_path / "same.csv", "category_c,text,category_b,category_a\n1,今天下雨,0,0\n")  # other order
    assert read_sets(same, "--dev", train=train) == [("今天下雨", None, ("category_c",))]


# --- 2. column names with spaces; the flag the user gave --------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    ["Question\u00a0Sentence", "Question  Sentence", "question sentence", "Question\u3000Sentence"],
)
def test_a_text_column_named_with_a_space_is_found_however_the_file_spaces_it(tmp_path, header):
    # a spreadsheet's non-breaking space, two spaces, another case, an ideographic space: before, "not found"
    csv = write(tmp_path / "a.csv", f"{header},label\n今天天气怎么样,天气\n这首歌谁唱的,音乐\n")
    assert read_examples(csv, text_column="Question Sentence")[0] == Example("今天天气怎么样", None, "天气", 2, csv)
    jsonl = write(tmp_path / "a.jsonl", json.dumps({f" {header} ": "今天", "label": "天气"}, ensure_ascii=False))
    assert read_examples(jsonl, text_column="Question Sentence")[0].text == "今天"
    # prediction with the training run's column: it fits this file, so it is used (not the defaults)
    assert read_examples(csv, text_column=TrainedColumn("Question Sentence"), require_label=False)[0].text == (
        "今天天气怎么样"
    )


def test_label_columns_are_never_the_text_or_the_pair_and_errors_name_label_columns(tmp_path):
    one = write(tmp_path / "one.csv", "Question Sentence,cat_a,cat_b\n今天天气怎么样,1,0\n这首歌谁唱的,0,1\n")
    # before: text "今天天气怎么样" with the pair "1" (the 0/1 column cat_a read as a second text)
    assert read_sets(one, spec="cat_*") == [("今天天气怎么样", None, ("cat_a",)), ("这首歌谁唱的", None, ("cat_b",))]
    two = write(tmp_path / "two.csv", "id,Question Sentence,cat_a,cat_b\n1,今天天气怎么样,1,0\n2,这首歌谁唱的,0,1\n")
    message = error_of(read_sets, two, spec="cat_*")  # before: "name them with --text-column and --label-column"
    assert "--label-columns (cat_a, cat_b)" in message and "id, Question Sentence" in message
    assert "--text-column" in message and "--label-column " not in message
    assert read_sets(two, spec="cat_*", text_column="Question Sentence")[0] == ("今天天气怎么样", None, ("cat_a",))
    spaced = write(tmp_path / "spaced.csv", "text,Cat\u00a0A,Cat B\n今天,1,0\n明天,0,1\n")  # named one by one
    assert read_sets(spaced, spec="cat a,cat b") == [("今天", None, ("Cat\u00a0A",)), ("明天", None, ("Cat B",))]


# --- 3. an Excel workbook whose first sheet is not the data -----------------------------------------------------


def workbook(path, sheets: dict) -> str:
    from openpyxl import Workbook

    book = Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    book.save(path)
    return str(path)


COVER = [["本表为2024年客服对话标注结果，请勿外传。"], ["标注人：张三、李四"], ["版本：第三版，已复核"]]


def test_a_workbook_with_a_cover_sheet_names_its_sheets_and_the_sheet_flag(tmp_path):
    data = [["text", "label"], ["服务很好", "正面"], ["太慢了", "负面"], ["还不错", "正面"]]
    path = workbook(tmp_path / "a.xlsx", {"说明": COVER, "数据 2024": data})
    message = error_of(read_examples, path, text_column="text")  # before: the columns not found, no word of sheets
    assert "2 sheets (说明, 数据 2024)" in message and "sheet '说明' was read (the first)" in message
    assert "give --sheet '数据 2024'" in message
    assert read_examples(path, text_column="text", sheet="数据 2024")[0] == Example("服务很好", None, "正面", 2, path)
    columns = [["text", "category_a"], ["服务很好", "1"], ["太慢了", "0"]]
    labelled = workbook(tmp_path / "b.xlsx", {"说明": COVER, "标注": columns})
    message = error_of(read_sets, labelled)  # the 0/1 columns by a pattern: the same advice
    assert "matches no column" in message and "give --sheet 标注" in message
    assert read_sets(labelled, sheet="标注")[0] == ("服务很好", None, ("category_a",))
    nowhere = workbook(tmp_path / "c.xlsx", {"说明": COVER, "备注": COVER})
    message = error_of(read_examples, nowhere, text_column="text")
    assert "2 sheets (说明, 备注)" in message and "no other sheet has what is needed either" in message
    single = workbook(tmp_path / "d.xlsx", {"说明": COVER})  # one sheet: nothing to choose, nothing added
    assert "sheets" not in error_of(read_examples, single, text_column="text")


# --- 4. a JSON Lines key "labels" holding label sets ------------------------------------------------------------


def test_multi_label_reads_a_labels_key_when_there_is_no_label_key(tmp_path, capsys):
    lines = [
        {"text": "球赛直播", "labels": ["体育", "娱乐"]},
        {"text": "股市", "labels": []},
        {"text": "新歌", "labels": ["娱乐"]},
    ]
    path = write(tmp_path / "a.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
    task = Classification(multi_label=True)
    examples = task.read(path, DataConfig(), "--train")  # before: "no text has a label" (it looked for "label")
    assert [e.label for e in examples] == [("体育", "娱乐"), (), ("娱乐",)]
    assert "3 texts, 1 with several labels, 1 with none" in capsys.readouterr().err
    both = write(tmp_path / "b.csv", "text,label,labels\n球赛,体育,娱乐\n股市,财经,\n")
    message = error_of(task.read, both, DataConfig(), "--train")
    assert 'both a "label" and a "labels" column' in message and "--label-column" in message
    assert [e.label for e in task.read(both, DataConfig(label_column="labels"), "--train")] == [("娱乐",), ()]
    # one label per text keeps to "label": a file of "labels" is an error naming --label-column
    assert "--label-column" in error_of(Classification().read, path, DataConfig(), "--train")


def test_a_json_lines_file_cut_in_its_last_line_is_named_truncated(tmp_path):
    """A file cut off while copied: its last line's object ends mid-value. Said as truncated, with where the text
    ends; a wrong character inside the file stays an invalid-JSON error naming its line."""
    good = '{"text": "很好", "label": "正面"}\n'
    cut = write(tmp_path / "cut.jsonl", good + '{"text": "太差", "lab\n')
    message = error_of(read_examples, cut)
    assert "cut.jsonl:2:19: the file is truncated: its text ends at line 2, character 19" in message
    bad = write(tmp_path / "bad.jsonl", good + '{"text": "太差" "label": "负面"}\n' + good)
    message = error_of(read_examples, bad)
    assert "bad.jsonl:2:15: invalid JSON" in message and "truncated" not in message


def test_evaluate_of_a_file_without_a_label_column_of_the_model_is_exit_2(tmp_path, capsys):
    """evaluate has no train file to compare with: the model's labels are the reference."""
    from ernie_ft.cli import main as cli

    out = tmp_path / "run"
    train = write(tmp_path / "train.csv", TRAIN)
    assert (
        classify(["--train", train, "--multi-label", "--label-columns", "category_*", *FAST, "--output", str(out)]) == 0
    )
    whole = write(tmp_path / "whole.csv", TRAIN)
    assert cli(["evaluate", "--model", str(out), "--input", whole, "--output-dir", str(tmp_path / "e1")]) == 0
    lacking = write(tmp_path / "lacking.csv", "text,category_a,category_c\n今天下雨,1,1\n股价大涨,0,1\n")
    capsys.readouterr()
    assert cli(["evaluate", "--model", str(out), "--input", lacking, "--output-dir", str(tmp_path / "e2")]) == 2
    err = capsys.readouterr().err
    assert "lacking.csv has no column for the model's label category_b" in err
    assert not (tmp_path / "e2").exists()
