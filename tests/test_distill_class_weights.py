"""``distill --class-weights``: the hard term of a labelled text is weighted as ``classify --class-weights`` weighs
its cross-entropy (single label: the weight of the text's label; label sets: ``pos_weight``), from the labelled
training texts; the soft term is not weighted."""

import numpy as np
import pytest

from ernie_ft.errors import UserError


class Text:
    def __init__(self, label, line=1):
        self.label, self.source, self.line = label, "train.tsv", line


@pytest.fixture
def teacher_labels(monkeypatch):
    from ernie_ft.distill import teacher

    labels = ["负面", "中性", "正面"]
    monkeypatch.setattr(teacher, "teacher_labels", lambda directory: labels)
    monkeypatch.setattr(teacher, "teacher_dir", lambda given: given)
    return labels


def test_balanced_weights_count_the_labelled_texts_only(teacher_labels):
    from ernie_ft.distill import Distillation

    task = Distillation(teacher="t", class_weights="balanced")
    train = [Text("正面", 1), Text("正面", 2), Text("正面", 3), Text("负面", 4), Text(None), Text(None)]
    assert task.fit_labels(train) == teacher_labels
    # sklearn's balanced: n / (k x count) over the 4 labelled texts and the 2 labels they have; 中性 has none: 1
    np.testing.assert_allclose(task._weights, [4 / (2 * 1), 1.0, 4 / (2 * 3)], rtol=1e-6)


def test_the_hard_term_is_weighted_by_the_texts_label_and_the_soft_term_is_not(teacher_labels):
    import paddle
    import paddle.nn.functional as F

    from ernie_ft.distill import Distillation

    rng = np.random.default_rng(7)
    student, teacher = (rng.normal(size=(3, 3)).astype(np.float32) * 2 for _ in range(2))
    labels = np.array([2, -1, 0])  # the second text is unlabelled
    t, alpha, weights = 2.0, 0.3, np.array([3.0, 1.0, 0.5], dtype=np.float32)
    p = F.softmax(paddle.to_tensor(teacher) / t, axis=-1).numpy()
    q = F.softmax(paddle.to_tensor(student) / t, axis=-1).numpy()
    kl = (p * np.log(p / q)).sum(axis=1) * t * t
    log_probs = F.log_softmax(paddle.to_tensor(student), axis=-1).numpy()
    ce = [-log_probs[0, 2] * weights[2], 0.0, -log_probs[2, 0] * weights[0]]
    expected = np.mean([alpha * kl[0] + (1 - alpha) * ce[0], kl[1], alpha * kl[2] + (1 - alpha) * ce[2]])

    task = Distillation(teacher="t", temperature=t, alpha=alpha)
    task._weights = weights
    batch = {"teacher_logits": paddle.to_tensor(teacher), "labels": paddle.to_tensor(labels)}
    assert float(task.loss(paddle.to_tensor(student), batch)) == pytest.approx(expected, rel=1e-5)
    task._weights = None  # unweighted differs: the weights reach the loss
    assert float(task.loss(paddle.to_tensor(student), batch)) != pytest.approx(expected, rel=1e-3)


def test_a_weights_file_names_the_teachers_labels_and_balanced_needs_labelled_texts(teacher_labels, tmp_path):
    from ernie_ft.distill import Distillation

    weights = tmp_path / "weights.tsv"
    weights.write_text("中性\t2.5\n", encoding="utf-8")
    task = Distillation(teacher="t", class_weights=str(weights))
    task.fit_labels([Text("正面")])
    np.testing.assert_allclose(task._weights, [1.0, 2.5, 1.0])

    weights.write_text("惊讶\t2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"weights.tsv:1: the label '惊讶' is not a training label"):
        Distillation(teacher="t", class_weights=str(weights)).fit_labels([Text("正面")])
    with pytest.raises(UserError, match="--class-weights balanced counts the labels of --train"):
        Distillation(teacher="t", class_weights="balanced").fit_labels([Text(None), Text(None)])


def test_a_label_set_students_balanced_weights_are_negatives_over_positives_of_the_labelled_texts(teacher_labels):
    from ernie_ft.distill import Distillation

    task = Distillation(teacher="t", multi_label=True, class_weights="balanced")
    train = [Text(("正面",)), Text(("正面", "中性")), Text(("负面",)), Text(None)]
    task.fit_labels(train)
    np.testing.assert_allclose(task._weights, [2 / 1, 2 / 1, 1 / 2])  # 负面 1 of 3, 中性 1 of 3, 正面 2 of 3
