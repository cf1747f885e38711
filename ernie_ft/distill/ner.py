"""Knowledge distillation for NER: a student tagger learns a softmax NER teacher's soft labels token by token.

The teacher runs beside the student in every training step, on the student's own windows (the student takes the
teacher's vocabulary, so the token ids are the same), and its logits for each token are that token's soft labels:
no pass before training, and nothing to align between two tokenizations. Only the tokens that carry a tag (the
first token of each character or word, as NER trains them) count; [CLS], [SEP], continuation pieces and padding
do not. A token of an unlabelled text has the soft loss alone (label -1 in the batch, -100 where no tag is).
A CRF teacher scores whole tag sequences rather than tokens, so distill refuses it (``teacher.teacher_dir``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from dataclasses import dataclass
from typing import ClassVar, Optional

from ernie_ft.distill import settings
from ernie_ft.distill import teacher as teachers
from ernie_ft.distill import transfer as transfers
from ernie_ft.errors import UserError
from ernie_ft.ner.task import NER


@dataclass
class NerDistillation(NER):
    """NER whose loss mixes the teacher's per-token soft labels with the hard tags; it saves as ``ner``."""

    teacher: Optional[str] = None
    """The teacher: the output directory of an NER run trained without --crf, or its best/."""
    unlabelled: Optional[str] = None
    """Texts without entities that the student learns from the teacher alone (one text per line, or any NER
    format, whose entities are ignored)."""
    temperature: float = 2.0
    """Softmax temperature of the soft labels (teacher and student)."""
    alpha: float = 0.5
    """Weight of the soft loss on the tokens of labelled texts (the hard tags' cross-entropy gets 1 - alpha)."""
    transfer: str = "logits"
    """Only logits for NER."""
    transfer_weight: float = 1.0
    """Not used for NER (no intermediate layers)."""
    student_vocab: Optional[str] = None
    """A scratch student's vocabulary: full (the teacher's) or used (the teacher's cut to the tokens of the texts)."""
    _teacher_ids: object = dataclasses.field(default=None, init=False, repr=False)
    """The teacher's token id of each student id (a tensor) when the student's vocabulary is a cut of its own."""
    _train: Optional[list] = dataclasses.field(default=None, init=False, repr=False)
    """The training examples: the labelled ones first, then ``_labelled`` on the unlabelled texts."""
    _labelled: int = dataclasses.field(default=0, init=False, repr=False)
    _max_len: Optional[int] = dataclasses.field(default=None, init=False, repr=False)
    _teacher: object = dataclasses.field(default=None, init=False, repr=False)
    """The teacher's model (set by ``bind``)."""
    taught: ClassVar[str] = "soft labels per token"
    """What the teacher gives, as the training log says it."""
    teacher_kind: ClassVar[str] = "an NER teacher"
    """The teacher, as messages name it (see ``Distillation`` for what these declarations are)."""
    inherits: ClassVar[tuple] = teachers.NER_INHERITED
    teacher_in_every_step: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        settings.check(self)
        self.check_transfer(self.transfer)

    @classmethod
    def check_teacher(cls, teacher, path: str) -> None:
        """A tagger whose model is more than a softmax per token (a CRF, which scores whole tag sequences) is refused:
        its per-token logits are no soft labels."""
        if teacher.model_class is not None:
            raise UserError(
                f"--teacher {path}: an NER run trained with --crf; distill takes an NER teacher without --crf only "
                "(its per-token softmax gives the soft labels; a CRF scores whole tag sequences): train the teacher "
                "with python -m ernie_ft ner without --crf"
            )

    @classmethod
    def check_transfer(cls, transfer: str) -> None:
        if transfer != "logits":
            raise UserError(
                f"--transfer {transfer}: {cls.teacher_kind} teaches its {cls.taught} only (hidden states and attention "
                "are transferred for classification teachers); use --transfer logits (the default)"
            )

    @classmethod
    def student_options(cls, directory: str, options: dict) -> dict:
        """``options`` as they are; a classification student's setting among them (--threshold, --top-k, ...) is a
        UserError."""
        other = [k for k in options if k not in {f.name for f in dataclasses.fields(cls)}]
        if other:
            raise UserError(
                f"--{other[0].replace('_', '-')} is for the student of a classification teacher: the teacher "
                f"{options.get('teacher')} is an NER model; leave it out"
            )
        return options

    def saved_options(self) -> dict:
        """The task settings the student's checkpoint records (an ner checkpoint): nested if its teacher is."""
        return {"nested": True} if self.nested else {}

    @functools.cached_property
    def teacher_dir(self) -> str:
        return teachers.teacher_dir(self.teacher)

    def read(self, path, data, flag, labelled=True):
        """The file's examples; for --train, followed by every --unlabelled file's texts (no entities)."""
        examples = super().read(path, data, flag, labelled)
        if flag != "--train":
            return examples
        self._max_len, self._labelled = data.max_len, len(examples)
        for file in settings.unlabelled_files(self.unlabelled):
            texts = super().read(file, data, "--unlabelled", labelled=False)  # as the teacher's task reads texts
            examples += [dataclasses.replace(e, entities=()) for e in texts]
        self._train = examples
        return examples

    def fit_labels(self, train):
        """The teacher's tags, in its order (its logits' columns); a labelled entity of another type is an error."""
        labels = teachers.teacher_labels(self.teacher_dir)
        known = set(self.types(labels))
        for e in train[: self._labelled]:
            for *_, kind in e.entities:
                if kind not in known:
                    raise UserError(
                        f"--train: {e.source}:{e.line}: the entity type {kind!r} is not one of the teacher's "
                        f"({', '.join(sorted(known))}); label the texts with the teacher's types"
                    )
        return labels

    def featurize(self, examples, encodings, pipeline, labels, data):
        """NER's windows; the tagged tokens of an unlabelled text get the label -1 (soft loss only). The
        student's token ids are checked against the teacher's, which reads them."""
        features = super().featurize(examples, encodings, pipeline, labels, data)
        if examples is not self._train:
            return features
        self._teacher_ids = transfers.check_pipeline(
            pipeline, self.teacher_dir, f"--teacher {self.teacher}", "the NER teacher reads the student's windows"
        )
        self.mark_unlabelled(features)
        if os.environ.get("PADDLE_TRAINER_ID", "0") == "0":
            unlabelled = len(examples) - self._labelled
            print(
                f"teacher {self.teacher_dir}: {self.taught} in every training step ({unlabelled} unlabelled texts)",
                file=sys.stderr,
            )
        return features

    def mark_unlabelled(self, features) -> None:
        """The tagged tokens of an unlabelled text's windows get the label -1: the loss takes their soft term only."""
        for f in features:
            if f["doc"] >= self._labelled:
                f["labels"] = [-100 if v == -100 else -1 for v in f["labels"]]

    def bind(self, model, teacher=None) -> None:
        """The student ``model`` (as NER binds it) and the teacher beside it (``teacher``, else --teacher's)."""
        super().bind(model)
        teacher = transfers.load_teacher(self.teacher_dir) if teacher is None else teacher
        transfers.check_max_len(teacher, self._max_len)
        self._teacher = teacher

    def teacher_logits(self, batch):
        """The teacher's logits of the student's ``batch`` (its forward pass, without gradients)."""
        import paddle

        from ernie_ft.models.modeling import forward

        with paddle.no_grad():
            return forward(self._teacher, transfers.teacher_batch(batch, self._teacher_ids))

    def loss(self, logits, batch):
        """``soft_loss`` against the teacher's logits of the same batch."""
        return self.soft_loss(logits, self.teacher_logits(batch), batch["labels"])

    def soft_loss(self, logits, teacher_logits, labels):
        """Per tagged token (label >= 0, or -1 in an unlabelled text): alpha * T^2 * KL(teacher_T || student_T) +
        (1 - alpha) * cross-entropy with its tag, or T^2 * KL alone for label -1; the mean over the batch's
        tagged tokens. Tokens labelled -100 ([CLS], [SEP], continuation pieces, padding) count for nothing."""
        import paddle
        import paddle.nn.functional as F

        t = self.temperature
        logits = logits.astype("float32")
        student = F.log_softmax(logits / t, axis=-1)
        teacher = F.log_softmax(teacher_logits.astype("float32") / t, axis=-1)
        soft = (teacher.exp() * (teacher - student)).sum(axis=-1) * (t * t)
        tokens = (labels != -100).astype("float32")
        labelled = (labels >= 0).astype("float32")
        hard = F.cross_entropy(logits, labels.clip(min=0).unsqueeze(-1), reduction="none").squeeze(-1)
        mixed = labelled * (self.alpha * soft + (1 - self.alpha) * hard) + (tokens - labelled) * soft
        return mixed.sum() / paddle.clip(tokens.sum(), min=1.0)
