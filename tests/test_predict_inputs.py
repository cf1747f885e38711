"""Prediction and evaluation inputs: the training file's column names do not bind their format.

A .txt is one text per line; a TSV/CSV/JSONL uses the training run's column when it has it, else
the defaults; a column flag given at prediction time wins, and must be found.
"""

import json
from pathlib import Path

import pytest
import yaml

from ernie_ft import cli
from ernie_ft.classify.task import read_labelled
from ernie_ft.errors import UserError
from ernie_ft.inference.predict import inference_data
from ernie_ft.recipes import build_config

NO_FLAGS = {"text_column": None, "text_pair_column": None}  # what predict passes when no column flag is given


def saved_data(**flags) -> dict:
    """The data settings a training run with these flags saves in its checkpoint (through YAML, as on disk)."""
    run = build_config({}, {"train": "train.csv", **flags}).to_dict()
    return yaml.safe_load(yaml.safe_dump(run, allow_unicode=True))["data"]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def predict_texts(path, trained, **flags):
    data = inference_data(trained, {**NO_FLAGS, **flags})
    return [e.text for e in read_labelled(path, data, "--input", labelled=False)]


def evaluate_examples(path, trained, **flags):
    data = inference_data(trained, {**NO_FLAGS, "label_column": None, **flags})
    return [(e.text, e.label) for e in read_labelled(path, data, "--input", labelled=True)]


REVIEW = saved_data(text_column="review")


def test_a_txt_file_is_one_text_per_line_whatever_the_training_columns(tmp_path):
    path = write(tmp_path, "new.txt", "质量很好\n物流太慢了\n")
    assert predict_texts(path, REVIEW) == ["质量很好", "物流太慢了"]
    assert predict_texts(path, saved_data(text_column="review", label_column="stars", text_pair_column="title")) == [
        "质量很好",
        "物流太慢了",
    ]


def test_a_csv_with_the_training_text_column_uses_it(tmp_path):
    path = write(tmp_path, "new.csv", "id,review\n1,质量很好\n2,物流太慢了\n")  # "review" alone marks the header
    assert predict_texts(path, REVIEW) == ["质量很好", "物流太慢了"]
    both = write(tmp_path, "both.csv", "text,review\n标题一,质量很好\n")
    assert predict_texts(both, REVIEW) == ["质量很好"]  # the training column before the default one
    jsonl = write(tmp_path, "new.jsonl", '{"review": "质量很好", "text": "标题"}\n')
    assert predict_texts(jsonl, REVIEW) == ["质量很好"]


def test_a_csv_without_the_training_text_column_uses_the_default_text_column(tmp_path):
    path = write(tmp_path, "new.csv", "id,text\n1,质量很好\n2,物流太慢了\n")
    assert predict_texts(path, REVIEW) == ["质量很好", "物流太慢了"]
    nothing = write(tmp_path, "nothing.csv", "id,title\n1,质量很好\n")
    with pytest.raises(
        UserError,
        match=r'no text column \(the model was trained on column "review"\).*'
        r"columns found: id, title.*--text-column",
    ):
        predict_texts(nothing, REVIEW)


def test_a_column_flag_given_at_prediction_wins_and_must_be_found(tmp_path):
    path = write(tmp_path, "new.csv", "review,title\n质量很好,标题一\n")
    assert predict_texts(path, REVIEW, text_column="title") == ["标题一"]
    txt = write(tmp_path, "new.txt", "质量很好\n")
    with pytest.raises(UserError, match=r'--text-column "review" not found in --input: .*new.txt; columns found: text'):
        predict_texts(txt, saved_data(), text_column="review")
    with pytest.raises(UserError, match=r'--text-column "content" not found in --input: .*new.csv'):
        predict_texts(path, REVIEW, text_column="content")


def test_evaluate_uses_the_training_label_column_when_present_else_the_default_and_a_flag_wins(tmp_path):
    trained = saved_data(text_column="review", label_column="stars")
    same = write(tmp_path, "same.csv", "review,stars\n质量很好,5\n太慢了,1\n")
    assert evaluate_examples(same, trained) == [("质量很好", "5"), ("太慢了", "1")]
    default = write(tmp_path, "default.csv", "text,label\n质量很好,正面\n")
    assert evaluate_examples(default, trained) == [("质量很好", "正面")]
    flagged = write(tmp_path, "flagged.csv", "review,stars,grade\n质量很好,5,A\n")
    assert evaluate_examples(flagged, trained, label_column="grade") == [("质量很好", "A")]
    with pytest.raises(UserError, match=r'--label-column "grade" not found in --input: .*same.csv'):
        evaluate_examples(same, trained, label_column="grade")
    with pytest.raises(
        UserError,
        match=r'has no "label" column \(the model was trained on column "stars"\).*'
        r"--label-column",
    ):
        evaluate_examples(write(tmp_path, "neither.csv", "review,score\n质量很好,5\n"), trained)


def test_training_column_positions_carry_over_only_to_a_headerless_file_that_has_them_all(tmp_path):
    trained = saved_data(label_column="0", text_column="1")  # a headerless TSV: label, text
    assert evaluate_examples(write(tmp_path, "same.tsv", "正面\t质量很好\n负面\t太慢了\n"), trained) == [
        ("质量很好", "正面"),
        ("太慢了", "负面"),
    ]
    assert predict_texts(write(tmp_path, "texts.tsv", "质量很好\n太慢了\n"), trained) == ["质量很好", "太慢了"]
    assert predict_texts(write(tmp_path, "named.csv", "text,id\n质量很好,7\n"), trained) == ["质量很好"]


def test_a_column_flag_for_a_task_that_reads_no_columns_is_an_error_not_ignored():
    from ernie_ft.ner.task import NER
    from ernie_ft.qa.task import QA

    with pytest.raises(
        UserError, match=r"--text-column does not apply to a ner model \(NER files are read by --format"
    ):
        inference_data(saved_data(), {**NO_FLAGS, "text_column": "content"}, NER())
    with pytest.raises(UserError, match=r"--label-column does not apply to a qa model \(QA reads SQuAD-style"):
        inference_data(saved_data(), {**NO_FLAGS, "label_column": "answer"}, QA())
    assert inference_data(saved_data(), NO_FLAGS, NER()).max_len == 128  # the flags not given are no error


# ---------------------------------------------------------------- end to end, through the command line

ENTRY_POINTS = {  # python -m MODULE ARGS, called in this process (the same functions, without a new interpreter)
    "ernie_ft.classify": cli.task_command("classify"),
    "ernie_ft": cli.main,
    "ernie_ft.evaluate": lambda args: cli.main(["evaluate", *args]),
}


def run(module, *args, capsys):
    capsys.readouterr()
    status = ENTRY_POINTS[module](list(args))
    printed = capsys.readouterr()
    assert status == 0, printed.err[-3000:]
    return printed


def test_a_classifier_trained_on_a_review_column_predicts_and_evaluates_other_layouts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    good = ["质量很好，非常满意", "物流很快，推荐购买", "服务周到，下次还来", "味道不错，值得一试"]
    bad = ["质量太差了，再也不买", "物流太慢，很失望", "服务态度恶劣", "味道难吃，不推荐"]
    rows = [(text, "正面") for text in good] + [(text, "负面") for text in bad]
    train = tmp_path / "train.csv"
    train.write_text("review,label\n" + "".join(f"{t},{label}\n" for t, label in rows * 3), encoding="utf-8")
    out = tmp_path / "run"
    run(
        "ernie_ft.classify",
        "--train",
        str(train),
        "--text-column",
        "review",
        "--model",
        "scratch:tiny",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--output",
        str(out),
        capsys=capsys,
    )

    texts = ["质量很好", "物流太慢了"]
    (tmp_path / "new.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run("ernie_ft", "export", "--model", str(out), "--output", "exported", capsys=capsys)
    for command in (
        ["ernie_ft.classify", "predict", "--model", str(out)],
        ["ernie_ft", "predict", "--model", str(out)],
        ["ernie_ft", "predict", "--model", "exported", "--engine", "inference"],
    ):
        pred = tmp_path / "pred.jsonl"
        run(*command, "--input", "new.txt", "--output", str(pred), capsys=capsys)
        records = [json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines()]
        assert [r["text"] for r in records] == texts and all(r["label"] in ("正面", "负面") for r in records)

    (tmp_path / "dev.csv").write_text("text,label\n质量很好,正面\n物流太慢了,负面\n", encoding="utf-8")
    printed = run(
        "ernie_ft.evaluate", "--model", str(out), "--input", "dev.csv", "--output-dir", "eval", capsys=capsys
    ).out
    assert "dev.csv: 2 examples" in printed
    assert set(json.loads((tmp_path / "eval" / "metrics.json").read_text(encoding="utf-8"))["per_class"]) == {
        "正面",
        "负面",
    }


def test_predict_with_a_column_flag_on_a_tagger_is_one_error_line_and_writes_nothing(tmp_path, capsys):
    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "p.jsonl"
    status = cli.main(
        [
            "predict",
            "--model",
            str(root / "tests" / "fixtures" / "v0.1" / "ner"),
            "--trust-pickle",
            "--input",
            str(root / "data" / "ner_dev.jsonl"),
            "--text-column",
            "content",
            "--output",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and "error: --text-column does not apply to a ner model" in err and "Traceback" not in err
    assert not out.exists()


# ---------------------------------------------------------------- the Python API: texts as the HTTP API takes them


def test_predictor_takes_texts_where_the_task_has_one_text_field_and_says_what_a_record_is_elsewhere(tmp_path, capsys):
    from ernie_ft import Predictor

    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "质量很好\t正面\n太差了\t负面\n" * 4, encoding="utf-8")
    run("ernie_ft.classify", "--train", str(train), "--model", "scratch:tiny", "--epochs", "1", "--threads", "1",
        "--max-len", "16", "--output", str(tmp_path / "run"), capsys=capsys)  # fmt: skip
    classify = Predictor(str(tmp_path / "run"), engine="dygraph", device="cpu")
    texts = ["质量很好", "太差了"]
    records = classify([{"text": t} for t in texts])
    assert classify(texts) == records  # before: "inputs[0]: expected a JSON object"
    assert classify(texts[0]) == records[:1]  # one text: a list of one prediction, as the server answers
    with pytest.raises(UserError, match=r"^inputs\[1\]: expected a record such as \{\"text\": \"...\"\} or a text"):
        classify(["质量很好", 3])
    # a record without its text key is called missing, with the keys it has (before: "empty text in column")
    with pytest.raises(UserError, match=r'^inputs\[1\]\.text: the text key "text" is missing \(the record\'s keys: '
                       r"content, id\)"):  # fmt: skip
        classify([{"text": "好"}, {"content": "质量很好", "id": 7}])

    qa = tmp_path / "qa.json"
    context = "青石镇在河的东边，镇上有一座石桥。"
    paragraph = {"context": context, "qas": [{"id": "q", "question": "石桥在哪里", "answers": [
        {"text": "青石镇", "answer_start": 0}]}]}  # fmt: skip
    qa.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [paragraph]}]}, ensure_ascii=False), "utf-8")
    assert cli.main(["qa", "--train", str(qa), "--model", "scratch:tiny", "--threads", "1", "--max-len", "32",
                     "--epochs", "1", "--output", str(tmp_path / "qa")]) == 0  # fmt: skip
    answer = Predictor(str(tmp_path / "qa"), engine="dygraph", device="cpu")
    assert len(answer([{"question": "石桥在哪里", "context": context}])) == 1
    with pytest.raises(UserError, match=r'^inputs\[0\]: a text alone is taken only by a task with one input field; '
                       r'a qa input is a record such as \{"question": "...", "context": "..."\}'):  # fmt: skip
        answer(["石桥在哪里"])
