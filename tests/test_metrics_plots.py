"""ernie_ft.evaluation.classification against hand-computed cases, and ernie_ft.evaluation.plots writing real
PNG files."""

import unicodedata
import warnings

import numpy as np
import pytest

from ernie_ft.evaluation import plots
from ernie_ft.evaluation.classification import classification_metrics, confusion, format_classification_report
from ernie_ft.evaluation.tables import format_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def width(line: str) -> int:
    # Written out here rather than imported so the test does not trust the code it checks.
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


def assert_png(path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_SIGNATURE)


def test_three_classes_by_hand():
    gold = ["a", "a", "b", "b", "c", "c"]
    pred = ["a", "b", "b", "b", "c", "a"]
    m = classification_metrics(gold, pred, ["a", "b", "c"])
    # a: 1 of 2 predicted right, 1 of 2 found; b: 2 of 3, 2 of 2; c: 1 of 1, 1 of 2.
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["per_class"]["a"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert m["per_class"]["b"] == pytest.approx({"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "support": 2})
    assert m["per_class"]["c"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert m["macro_precision"] == pytest.approx((0.5 + 2 / 3 + 1) / 3)
    assert m["macro_recall"] == pytest.approx(2 / 3)
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert all(type(m[key]) is float for key in ("accuracy", "macro_precision", "macro_recall", "macro_f1"))
    assert all(type(v) is float for row in m["per_class"].values() for k, v in row.items() if k != "support")
    assert all(type(row["support"]) is int for row in m["per_class"].values())


def test_gold_label_outside_model_labels_counts_as_error():
    m = classification_metrics(["正面", "负面", "中性"], ["正面", "负面", "正面"], ["正面", "负面"])
    assert list(m["per_class"]) == ["正面", "负面", "中性"]
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["per_class"]["中性"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["per_class"]["正面"] == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert m["macro_f1"] == pytest.approx((2 / 3 + 1 + 0) / 3)


def test_perfect_all_wrong_and_unused_model_label():
    perfect = classification_metrics(["a", "b", "a"], ["a", "b", "a"], ["a", "b", "unused"])
    assert perfect["accuracy"] == perfect["macro_f1"] == 1.0
    # A model label absent from gold and pred is listed but does not drag the macro average down.
    assert perfect["per_class"]["unused"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    wrong = classification_metrics(["a", "b"], ["b", "a"], ["a", "b"])
    assert wrong["accuracy"] == wrong["macro_precision"] == wrong["macro_recall"] == wrong["macro_f1"] == 0.0


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        classification_metrics(["a"], ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError):
        confusion([], [], ["a"])


def test_report_aligns_chinese_labels():
    gold = ["体育", "财经", "体育", "房地产新闻", "x", "财经"]
    pred = ["体育", "体育", "体育", "房地产新闻", "x", "财经"]
    report = format_classification_report(classification_metrics(gold, pred, ["体育", "财经", "房地产新闻", "x"]))
    lines = report.splitlines()
    assert len({width(line) for line in lines}) == 1, report
    assert [line.split()[0] for line in lines[2:6]] == ["体育", "财经", "房地产新闻", "x"]
    assert lines[-2].startswith("macro avg") and lines[-1].startswith("accuracy")
    assert lines[-1].split() == ["accuracy", "0.8333", "6"]


def test_table_aligns_chinese_names_and_right_aligns_the_other_columns():
    table = format_table(
        ("type", "f1", "gold"), [("人名", "0.5000", "12"), ("LOC", "1.0000", "3")], [("micro avg", "0.7500", "15")]
    )
    lines = table.splitlines()
    assert len({width(line) for line in lines}) == 1, table
    assert lines[1] == lines[-2] == "-" * width(lines[0]) and lines[-1].startswith("micro avg")
    assert lines[2] == "人名" + " " * 7 + "0.5000" + " " * 6 + "12"  # "micro avg" sets the first column's width
    assert format_table(("label", "n"), [("a", "1")]).splitlines()[-1] == "a      1"  # no footer, no second rule


def test_confusion_counts_with_extra_labels():
    names, matrix = confusion(["正面", "负面", "中性", "中性"], ["正面", "正面", "正面", "负面"], ["正面", "负面"])
    assert names == ["正面", "负面", "中性"]
    np.testing.assert_array_equal(matrix, [[1, 0, 0], [1, 0, 0], [1, 1, 0]])
    # A predicted label outside the model's list still gets a column rather than vanishing.
    names, matrix = confusion(["a", "b"], ["a", "junk"], ["a", "b"])
    assert names == ["a", "b", "junk"] and matrix.sum() == 2 and matrix[1, 2] == 1


@pytest.mark.parametrize("cjk_font_available", [True, False])
def test_confusion_matrix_png(tmp_path, monkeypatch, cjk_font_available):
    if not cjk_font_available:
        monkeypatch.setattr(plots, "find_cjk_font", lambda: None)
    names, matrix = confusion(["正面", "负面", "中性"] * 4, ["正面", "负面", "负面"] * 4, ["正面", "负面", "中性"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # missing-glyph warnings must be silenced, not leak out
        out = plots.plot_confusion_matrix(names, matrix, str(tmp_path / "sub" / "cm.png"), title="情感")
        plots.plot_confusion_matrix(["正面"], [[5]], str(tmp_path / "one.png"))
    assert out == str(tmp_path / "sub" / "cm.png")
    assert_png(tmp_path / "sub" / "cm.png")
    assert_png(tmp_path / "one.png")


def test_confusion_matrix_shape_must_match(tmp_path):
    with pytest.raises(ValueError):
        plots.plot_confusion_matrix(["a", "b"], [[1, 2, 3]], str(tmp_path / "bad.png"))


def test_training_curves_png(tmp_path):
    history = []
    for step in range(10, 210, 10):
        history.append({"step": step, "loss": 1.0 / step})
        if step % 50 == 0:
            history.append({"step": step, "split": "dev", "accuracy": step / 400, "loss": 0.5})
    cases = {
        "both.png": history,
        "loss_only.png": [r for r in history if "split" not in r],
        "dev_only.png": [r for r in history if "split" in r],
        "single_point.png": [{"step": 1, "split": "dev", "accuracy": 0.5}],
        "empty.png": [],
    }
    for name, records in cases.items():
        assert plots.plot_training_curves(records, str(tmp_path / name), "accuracy") == str(tmp_path / name)
        assert_png(tmp_path / name)


@pytest.mark.parametrize("cjk_font_available", [True, False])
def test_series_png(tmp_path, monkeypatch, cjk_font_available):
    if not cjk_font_available:
        monkeypatch.setattr(plots, "find_cjk_font", lambda: None)
    series = {
        "全词 MLM lr 1e-3": [(6.6, 0.142), (3.3, 0.122), (16.5, 0.149)],  # unsorted: drawn in x order
        "one point": [(1.0, 0.1)],
        "nothing yet": [],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = plots.plot_series(
            series,
            str(tmp_path / "sub" / "runs.png"),
            "tokens seen (M)",
            "held-out masked accuracy",
            "Pretraining",
            reference=("unigram", 0.052),
        )
        plots.plot_series({}, str(tmp_path / "empty.png"), "x", "y", "no runs")
    assert out == str(tmp_path / "sub" / "runs.png")
    assert_png(tmp_path / "sub" / "runs.png")
    assert_png(tmp_path / "empty.png")


def test_importing_is_cheap():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, ernie_ft.evaluation.plots, ernie_ft.evaluation.classification; "
        "print('matplotlib' in sys.modules, 'sklearn' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.stdout.split() == ["False", "False"]
