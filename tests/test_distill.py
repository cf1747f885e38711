"""``python -m ernie_ft distill``: a student learns a classification teacher's labels from its soft labels alone,
saves an ordinary classification checkpoint, resumes like any run, and refuses a wrong teacher in one line."""

import json

import numpy as np
import pytest
from conftest import DATA, ROOT, saved_weights

from ernie_ft.cli import main, task_command

ROWS = (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()[1:49]  # 48 reviews
FLIPPED = {3, 10, 17, 24, 31, 38, 45}  # reviews whose label the teacher learns the wrong way round
QUICK = ["--max-len", "32", "--threads", "1", "--log-steps", "50", "--seed", "5", "--dropout", "0"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """labelled.tsv (the first 8 reviews), rest.txt (the other 40, no labels), all.txt (the 48 texts) and
    teacher.tsv (the 48 with some labels flipped)."""
    folder = tmp_path_factory.mktemp("distill-data")
    texts = [row.split("\t")[1] for row in ROWS]
    flip = {"正面": "负面", "负面": "正面"}
    teacher_rows = [
        f"{flip[label] if i in FLIPPED else label}\t{text}"
        for i, (label, text) in enumerate(row.split("\t") for row in ROWS)
    ]
    (folder / "teacher.tsv").write_text("label\ttext_a\n" + "\n".join(teacher_rows) + "\n", encoding="utf-8")
    (folder / "labelled.tsv").write_text("label\ttext_a\n" + "\n".join(ROWS[:8]) + "\n", encoding="utf-8")
    (folder / "rest.txt").write_text("\n".join(texts[8:]) + "\n", encoding="utf-8")
    (folder / "all.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def teacher(files, tmp_path_factory):
    """A classifier that has memorised teacher.tsv, flipped labels included."""
    out = tmp_path_factory.mktemp("teacher") / "run"
    args = ["--train", str(files / "teacher.tsv"), "--model", "scratch:tiny", "--output", str(out)]
    assert task_command("classify")([*args, "--epochs", "15", "--batch-size", "16", "--lr", "5e-3", *QUICK]) == 0
    return out


def distill_args(teacher, files, out, *extra):
    return [
        "distill",
        "--teacher",
        str(teacher),
        "--student",
        "scratch:tiny",
        "--train",
        str(files / "labelled.tsv"),
        "--unlabelled",
        str(files / "rest.txt"),
        "--output",
        str(out),
        "--alpha",
        "1",
        "--epochs",
        "12",
        "--batch-size",
        "16",
        "--lr",
        "5e-3",
        *QUICK,
        *extra,
    ]


def predicted(model, texts_file, tmp_path):
    out = tmp_path / f"{model.name}.jsonl"
    assert main(["predict", "--model", str(model), "--input", str(texts_file), "--output", str(out)]) == 0
    return [json.loads(line)["label"] for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def student(teacher, files, tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "run"
    assert main(distill_args(teacher, files, out)) == 0
    return out


def test_the_student_reproduces_the_teachers_labels_learnt_from_soft_labels_alone(teacher, student, files, tmp_path):
    gold = [row.split("\t")[0] for row in ROWS]
    taught = predicted(teacher, files / "all.txt", tmp_path)
    assert sum(t != g for t, g in zip(taught, gold)) >= 4  # the teacher's own labels, not the files'
    assert predicted(student, files / "all.txt", tmp_path) == taught
    # an ordinary classification checkpoint: the teacher's labels, no distillation settings to load it with
    best = student / "best"
    assert json.loads((best / "labels.json").read_text(encoding="utf-8")) == ["正面", "负面"]
    recorded = (best / "ernie_ft.yaml").read_text(encoding="utf-8")
    assert recorded.startswith("task: classify") and "teacher" not in recorded
    assert "max_len: 32" in recorded  # the teacher's setting, not given to distill
    record = json.loads((student / "distill.json").read_text(encoding="utf-8"))
    assert record["alpha"] == 1.0 and record["unlabelled"] == [str(files / "rest.txt")]


def test_loss_is_the_soft_term_on_unlabelled_texts_and_the_mixture_on_labelled_ones():
    import paddle
    import paddle.nn.functional as F

    from ernie_ft.distill import Distillation

    student = paddle.to_tensor([[2.0, -1.0], [0.5, 0.3]])
    teacher = paddle.to_tensor([[1.0, 0.0], [-1.0, 1.0]])
    labels = paddle.to_tensor([1, -1])
    t, alpha = 2.0, 0.3
    loss = Distillation(teacher="x", temperature=t, alpha=alpha).loss
    p = F.softmax(teacher / t, axis=-1).numpy()
    q = F.softmax(student / t, axis=-1).numpy()
    kl = (p * np.log(p / q)).sum(axis=1) * t * t
    ce = -np.log(F.softmax(student, axis=-1).numpy()[0, 1])
    expected = (alpha * kl[0] + (1 - alpha) * ce + kl[1]) / 2
    assert float(loss(student, {"teacher_logits": teacher, "labels": labels})) == pytest.approx(expected, rel=1e-5)
    same = {"teacher_logits": student, "labels": paddle.to_tensor([-1, -1])}
    assert float(loss(student, same)) == pytest.approx(0.0, abs=1e-6)


def test_resume_ends_with_the_weights_of_an_uninterrupted_run(teacher, files, tmp_path):
    short = ["--epochs", "2"]
    assert main(distill_args(teacher, files, tmp_path / "full", *short)) == 0
    assert main(distill_args(teacher, files, tmp_path / "cut", *short, "--stop-after-steps", "3")) == 0
    assert not (tmp_path / "cut" / "best").exists()
    assert main(distill_args(teacher, files, tmp_path / "cut", *short, "--resume")) == 0
    full, resumed = saved_weights(tmp_path / "full" / "best"), saved_weights(tmp_path / "cut" / "best")
    assert full.keys() == resumed.keys()
    for name in full:
        np.testing.assert_allclose(resumed[name], full[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--teacher": str(ROOT / "tests" / "fixtures" / "v0.1" / "ner")}, "a ner checkpoint; distill takes a classi"),
        ({"--teacher": "no/such/run"}, "--teacher no/such/run: directory not found"),
        ({"--teacher": str(DATA)}, "not an ernie_ft checkpoint"),
        ({"--unlabelled": "no/such.txt"}, "--unlabelled: no/such.txt not found"),
        ({"--alpha": "1.5"}, "--alpha is a weight between 0 and 1"),
    ],
)
def test_a_wrong_teacher_or_file_is_one_error_line_and_nothing_is_written(
    change, message, teacher, files, tmp_path, capsys
):
    args = distill_args(teacher, files, tmp_path / "out")
    for flag, value in change.items():
        args[args.index(flag) + 1] = value
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_the_student_is_named_by_student_not_model(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["distill", "--teacher", "x", "--model", "scratch:tiny"])
    assert stop.value.code == 2 and "--model does not apply" in capsys.readouterr().err
