"""Nested NER (``python -m ernie_ft.ner --nested``): a span model that keeps nested and overlapping entities.

Every (start, end) pair of tagged units (see ``ner.task.token_units``: a character or word with its
continuation pieces) is scored per entity type by a GlobalPointer (``models.global_pointer``); an entity
is every (type, start <= end) whose probability is above ``--threshold`` (0.5 by default: a logit above 0;
``ernie_ft.thresholds``). One span may carry two types and entities may nest or overlap. Entities stay
character spans of the original text: a span is trained on the first token of its first unit and the first
token of its last unit, and a predicted pair maps back to the first character of the one and the last of
the other. Long texts are read through overlapping windows (``data.windows.token_windows``); a span that
touches a window edge cutting the text is not taken from that window (it may be cut short: the neighbouring
window holds it whole), and a span found by two windows counts once (highest score).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ernie_ft import thresholds
from ernie_ft.data.batching import collate
from ernie_ft.data.windows import on_cut_edge, token_windows
from ernie_ft.errors import UserError
from ernie_ft.evaluation.entities import entity_metrics
from ernie_ft.ner.formats import read_ner, read_ner_records
from ernie_ft.ner.task import NER, continuation_ids, entity_types, note_inexact, token_units

THRESHOLD = thresholds.logit(thresholds.DEFAULT)
"""The logit above which a span is an entity when no ``--threshold`` is given (0)."""


def unit_spans(entities, units, index: dict) -> tuple[list[tuple[int, int, int]], list]:
    """(type index, first token of the first unit, first token of the last unit) of each entity whose type is in
    ``index``, and the entities whose edges fall inside a unit (trained on the units they touch)."""
    starts = [start for _, start, _ in units]
    spans, inexact = [], []
    for start, end, kind in entities:
        first, last = bisect.bisect_right(starts, start) - 1, bisect.bisect_right(starts, end - 1) - 1
        if kind not in index or first < 0 or last < first:
            continue
        if units[first][1] != start or units[last][2] != end:
            inexact.append((start, end, kind))
        spans.append((index[kind], units[first][0], units[last][0]))
    return spans, inexact


def window_candidates(scores: np.ndarray, feature: dict, floor: float = THRESHOLD) -> list[tuple[int, int, int, float]]:
    """(type, first token, last token, score) in document tokens of the spans above the logit ``floor`` in one
    window's scores [heads, n, n], leaving out [CLS]/[SEP] and spans on an edge of the window that cuts the text
    (``on_cut_edge``); at most ``thresholds.MAX_PER_TOKEN`` per token of the window, the best-scoring."""
    start, end = feature["_window"]
    n = scores.shape[-1]
    kinds, rows, cols = np.nonzero(scores > floor)
    keep = (rows >= 1) & (cols <= n - 2) & ~on_cut_edge(rows, cols, (start, end), feature["_n_tokens"])
    kinds, rows, cols = kinds[keep], rows[keep], cols[keep]
    values = scores[kinds, rows, cols]
    if len(values) > thresholds.MAX_PER_TOKEN * n:
        best = np.argsort(-values)[: thresholds.MAX_PER_TOKEN * n]
        kinds, rows, cols, values = kinds[best], rows[best], cols[best], values[best]
    return [(int(k), start + int(i) - 1, start + int(j) - 1, float(v)) for k, i, j, v in zip(kinds, rows, cols, values)]


@dataclass
class NestedNER(thresholds.OneThreshold, NER):
    """Nested and overlapping entities as character spans, scored by a GlobalPointer (``ner --nested``)."""

    nested: bool = True
    binds_model: ClassVar[bool] = False  # the decode reads the logits only: an export runs without the weights
    distillation: ClassVar[str] = "ernie_ft.distill.nested:NestedNerDistillation"
    output_kind: ClassVar[str] = "span_scores"

    def __post_init__(self):
        super().__post_init__()
        if self.crf:
            raise UserError("--crf and --nested: the nested span model has no tags to chain; drop one of them")
        if self.overlapping != "error":
            raise UserError(
                f"--overlapping {self.overlapping} and --nested: the nested model keeps every overlapping entity; "
                "drop --overlapping"
            )

    @property
    def model_class(self):
        return "ernie_ft.models.global_pointer:ErnieGlobalPointer"

    def tune(self, logits, features, examples, labels, data):
        if not (self.tune_thresholds and examples):
            return {}
        gold, types = [e.entities for e in examples], self.types(labels)
        lowest, _ = self.decode(logits, features, examples, labels, min(thresholds.GRID))

        return self.tuned(
            lambda p: entity_metrics(gold, [[e[:3] for e in spans if e[3] > p] for spans in lowest], types)["f1"]
        )

    def types(self, labels: list[str]) -> list[str]:
        return list(labels)

    def read(self, path, data, flag, labelled=True):
        fmt = self.format if labelled else "auto"
        return read_ner(path, flag, fmt, labelled, "nested", data.predictions_as_labels)

    def read_records(self, records, data, flag):
        return read_ner_records(records, flag, labelled=False, overlapping="nested")

    def fit_labels(self, train):
        return entity_types(super().fit_labels(train))  # the flat tagger's types, without its B-/I- tags

    def featurize(self, examples, encodings, pipeline, labels, data):
        index = {kind: i for i, kind in enumerate(labels)}
        continuation = continuation_ids(pipeline)
        features, inexact = [], []
        for doc, (example, encoding) in enumerate(zip(examples, encodings)):
            units = token_units(encoding, continuation)
            spans, loose = unit_spans(example.entities, units, index)
            inexact += [(example, span) for span in loose]
            n_tokens = len(encoding.ids)
            for start, end, ids, types in token_windows(encoding.ids, pipeline, data):
                inside = [(k, i - start + 1, j - start + 1) for k, i, j in spans if start <= i and j < end]
                features.append(
                    {
                        "input_ids": ids,
                        "token_type_ids": types,
                        "doc": doc,
                        "_window": (start, end),
                        "_n_tokens": n_tokens,
                        "_units": units,
                        "_spans": inside,
                        "_heads": len(labels),
                    }
                )
        note_inexact(inexact, "the span model cannot hold them exactly; they are trained on the tokens they touch")
        return features

    def collate(self, features, pipeline, seed, epoch):
        """Padded inputs, each window's token count, and in training the gold spans as 0/1 [B, types, L, L]."""
        batch = collate(features, pipeline.pad_id)
        batch["n_tokens"] = np.array([len(f["input_ids"]) for f in features], dtype="int64")
        if epoch is not None:
            length = batch["input_ids"].shape[1]
            targets = np.zeros((len(features), features[0]["_heads"], length, length), dtype="float32")
            for row, f in enumerate(features):
                for k, i, j in f["_spans"]:
                    targets[row, k, i, j] = 1.0
            batch["targets"] = targets
        return batch

    def summarize(self, outputs, batch):
        """Each window's span scores cut to its tokens, as [n, types, n] (compute_logits cuts rows to n)."""
        scores, lengths = np.asarray(outputs.astype("float32")), np.asarray(batch["n_tokens"])  # paddle or numpy
        return [scores[row, :, :n, :n].transpose(1, 0, 2) for row, n in enumerate(lengths)]

    def loss(self, logits, batch):
        from ernie_ft.models.global_pointer import global_pointer_loss

        return global_pointer_loss(logits, batch["targets"])

    def decode(self, logits, features, examples, labels, threshold=None) -> tuple[list[list[tuple]], int]:
        """Predicted (start, end, type, score) per example, sorted, each span and type once; nothing is repaired.

        The score is the sigmoid of the span's GlobalPointer logit, above ``threshold`` (a probability; None: the
        task's ``threshold``) for every predicted entity.
        """
        floor = thresholds.logit(thresholds.probability(self.threshold if threshold is None else threshold))
        found: list[dict] = [{} for _ in examples]
        for feature, rows in zip(features, logits):
            first_token = {token: u for u, (token, _, _) in enumerate(feature["_units"])}
            units, seen = feature["_units"], found[feature["doc"]]
            for kind, i, j, score in window_candidates(np.asarray(rows).transpose(1, 0, 2), feature, floor):
                a, b = first_token.get(i), first_token.get(j)
                if a is None or b is None:  # a continuation piece or a repeated character: no unit starts there
                    continue
                key = (units[a][1], units[b][2], labels[kind])
                seen[key] = max(seen.get(key, -np.inf), score)
        predictions = [
            sorted((s, e, kind, float(1 / (1 + np.exp(-score)))) for (s, e, kind), score in spans.items())
            for spans in found
        ]
        return predictions, 0
