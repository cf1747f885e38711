"""Knowledge distillation for nested NER: a student span model learns a nested NER teacher's (``ner --nested``)
span scores.

The teacher runs beside the student in every training step on the student's own windows (the student takes the
teacher's vocabulary and entity types), as for a flat NER teacher (``distill.ner``), and its GlobalPointer scores
[B, types, L, L] are the soft labels. The soft term is a binary cross-entropy per span and type against the
teacher's sigmoid at the temperature, the teacher's entities and its other spans weighing half each
(``balanced_bce``): the nested decode takes every span whose score is above 0 on its own, so each span and type
is a yes/no question, and its probability is the sigmoid of its score. A KL
over a softmax of the spans (per row and type) would teach something the decode never reads: how the spans rank
against one another, with one distribution split among however many entities the text holds. The global pointer
loss is no divergence either (its targets are 0/1), so it is kept for the gold spans of labelled texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ernie_ft.distill.ner import NerDistillation
from ernie_ft.errors import UserError
from ernie_ft.ner.nested import THRESHOLD, NestedNER
from ernie_ft.ner.task import NER


def check_kind(student: type, teacher: str, path: str, nested) -> bool:
    """Whether the student (of the class ``student`` that the teacher's task names; ``teacher``: that task's name,
    ``--teacher path``) is nested: it is when the teacher is. ``nested`` (--nested, --no-nested, or None when neither
    is given) asking for another kind of student than the teacher's is a UserError."""
    kind = issubclass(student, NestedNER)
    if nested is None or bool(nested) == kind:
        return kind
    if not issubclass(student, NER):
        raise UserError(
            f"--{'' if nested else 'no-'}nested: the teacher {path} is a {teacher} model; --nested and --no-nested are "
            "for the student of an NER teacher (whose kind it takes); leave it out"
        )
    if nested:
        raise UserError(
            f"--nested: the teacher {path} is a flat NER tagger (trained without --nested), and its student is one "
            "too (a tagger learns its soft labels per token); leave out --nested, or distil a teacher trained with "
            "python -m ernie_ft ner --nested"
        )
    raise UserError(
        f"--no-nested: the teacher {path} is a nested NER model (ner --nested), and a flat tagger cannot learn its "
        "span scores (nested and overlapping entities); leave out --no-nested (the student is a nested span model), "
        "or distil a flat NER teacher"
    )


@dataclass
class NestedNerDistillation(NerDistillation, NestedNER):
    """Nested NER whose loss mixes the teacher's span scores with the gold spans; it saves as ``ner --nested``."""

    nested: bool = True
    taught: ClassVar[str] = "span scores per entity type"
    teacher_kind: ClassVar[str] = "a nested NER teacher"

    @classmethod
    def check_teacher(cls, teacher, path: str) -> None:
        """Any nested NER model teaches: its span scores are the soft labels."""

    def mark_unlabelled(self, features) -> None:
        """Each window says whether its text is labelled: an unlabelled text's has the soft term only."""
        for f in features:
            f["_labelled"] = f["doc"] < self._labelled

    def collate(self, features, pipeline, seed, epoch):
        """NestedNER's batch; in training also ``labelled`` [B] (1: the window's text has gold spans)."""
        batch = super().collate(features, pipeline, seed, epoch)
        if epoch is not None:
            batch["labelled"] = np.array([f.get("_labelled", True) for f in features], dtype="float32")
        return batch

    def loss(self, logits, batch):
        """``span_soft_loss`` against the teacher's span scores of the same batch."""
        return span_soft_loss(logits, self.teacher_logits(batch), batch, self.temperature, self.alpha)


def text_spans(n_tokens, length: int):
    """1.0 where a span (i <= j) lies inside a window's text tokens ([CLS], [SEP] and padding left out), [B, 1, L, L]
    (``n_tokens`` [B]: each window's tokens with [CLS] and [SEP])."""
    import paddle

    positions = paddle.arange(length, dtype="int64").unsqueeze(0)  # [1, L]
    text = paddle.logical_and(positions >= 1, positions <= n_tokens.astype("int64").unsqueeze(1) - 2)
    text = text.astype("float32")  # [B, L]
    upper = paddle.triu(paddle.ones([length, length], dtype="float32"))
    return (text.unsqueeze(2) * text.unsqueeze(1) * upper).unsqueeze(1)


def span_soft_loss(logits, teacher_logits, batch: dict, temperature: float, alpha: float):
    """The mean over windows of: alpha * soft + (1 - alpha) * hard for a labelled text's window, soft alone for an
    unlabelled one (``batch["labelled"]`` 0). hard: the global pointer loss on the window's gold spans
    (``batch["targets"]``), as ``ner --nested`` trains. soft: the mean over entity types of ``balanced_bce``."""
    import paddle

    from ernie_ft.models.global_pointer import global_pointer_loss

    logits = logits.astype("float32")
    spans = text_spans(batch["n_tokens"], logits.shape[-1])
    soft = balanced_bce(logits, teacher_logits.astype("float32"), spans, temperature).mean(axis=1)  # [B]
    labelled = batch["labelled"].astype("float32")
    loss = (soft * (1 - (1 - alpha) * labelled)).mean()
    rows = paddle.nonzero(labelled > 0).flatten()
    if alpha < 1 and rows.shape[0] > 0:  # the mean over labelled windows, weighed by their share of the batch
        hard = global_pointer_loss(paddle.gather(logits, rows), paddle.gather(batch["targets"], rows))
        loss = loss + (1 - alpha) * hard * (rows.shape[0] / labelled.shape[0])
    return loss


def balanced_bce(logits, teacher_logits, spans, t: float):
    """Per window and entity type [B, types]: T^2 * BCE(sigmoid(teacher / T), student / T) over the spans inside
    the text (``spans``, from ``text_spans``), the spans the teacher decodes as entities (score above
    ``THRESHOLD``) weighing half and the others half; all of it on the others where the teacher finds no entity.

    Each span's weight depends on the teacher only, so every span's term is least where the student's score is the
    teacher's: the loss still teaches the teacher's probabilities. A plain mean over the spans does not train: a
    window of n tokens has n(n+1)/2 spans per type and a handful of entities, and a scratch student learnt to score
    every span of every text below 0 (the global pointer loss balances its two sides in the same way)."""
    import paddle
    import paddle.nn.functional as F

    bce = F.binary_cross_entropy_with_logits(logits / t, F.sigmoid(teacher_logits / t), reduction="none") * (t * t)
    bce = paddle.where(spans > 0, bce, paddle.zeros_like(bce))  # masked spans: no number that could overflow
    positive = (teacher_logits > THRESHOLD).astype("float32") * spans
    negative = spans - positive
    n_positive, n_negative = positive.sum(axis=[2, 3]), negative.sum(axis=[2, 3])
    found = (n_positive > 0).astype("float32")
    positive_part = (bce * positive).sum(axis=[2, 3]) / paddle.clip(n_positive, min=1.0)
    negative_part = (bce * negative).sum(axis=[2, 3]) / paddle.clip(n_negative, min=1.0)
    return found * 0.5 * (positive_part + negative_part) + (1 - found) * negative_part
