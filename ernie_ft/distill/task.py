"""Knowledge distillation for classification: a student learns a trained classifier's soft labels, and with
``--transfer`` its hidden states and attention scores too.

With ``--transfer logits`` the teacher's logits for every training text (labelled or not) are computed once,
before the first step, and travel with the student's windows as the target ``teacher_logits``. With intermediate
layers (``transfer.py``) the teacher runs beside the student in every step instead: its hidden states cannot all
be kept for a corpus. The trainer is the usual one (resume, parallelism, logs, curves, dev evaluation), and its
checkpoints are ordinary classification checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import ClassVar, Optional

from ernie_ft.classify import multilabel
from ernie_ft.classify.task import Classification
from ernie_ft.config import RunConfig
from ernie_ft.data.readers import TrainedColumn, read_examples
from ernie_ft.distill import labelsets, settings
from ernie_ft.distill import teacher as teachers
from ernie_ft.distill import transfer as transfers
from ernie_ft.distill import vocab as vocabs
from ernie_ft.errors import UserError


@dataclass
class Distillation(Classification):
    """Classification whose loss mixes the teacher's soft labels with the hard ones; it saves as ``classify``."""

    teacher: Optional[str] = None
    """The teacher: the output directory of a classification run (python -m ernie_ft classify), or of an NER run
    without --crf (python -m ernie_ft ner; the student is then an NER tagger), or its best/."""
    unlabelled: Optional[str] = None
    """Texts without labels that the student learns from the teacher alone: .txt (one text per line), TSV, CSV or
    JSONL, read with the run's columns where the file has them."""
    temperature: float = 2.0
    """Softmax temperature of the soft labels (teacher and student); higher spreads the teacher's probabilities."""
    alpha: float = 0.5
    """Weight of the soft loss on labelled texts (the hard labels' cross-entropy gets 1 - alpha); 1 learns from
    the teacher alone. Unlabelled texts have the soft loss only."""
    transfer: str = "logits"
    """What the student learns from the teacher besides its labels: logits (its soft labels, computed once before
    training), hidden (also the hidden states of mapped layers, through a learned projection when the widths
    differ; the teacher runs in every step, on the student's token ids: a scratch student takes the teacher's
    vocabulary) or hidden+attention (also the attention scores: needs as many heads)."""
    transfer_weight: float = 1.0
    """Weight of the hidden-state and attention losses (--transfer hidden, hidden+attention), added to the loss on
    the logits."""
    nested: Optional[bool] = None
    """The student of an NER teacher is of the teacher's kind: a nested span model for a teacher trained with ner
    --nested, else a tagger. --nested (or --no-nested) says which is expected: an error when the teacher is not."""
    student_vocab: Optional[str] = None
    """A scratch student's vocabulary: full (the teacher's, with its tokenization settings) or used (the teacher's
    cut to the special tokens and those the training and unlabelled texts use: a smaller embedding). Default: built
    from the training texts, or the teacher's vocab.txt where the teacher reads the student's token ids."""
    _train: Optional[list] = dataclasses.field(default=None, init=False, repr=False)
    """The training examples (``read`` of --train): the split whose windows get the teacher's logits."""
    _max_len: Optional[int] = dataclasses.field(default=None, init=False, repr=False)
    """--max-len of the run (set by ``read``): the teacher must take windows that long."""
    _transfer: Optional[transfers.Transfer] = dataclasses.field(default=None, init=False, repr=False)
    """The teacher beside the student (set by ``bind`` unless --transfer logits)."""
    # What every distillation class declares (this one, ``ner.NerDistillation``, ``nested.NestedNerDistillation``):
    # the command line and ``student_task`` ask these of the class the teacher's task names, never the task's name.
    teacher_kind: ClassVar[str] = "a classification teacher"
    """The teacher, as messages name it."""
    inherits: ClassVar[tuple] = teachers.INHERITED
    """The teacher's data settings the student gets unless its flags or recipe set them."""
    teacher_in_every_step: ClassVar[bool] = False
    """Whether the teacher runs beside the student in every step, whatever --transfer says (it reads the student's
    token ids: a scratch student takes its vocabulary, and tensor parallelism cannot split it)."""

    @classmethod
    def check_teacher(cls, teacher, path: str) -> None:
        """A UserError if the teacher's task (``teacher``, as its checkpoint ``--teacher path`` recorded it) cannot
        teach this student; a classifier's student learns from any classifier."""

    @classmethod
    def check_transfer(cls, transfer: str) -> None:
        """A UserError if this teacher cannot teach by ``--transfer transfer``; a classifier teaches by every one of
        ``transfer.MODES`` (``settings.check`` says which are known)."""

    @classmethod
    def student_options(cls, directory: str, options: dict) -> dict:
        """The student's settings from ``options`` (its flags and recipe) and the teacher checkpoint ``directory``:
        a multi-label or hierarchical teacher's label-set settings where ``options`` leaves them unset."""
        return {**teachers.label_set_options(directory, options), **options}

    def saved_options(self) -> dict:
        """The task settings the student's checkpoint records (a classify checkpoint): its label-set settings."""
        return labelsets.recorded(self)

    def __post_init__(self):
        settings.check(self)
        if self.sets:  # a multi-label or hierarchical teacher's settings (labelsets.student_options)
            super().__post_init__()

    @functools.cached_property
    def teacher_dir(self) -> str:
        """The teacher's checkpoint directory (checked: a classification checkpoint)."""
        return teachers.teacher_dir(self.teacher)

    def read(self, path, data, flag, labelled=True):
        """The file's examples; for --train, followed by every --unlabelled file's texts (label None)."""
        examples = super().read(path, data, flag, labelled)
        if flag != "--train":
            return examples
        self._max_len = data.max_len
        columns = {"text_column": data.text_column, "pair_column": data.text_pair_column}
        fitting = {k: TrainedColumn(v) if v else None for k, v in columns.items()}  # the file may be a .txt
        for file in settings.unlabelled_files(self.unlabelled):
            texts = read_examples(file, **fitting, label_column=None, require_label=False, flag="--unlabelled")
            examples += [dataclasses.replace(e, label=None) for e in texts]
        self._train = examples
        return examples

    def fit_labels(self, train):
        """The teacher's labels, in its order (its logits' columns); a labelled text with another is an error."""
        labels = teachers.teacher_labels(self.teacher_dir)
        labelled = [e for e in train if e.label is not None]
        if self.sets:
            labelsets.check_known(labelled, labels)
            self._prior = multilabel.targets(labelled, labels).mean(axis=0) if labelled else None
        else:
            known = set(labels)
            for e in labelled:
                if e.label not in known:
                    raise UserError(
                        f"--train: {e.source}:{e.line}: the label {e.label!r} is not one of the teacher's "
                        f"({', '.join(labels)}); --label-names maps codes to names as the teacher's run did"
                    )
        if self.class_weights == "balanced" and not labelled:
            raise UserError("--class-weights balanced counts the labels of --train: its texts have none; leave it out")
        if self.class_weights:  # the hard term's, as Classification's (balanced: over the labelled texts)
            self._weights = self._class_weights(labelled, labels)
        return labels

    def featurize(self, examples, encodings, pipeline, labels, data):
        """Classification's windows; with --transfer logits each training window also gets its text's teacher
        logits, with intermediate layers the student's token ids are checked against the teacher's."""
        if self.sets:  # unlabelled texts: target rows of -1
            features = super().featurize(labelsets.filled(examples), encodings, pipeline, labels, data)
            labelsets.mark_unlabelled(examples, features)
        else:
            features = super().featurize(examples, encodings, pipeline, labels, data)
        if examples is self._train and self._transfer is not None:
            self._transfer.teacher_ids = transfers.check_pipeline(
                pipeline, self.teacher_dir, f"--transfer {self.transfer}", "hidden states are compared token by token"
            )
            if os.environ.get("PADDLE_TRAINER_ID", "0") == "0":
                print(self._transfer.describe(), file=sys.stderr)
        elif examples is self._train:
            start = time.perf_counter()
            logits = teachers.soft_labels(self.teacher_dir, examples, data.cache_dir)
            unlabelled = sum(e.label is None for e in examples)
            print(
                f"teacher {self.teacher_dir}: soft labels for {len(examples)} texts ({unlabelled} unlabelled) "
                f"in {time.perf_counter() - start:.1f}s",
                file=sys.stderr,
            )
            for f in features:
                f["teacher_logits"] = logits[f["doc"]]
        return features

    def bind(self, model, teacher=None) -> None:
        """With --transfer hidden or hidden+attention: put the teacher (``teacher``, else --teacher's model)
        beside the student ``model``, checking their shapes, and add the projection to the student. A label-set
        student's new head starts at its labels' log-odds, as Classification's."""
        if self.sets:
            super().bind(model)
        if self.transfer == "logits":
            return
        teacher = transfers.load_teacher(self.teacher_dir) if teacher is None else teacher
        transfers.check_max_len(teacher, self._max_len)
        self._transfer = transfers.Transfer(model, teacher, self.transfer)

    def loss(self, logits, batch):
        """Per window: alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * cross-entropy with its label, or
        T^2 * KL alone for an unlabelled text (label -1); the mean over the batch. With --transfer hidden or
        hidden+attention, plus --transfer-weight times the sum of the transfer losses (``Transfer.losses``); the
        teacher's logits are then those of the same window, from its forward pass in this step."""
        if self._transfer is None:
            return self.soft_loss(logits, batch["teacher_logits"], batch["labels"])
        teacher_logits = self._transfer.teacher_forward(batch)
        parts = self._transfer.losses(batch)
        return self.soft_loss(logits, teacher_logits, batch["labels"]) + self.transfer_weight * sum(parts.values())

    def soft_loss(self, logits, teacher_logits, labels):
        """The loss on the logits (see ``loss``; label sets: ``labelsets.soft_loss``). With --class-weights the hard
        term of a labelled text is multiplied by its label's weight (label sets: ``pos_weight``)."""
        import paddle
        import paddle.nn.functional as F

        if self.sets:
            return labelsets.soft_loss(self, logits, teacher_logits, labels)

        t = self.temperature
        logits = logits.astype("float32")
        student = F.log_softmax(logits / t, axis=-1)
        teacher = F.log_softmax(teacher_logits.astype("float32") / t, axis=-1)
        soft = (teacher.exp() * (teacher - student)).sum(axis=-1) * (t * t)
        labelled = (labels >= 0).astype("float32")
        weights = None if self._weights is None else paddle.to_tensor(self._weights)
        hard = F.cross_entropy(logits, labels.clip(min=0), weight=weights, reduction="none").reshape([-1])
        mixed = labelled * (self.alpha * soft + (1 - self.alpha) * hard) + (1 - labelled) * soft
        return mixed.mean()


def student_task(options: dict):
    """The distillation task of the settings ``options`` (``config.task``): of the class the teacher's task names
    (``teacher.student_class``: a Distillation for a classifier, an NerDistillation for a flat NER tagger, a
    NestedNerDistillation for a nested one), with the settings that class takes (``student_options``)."""
    from ernie_ft.distill.nested import check_kind

    given = options.get("teacher")  # none: Distillation says it is required
    if not given:
        return Distillation(**options)
    directory = teachers.teacher_dir(given)
    student = teachers.student_class(directory, given)
    check_kind(student, teachers.teacher_task(directory), given, options.get("nested"))
    options = {k: v for k, v in options.items() if k != "nested"}
    return student(**student.student_options(directory, options))


def distill(config: RunConfig) -> dict:
    """Train a student as ``config`` says; ``config.task`` holds the Distillation's settings (teacher,
    unlabelled, temperature, alpha, transfer, transfer_weight). Its checkpoints are checkpoints of the teacher's
    task, classify or ner (their run config has no task settings); OUTPUT/distill.json records the teacher and the
    settings. Returns the metrics."""
    from ernie_ft.training.run import check_inputs
    from ernie_ft.training.trainer import train

    task = student_task(config.task)
    teacher = task.teacher_dir
    vocabs.check(config, task.student_vocab)
    inputs = check_inputs(task, config) if task.student_vocab == "used" else None  # its texts cut the vocabulary
    config = vocabs.student_config(config, task, inputs)
    metrics = train(task, dataclasses.replace(config, task=task.saved_options()), inputs)
    if os.environ.get("PADDLE_TRAINER_ID", "0") == "0":  # one process, or the first of a launched job
        record = {
            "teacher": os.path.abspath(teacher),
            "unlabelled": [os.path.abspath(p) for p in settings.unlabelled_files(task.unlabelled)],
            "temperature": task.temperature,
            "alpha": task.alpha,
            "class_weights": task.class_weights if task.takes_class_weights else None,
            "transfer": task.transfer,
            "transfer_weight": task.transfer_weight,
            "student_vocab": task.student_vocab,
        }
        with open(os.path.join(config.train.output, "distill.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False, indent=1)
    return metrics
