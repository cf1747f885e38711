"""Knowledge distillation for classification: a student learns a trained classifier's soft labels.

The teacher's logits for every training text (labelled or not) are computed once, before the first step, and
travel with the student's windows as the target ``teacher_logits``; the trainer is the usual one (resume,
parallelism, logs, curves, dev evaluation), and its checkpoints are ordinary classification checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

from ernie_ft.classify.task import Classification
from ernie_ft.config import RunConfig
from ernie_ft.data.readers import TrainedColumn, read_examples
from ernie_ft.distill import teacher as teachers
from ernie_ft.errors import UserError


@dataclass
class Distillation(Classification):
    """Classification whose loss mixes the teacher's soft labels with the hard ones; it saves as ``classify``."""

    teacher: Optional[str] = None
    """The teacher: the output directory of a classification run (python -m ernie_ft classify) or its best/."""
    unlabelled: Optional[str] = None
    """Texts without labels that the student learns from the teacher alone: .txt (one text per line), TSV, CSV or
    JSONL, read with the run's columns where the file has them."""
    temperature: float = 2.0
    """Softmax temperature of the soft labels (teacher and student); higher spreads the teacher's probabilities."""
    alpha: float = 0.5
    """Weight of the soft loss on labelled texts (the hard labels' cross-entropy gets 1 - alpha); 1 learns from
    the teacher alone. Unlabelled texts have the soft loss only."""
    _train: Optional[list] = dataclasses.field(default=None, init=False, repr=False)
    """The training examples (``read`` of --train): the split whose windows get the teacher's logits."""

    def __post_init__(self):
        if not self.teacher:
            raise UserError("--teacher is required: the output directory of a classification run to distil")
        if not self.temperature > 0:
            raise UserError(f"--temperature must be greater than 0, not {self.temperature}")
        if not 0 <= self.alpha <= 1:
            raise UserError(f"--alpha is a weight between 0 and 1, not {self.alpha}")

    @functools.cached_property
    def teacher_dir(self) -> str:
        """The teacher's checkpoint directory (checked: a classification checkpoint)."""
        return teachers.teacher_dir(self.teacher)

    def unlabelled_files(self) -> list[str]:
        return [p for p in (self.unlabelled or "").split(os.pathsep) if p]

    def read(self, path, data, flag, labelled=True):
        """The file's examples; for --train, followed by every --unlabelled file's texts (label None)."""
        examples = super().read(path, data, flag, labelled)
        if flag != "--train":
            return examples
        columns = {"text_column": data.text_column, "pair_column": data.text_pair_column}
        fitting = {k: TrainedColumn(v) if v else None for k, v in columns.items()}  # the file may be a .txt
        for file in self.unlabelled_files():
            texts = read_examples(file, **fitting, label_column=None, require_label=False, flag="--unlabelled")
            examples += [dataclasses.replace(e, label=None) for e in texts]
        self._train = examples
        return examples

    def fit_labels(self, train):
        """The teacher's labels, in its order (its logits' columns); a labelled text with another is an error."""
        labels = teachers.teacher_labels(self.teacher_dir)
        known = set(labels)
        for e in train:
            if e.label is not None and e.label not in known:
                raise UserError(
                    f"--train: {e.source}:{e.line}: the label {e.label!r} is not one of the teacher's "
                    f"({', '.join(labels)}); --label-names maps codes to names as the teacher's run did"
                )
        return labels

    def featurize(self, examples, encodings, pipeline, labels, data):
        """Classification's windows; each training window also gets its text's teacher logits."""
        features = super().featurize(examples, encodings, pipeline, labels, data)
        if examples is self._train:
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

    def loss(self, logits, batch):
        """Per window: alpha * T^2 * KL(teacher_T || student_T) + (1 - alpha) * cross-entropy with its label, or
        T^2 * KL alone for an unlabelled text (label -1); the mean over the batch."""
        import paddle.nn.functional as F

        t = self.temperature
        logits = logits.astype("float32")
        student = F.log_softmax(logits / t, axis=-1)
        teacher = F.log_softmax(batch["teacher_logits"] / t, axis=-1)
        soft = (teacher.exp() * (teacher - student)).sum(axis=-1) * (t * t)
        labels = batch["labels"]
        labelled = (labels >= 0).astype("float32")
        hard = F.cross_entropy(logits, labels.clip(min=0), reduction="none").reshape([-1])
        mixed = labelled * (self.alpha * soft + (1 - self.alpha) * hard) + (1 - labelled) * soft
        return mixed.mean()


def distill(config: RunConfig) -> dict:
    """Train a student as ``config`` says; ``config.task`` holds the Distillation's settings (teacher,
    unlabelled, temperature, alpha). Its checkpoints are classification checkpoints (their run config has no
    task settings); OUTPUT/distill.json records the teacher and the settings. Returns the metrics."""
    from ernie_ft.training.trainer import train

    task = Distillation(**config.task)
    teacher = task.teacher_dir
    metrics = train(task, dataclasses.replace(config, task={}))
    if os.environ.get("PADDLE_TRAINER_ID", "0") == "0":  # one process, or the first of a launched job
        record = {
            "teacher": os.path.abspath(teacher),
            "unlabelled": [os.path.abspath(p) for p in task.unlabelled_files()],
            "temperature": task.temperature,
            "alpha": task.alpha,
        }
        with open(os.path.join(config.train.output, "distill.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False, indent=1)
    return metrics
