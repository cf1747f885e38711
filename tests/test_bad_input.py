"""Every user mistake: one clear message naming the file, line or flag, exit status 2, nothing lost."""

import subprocess
import sys

import pytest
from conftest import DATA

from ernie_ft.cli import task_command

main = task_command("classify")

TRAIN, DEV = str(DATA / "sentiment_train.tsv"), str(DATA / "sentiment_dev.tsv")


def run(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return str(path)


def base(out, train=TRAIN, *extra):
    return [
        "--train",
        train,
        "--model",
        "scratch:tiny",
        "--output",
        str(out),
        "--epochs",
        "1",
        "--threads",
        "1",
        *extra,
    ]


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("missing.tsv", None, ["--train", "missing.tsv", "not found"]),
        ("empty.tsv", "\n\n", ["empty.tsv", "empty"]),
        ("short_row.tsv", "label\ttext_a\n正面\t很好\n负面\n", ["short_row.tsv:3", "expected 2 fields"]),
        ("empty_text.tsv", "label\ttext_a\n正面\t很好\n负面\t  \n", ["empty_text.tsv:3", "empty text"]),
        ("gbk.tsv", ("label\ttext_a\n正面\t房间很干净\n负面\t服务太差\n", "gbk"), ["not UTF-8", "GBK", "iconv"]),
        ("one_label.tsv", "label\ttext_a\n正面\t很好\n正面\t不错\n", ["one_label.tsv", "at least two labels"]),
    ],
)
def test_bad_training_files(tmp_path, capsys, name, content, expected):
    path = tmp_path / name
    if content is not None:
        text, encoding = content if isinstance(content, tuple) else (content, "utf-8")
        write(path, text, encoding)
    code, err = run(capsys, *base(tmp_path / "out", str(path)))
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for fragment in expected:
        assert fragment in err
    assert not (tmp_path / "out").exists()  # nothing was created for a run that could not start


def test_missing_column_lists_the_columns_found(tmp_path, capsys):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--text-column", "review"))
    assert code == 2 and "--text-column" in err and "review" in err and "text_a" in err and "label" in err


def test_unknown_dev_label_is_an_error_unless_allowed(tmp_path, capsys):
    dev = write(tmp_path / "dev.tsv", "label\ttext_a\n正面\t很好\n中性\t还行吧\n")
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--dev", dev))
    assert code == 2 and "dev.tsv:3" in err and "中性" in err and "--allow-new-labels" in err
    code, _ = run(capsys, *base(tmp_path / "out", TRAIN, "--dev", dev, "--allow-new-labels"))
    assert code == 0


def test_max_len_above_the_models_position_limit(tmp_path, capsys, tiny_checkpoint):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", tiny_checkpoint, "--max-len", "300"))
    assert code == 2 and "--max-len 300" in err and "256" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "model,expected",
    [
        ("ernie-3.0-medium-zh", ["--model ernie-3.0-medium-zh", "offline", "safe_serialization=True"]),
        ("./no/such/dir", ["directory not found"]),
        ("scratch:huge", ["unknown scratch preset", "scratch:tiny"]),
    ],
)
def test_models_that_cannot_be_had(tmp_path, capsys, model, expected):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", model))
    assert code == 2
    for fragment in expected:
        assert fragment in err


def test_an_existing_output_is_never_overwritten_silently(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    code, err = run(capsys, *base(out))
    assert code == 2 and "--resume" in err and "--overwrite" in err
    assert (out / "precious.txt").read_text() == "keep me"
    code, err = run(capsys, *base(out, TRAIN, "--resume"))
    assert code == 2 and "no resumable checkpoint" in err


def test_no_traceback_reaches_the_user_from_the_real_command(tmp_path):
    bad = write(tmp_path / "bad.tsv", "label\ttext_a\n正面\t房间很干净\n", "gbk")
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_ft.classify", *base(tmp_path / "o", bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "GBK" in proc.stderr
