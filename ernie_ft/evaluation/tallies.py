"""Metrics kept chunk by chunk (``TaskHooks.tally``): what ``evaluate`` holds of a labelled file too large for memory,
only what the metrics need, so that its metrics and report equal those of the file scored whole."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable


class ClassTally:
    """One label per text: the gold and the predicted label of each text; ``predicted(logits, features, examples)``
    gives a chunk's predicted labels as the task's ``evaluate`` decides them."""

    def __init__(self, predicted: Callable, labels: list[str]):
        self.predicted_of, self.labels = predicted, labels
        self.gold: list[str] = []
        self.predicted: list[str] = []

    @property
    def count(self) -> int:
        return len(self.gold)

    def add(self, logits, features: list[dict], examples: list) -> None:
        self.gold += [e.label for e in examples]
        self.predicted += list(self.predicted_of(logits, features, examples))

    def metrics(self) -> dict:
        from ernie_ft.evaluation.classification import classification_metrics

        return classification_metrics(self.gold, self.predicted, self.labels)

    def report(self, out_dir: str) -> str:
        from ernie_ft.evaluation.classification import classification_report

        return classification_report(self.gold, self.predicted, self.labels, out_dir)

    def discard(self) -> None:
        """Nothing written yet."""


class SetTally:
    """Label sets (several labels per text, or label paths): each text's gold labels and its decided row of the
    labels (bool, a byte a label); ``decide(logits, features, examples)`` gives a chunk's rows, ``metrics_of(gold,
    rows)`` and ``report_of(metrics, out_dir)`` score and show them all as the task does a whole file."""

    def __init__(self, decide: Callable, metrics_of: Callable, report_of: Callable):
        self.decide, self.metrics_of, self.report_of = decide, metrics_of, report_of
        self.gold: list[tuple] = []
        self.rows: list = []

    @property
    def count(self) -> int:
        return len(self.gold)

    def add(self, logits, features: list[dict], examples: list) -> None:
        self.gold += [e.label for e in examples]
        self.rows.append(self.decide(logits, features, examples))

    def metrics(self) -> dict:
        import numpy as np

        return self.metrics_of(self.gold, np.concatenate(self.rows))

    def report(self, out_dir: str) -> str:
        return self.report_of(self.metrics(), out_dir)

    def discard(self) -> None:
        """Nothing written yet."""


class CountTally:
    """Metrics that are sums over texts: ``counts.add(examples, decoded)`` per chunk, where ``decode(logits,
    features, examples)`` gives the chunk's decoded outputs; ``metrics_of(counts)`` and ``report_of(counts)`` the
    metrics and the printed report."""

    def __init__(self, counts, decode: Callable, metrics_of: Callable, report_of: Callable):
        self.counts, self.decode, self.metrics_of, self.report_of = counts, decode, metrics_of, report_of
        self.count = 0

    def add(self, logits, features: list[dict], examples: list) -> None:
        self.counts.add(examples, self.decode(logits, features, examples))
        self.count += len(examples)

    def metrics(self) -> dict:
        return self.metrics_of(self.counts)

    def report(self, out_dir: str) -> str:
        return self.report_of(self.counts)

    def discard(self) -> None:
        """Nothing written yet."""


class EntityTally:
    """Entities: their counts per type (``EntityCounts``), the mistakes of each text written to errors.txt in
    ``out_dir`` as they are found (errors.txt.partial until the report), and how many predicted tags the decode
    repaired; ``decode(logits, features, examples)`` gives a chunk's (spans per example, repaired) and ``types`` the
    entity types the metrics list."""

    def __init__(self, decode: Callable, types: list[str], out_dir: str):
        from ernie_ft.evaluation.entities import EntityCounts

        self.decode, self.types = decode, types
        self.counts, self.kinds, self.repaired, self.count = EntityCounts(), Counter(), 0, 0
        self.path, self.errors = os.path.join(out_dir, "errors.txt"), None

    def add(self, logits, features: list[dict], examples: list) -> None:
        from ernie_ft.evaluation.entities import ERRORS_HEADER, entity_errors, error_block

        if self.errors is None:  # opened with the first chunk: a tally made and never used writes nothing
            self.errors = open(self.path + ".partial", "w", encoding="utf-8")
            self.errors.write(ERRORS_HEADER)
        predicted, repaired = self.decode(logits, features, examples)
        self.repaired += repaired
        self.count += len(examples)
        for example, spans in zip(examples, predicted):
            spans = [p[:3] for p in spans]
            self.counts.add(example.entities, spans)
            errors = entity_errors(example.text, example.entities, spans)
            if errors:
                self.kinds.update(kind for kind, _ in errors)
                self.errors.write(error_block(example.source, example.line, example.text, errors))

    def metrics(self) -> dict:
        return self.counts.metrics(self.types)

    def report(self, out_dir: str) -> str:
        from ernie_ft.evaluation.entities import entity_report

        self.errors.close()
        os.replace(self.path + ".partial", self.path)
        return entity_report(self.metrics(), self.kinds, self.path, self.repaired)

    def discard(self) -> None:
        """Remove the unfinished errors.txt.partial of a run that stopped."""
        if self.errors is not None:
            self.errors.close()
            if os.path.exists(self.path + ".partial"):
                os.remove(self.path + ".partial")
