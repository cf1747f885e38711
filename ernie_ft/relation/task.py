"""Relation extraction (entities and typed relations between them): ``python -m ernie_ft.relation``.

GPLinker: an entity GlobalPointer (subject, object) and per relation class a head-head and a tail-tail pointer
(``relation.model``); decoded as ``relation.decoding`` says. A relation class is a predicate with the subject's and
object's types (``作曲 (歌曲→人物)``), so a prediction carries its entities' types.

Long texts go through overlapping windows of ``--max-len`` tokens. An entity is a training target in every window
that holds it whole, a relation in every window that holds both its ends; a relation whose subject and object lie in
no common window cannot be learnt or predicted: ``featurize`` counts them on a ``note:`` line and they are scored as
misses.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft import thresholds
from ernie_ft.data.windows import token_windows
from ernie_ft.dev_split import split_dev
from ernie_ft.errors import UserError
from ernie_ft.label_set import check_known_labels, warn_rare_labels
from ernie_ft.relation import decoding
from ernie_ft.relation.formats import check_schema, parse_label, read_relation_records, read_relations, read_schema
from ernie_ft.task import TaskHooks


def token_span(offsets: list, start: int, end: int):
    """(first token, last token) of the characters [start, end): the first token ending after ``start`` and the
    last starting before ``end``; None when no token lies on them."""
    first = next((t for t, (a, b) in enumerate(offsets) if b > start and b > a), None)
    last = next(
        (t for t in reversed(range(len(offsets))) if offsets[t][0] < end and offsets[t][1] > offsets[t][0]), None
    )
    if first is None or last is None or last < first or offsets[first][0] >= end:
        return None
    return first, last


def window_targets(triples: list, window: tuple, n_classes: int) -> tuple[list, set]:
    """(targets (head, i, j) in window positions, [CLS] being 0; indices of triples held whole) of one window;
    ``triples`` are (subject tokens, class or None, object tokens)."""
    start, end = window
    inside = lambda span: span is not None and start <= span[0] and span[1] < end  # noqa: E731
    targets, whole = set(), set()
    for k, (s, c, o) in enumerate(triples):
        for head, span in ((0, s), (1, o)):
            if inside(span):
                targets.add((head, span[0] - start + 1, span[1] - start + 1))
        if inside(s) and inside(o) and c is not None:
            whole.add(k)
            targets.add((2 + c, s[0] - start + 1, o[0] - start + 1))
            targets.add((2 + n_classes + c, s[1] - start + 1, o[1] - start + 1))
    return sorted(targets), whole


def candidate_pairs(targets: list, length: int) -> np.ndarray:
    """[2, L, L] booleans: the head-head cells (first token, first token) and tail-tail cells (last token, last
    token) of every ordered pair of the window's gold entities, subjects and objects alike (gold triples' cells
    among them).

    Decoding reads a pointer only where the entity pointer found a subject and an object, so the pointers' loss is
    taken on these cells alone (and the model's training output holds only them: ``training_targets``). Over all
    L x L cells (GPLinker's loss) a scratch model pushed every pointer score far below 0 within an epoch, gold pairs
    included (DuIE dev, after 2 epochs: gold head-head logits median -9.5, the highest cell of a window -6.4): no
    triple was ever decoded.
    """
    spans = [(i, j) for h, i, j in targets if h < 2]
    pairs = np.zeros((2, length, length), dtype=bool)
    for a in spans:
        for b in spans:
            pairs[0, a[0], b[0]] = pairs[1, a[1], b[1]] = True
    return pairs


def training_targets(windows: list, length: int, heads: int) -> dict:
    """A training batch's targets from each window's (head, i, j) targets: ``entity_targets`` [B, 2, L, L] (0/1),
    ``pair_index`` [B, 2, K, 2] (the head-head, then tail-tail cells of ``candidate_pairs``, padded with (0, 0)),
    ``pair_valid`` [B, 2, K] (1 on a cell, 0 on padding) and ``pair_targets`` [B, heads - 2, K] (class c's
    head-head target at row c, its tail-tail target at row C + c)."""
    cells = [[np.argwhere(p) for p in candidate_pairs(targets, length)] for targets in windows]
    width = max([1] + [len(c) for row in cells for c in row])
    entity_targets = np.zeros((len(windows), 2, length, length), dtype="float32")
    pair_index = np.zeros((len(windows), 2, width, 2), dtype="int64")
    pair_valid = np.zeros((len(windows), 2, width), dtype="float32")
    pair_targets = np.zeros((len(windows), heads - 2, width), dtype="float32")
    classes = (heads - 2) // 2
    for row, (targets, (head_cells, tail_cells)) in enumerate(zip(windows, cells)):
        where = [{}, {}]
        for kind, found in enumerate((head_cells, tail_cells)):
            pair_index[row, kind, : len(found)] = found
            pair_valid[row, kind, : len(found)] = 1.0
            where[kind] = {(int(i), int(j)): k for k, (i, j) in enumerate(found)}
        for h, i, j in targets:
            if h < 2:
                entity_targets[row, h, i, j] = 1.0
            else:
                pair_targets[row, h - 2, where[(h - 2) // classes][(i, j)]] = 1.0
    return {
        "entity_targets": entity_targets,
        "pair_index": pair_index,
        "pair_valid": pair_valid,
        "pair_targets": pair_targets,
    }


@dataclass
class Relation(thresholds.OneThreshold, TaskHooks):
    """Subject-predicate-object triples with their entities as character spans (GPLinker pointers)."""

    name: str = "relation"
    head: str = "pointer"
    metric: str = "triple_f1"
    model_class: ClassVar[str] = "ernie_ft.relation.model:ErnieForRelationExtraction"
    input_fields: ClassVar[tuple] = (("text",), ())
    reads_records_apart: ClassVar[bool] = True
    schema: str = ""
    """DuIE's schema file (a JSON array or JSON Lines of {predicate, subject_type, object_type}): a training triple
    outside it is an error, and decoding keeps only the predicates and types it allows."""
    threshold: Optional[float] = None
    """The probability (0 to 1) above which an entity and each of a relation's two pointers count; default 0.5
    (GPLinker's rule, a logit above 0). Lower finds more triples at a lower precision."""
    tune_thresholds: bool = False
    """At each dev evaluation (of ``--dev``, or the ``--dev-split`` part of train) choose the threshold with the best
    dev triple F1; the best checkpoint keeps it (``threshold``) for the test score, predict, evaluate and serve."""
    unused_data_settings: ClassVar[dict] = {
        "label_names": "predicates are named in the data",
        **dict.fromkeys(
            ("text_column", "text_pair_column", "label_column"),
            "relation files are DuIE JSON Lines, relation JSONL or annotation exports (see docs/relation.md)",
        ),
        "window_pooling": "triples are merged over windows, each with its best score",
        **dict.fromkeys(("header", "sheet"), "relation files are JSON, not tables"),
    }

    def __post_init__(self):
        self.threshold = thresholds.check(self.threshold)
        self._schema = read_schema(self.schema) if self.schema else None
        self._heads = 2
        self._lowest = 1.0  # keep_scores_above: none below the threshold

    @classmethod
    def recorded_options(cls, options, run=None):
        """A checkpoint of ernie_ft before probability thresholds recorded ``threshold`` as a logit (0: a probability
        of 0.5) and ``tune_threshold``; it decides as before with the probability of that logit. Its age shows in
        ``tune_threshold``, or in a run without ``data.predictions_as_labels``, a setting of the next change."""
        data = (run or {}).get("data") or {}
        if "tune_threshold" not in options and (run is None or "predictions_as_labels" in data):
            return options
        options = dict(options)
        if "tune_threshold" in options:
            options["tune_thresholds"] = options.pop("tune_threshold")
        if options.get("threshold") is not None:
            options["threshold"] = thresholds.from_logit(float(options["threshold"]))
        return options

    def keep_scores_above(self, probability):
        self._lowest = thresholds.check(probability)

    @property
    def exact_spans(self) -> bool:
        return True

    def read(self, path, data, flag, labelled=True):
        examples = read_relations(path, flag, labelled, data.predictions_as_labels)
        if labelled and self._schema is not None:
            check_schema(examples, self._schema, self.schema, flag)
        return examples

    def read_records(self, records, data, flag):
        return read_relation_records(records, flag)

    def held_out(self, train, data):
        return split_dev(train, data.dev_split, lambda e: {c for _, c, _ in e.triples})

    def fit_labels(self, train):
        labels = sorted({c for e in train for _, c, _ in e.triples})
        if not labels:
            raise UserError(
                f"{train[0].source}: the training file has no triple placed in its text; see docs/relation.md "
                "for the formats"
            )
        warn_rare_labels(Counter(c for e in train for _, c, _ in e.triples), train[0].source, "relation class")
        return labels

    def check_labels(self, examples, labels, data, flag):
        known = sorted({parse_label(c)[0] for c in labels})
        check_known_labels(
            examples, lambda e: [p for _, p, _ in e.gold], known, data.allow_new_labels, flag, "predicate"
        )
        types = sorted({t for c in labels for t in parse_label(c)[1:] if t})
        if types:  # a training file without types learns none, and a triple without types is no error
            check_known_labels(
                examples,
                lambda e: [t for s, _, o in e.triples for t in (s[2], o[2]) if t],
                types,
                data.allow_new_labels,
                flag,
                "entity type",
            )

    def texts(self, examples):
        return [e.text for e in examples]

    def featurize(self, examples, encodings, pipeline, labels, data):
        index = {c: i for i, c in enumerate(labels)}
        self._heads = 2 + 2 * len(labels)
        features, apart, lost, widened = [], [], 0, []
        for doc, (example, encoding) in enumerate(zip(examples, encodings)):
            offsets = list(encoding.offsets)
            triples = [
                (token_span(offsets, s[0], s[1]), index.get(c), token_span(offsets, o[0], o[1]))
                for s, c, o in example.triples
            ]
            lost += sum(s is None or o is None for s, _, o in triples)
            widened += [
                (example, chars)
                for (s, _, o), (s_chars, _, o_chars) in zip(triples, example.triples)
                for span, chars in ((s, s_chars), (o, o_chars))
                if span is not None and (offsets[span[0]][0], offsets[span[1]][1]) != tuple(chars[:2])
            ]
            held = set()
            for start, end, ids, types in token_windows(encoding.ids, pipeline, data):
                window = (start, end)
                targets, whole = window_targets(triples, window, len(labels))
                held |= whole
                features.append(
                    {
                        "input_ids": ids,
                        "token_type_ids": types,
                        "doc": doc,
                        "_window": window,
                        "_offsets": offsets,
                        "_targets": targets,
                    }
                )
            apart += [(example, k) for k, (s, c, o) in enumerate(triples) if k not in held and None not in (s, c, o)]
        self._note(examples, apart, lost, data.max_len)
        if widened:
            unique = list(dict.fromkeys((e.line, e.text, tuple(c[:2])) for e, c in widened))
            shown = "; ".join(f"line {line}: {text[s:t]!r} [{s}, {t})" for line, text, (s, t) in unique[:5])
            print(
                f"note: {examples[0].source}: {len(unique)} entities start or end inside a token, so they are "
                f"learnt and predicted as the whole tokens they touch and count as errors when scored ({shown})",
                file=sys.stderr,
            )
        return features

    @staticmethod
    def _note(examples, apart, lost, max_len) -> None:
        if apart:
            shown = "; ".join(f"line {e.line}: {e.triples[k][1]}" for e, k in apart[:3])
            print(
                f"note: {examples[0].source}: relations whose subject and object lie in no common window of --max-len "
                f"{max_len} tokens: {len(apart)}; they cannot be learnt or predicted, and count as misses ({shown})",
                file=sys.stderr,
            )
        if lost:
            print(
                f"note: {examples[0].source}: relations with an end on characters without a token: {lost} (not learnt)",
                file=sys.stderr,
            )

    def collate(self, features, pipeline, seed, epoch):
        from ernie_ft.data.batching import pad

        batch = {
            "input_ids": pad([f["input_ids"] for f in features], pipeline.pad_id),
            "token_type_ids": pad([f["token_type_ids"] for f in features], 0),
            "n_tokens": np.array([len(f["input_ids"]) for f in features], dtype="int64"),  # summarize's caps
        }
        if epoch is not None:  # training: the entities' dense 0/1 targets, the pointers' cells and their targets
            batch.update(training_targets([f["_targets"] for f in features], batch["input_ids"].shape[1], self._heads))
        return batch

    def loss(self, logits, batch):
        from ernie_ft.models.global_pointer import MASKED, global_pointer_loss

        # GPLinker's loss (summed over heads, averaged over rows) with the pointers scored on the cells decoding reads,
        # pairs of the window's gold entities: the model's training output holds those cells alone (training_targets)
        entities, pointers = logits["entities"], logits["pointers"]  # [B, 2, L, L], [B, 2C, K]
        shape = pointers.shape
        valid = batch["pair_valid"].astype("float32").unsqueeze(2)  # [B, 2 (head, tail), 1, K]
        pointers = pointers.reshape([shape[0], 2, -1, shape[2]]) * valid + MASKED * (1 - valid)
        pointers = pointers.reshape(shape)
        return global_pointer_loss(entities, batch["entity_targets"], sum_heads=True) + global_pointer_loss(
            pointers, batch["pair_targets"], sum_heads=True
        )

    def summarize(self, outputs, batch):
        """The cells a decode may read: above the threshold (in a tuning run, above the lowest it may choose), at
        most ``thresholds.MAX_PER_TOKEN`` per token of the window (its own tokens, not the batch's padded length) per
        entity role and pointer kind."""
        lowest = min(thresholds.GRID) if self.tune_thresholds else self._lowest
        floor = thresholds.logit(min(lowest, thresholds.probability(self.threshold)))
        lengths = batch.get("n_tokens")  # collate's; without, the padded length caps every input
        lengths = lengths.numpy() if hasattr(lengths, "numpy") else lengths
        outputs = outputs.astype("float32")  # a Paddle tensor, or ONNX Runtime's numpy array
        outputs = outputs.numpy() if hasattr(outputs, "numpy") else outputs
        return decoding.summary_rows(outputs, floor, thresholds.MAX_PER_TOKEN, lengths)

    def decode(self, rows, features, examples, labels, threshold=None):
        """``decoding.decode`` at the probability ``threshold`` (None: the task's)."""
        p = thresholds.probability(self.threshold if threshold is None else threshold)
        return decoding.decode(rows, features, len(examples), labels, self._schema, thresholds.logit(p))

    def tune(self, logits, features, examples, labels, data):
        if not (self.tune_thresholds and examples):
            return {}
        lowest = self.decode(logits, features, examples, labels, min(thresholds.GRID))

        return self.tuned(lambda p: decoding.relation_metrics(examples, decoding.above(lowest, p), labels)["triple_f1"])

    def evaluate(self, logits, features, examples, labels, data):
        metrics = decoding.relation_metrics(examples, self.decode(logits, features, examples, labels), labels)
        metrics.pop("per_predicate")
        return metrics

    def report(self, logits, features, examples, labels, data, out_dir):
        decoded = self.decode(logits, features, examples, labels)
        return decoding.predicate_table(decoding.relation_metrics(examples, decoded, labels))

    def tally(self, labels, data, out_dir):
        """The triple and entity counts kept chunk by chunk."""
        from ernie_ft.evaluation.tallies import CountTally

        def metrics(counts: decoding.TripleCounts) -> dict:
            return {k: v for k, v in counts.metrics().items() if k != "per_predicate"}

        return CountTally(
            decoding.TripleCounts(labels),
            lambda logits, feats, examples: self.decode(logits, feats, examples, labels),
            metrics,
            lambda counts: decoding.predicate_table(counts.metrics()),
        )

    def predict(self, logits, features, examples, labels, data):
        return [
            record(e.text, entities, triples, labels)
            for e, (entities, triples) in zip(examples, self.decode(logits, features, examples, labels))
        ]


def record(text: str, entities: dict, triples: dict, labels: list[str]) -> dict:
    """The prediction of one text: its triples (best first) and its entities (in text order)."""

    def entity(span, type_: str) -> dict:
        return {"text": text[span[0] : span[1]], "start": span[0], "end": span[1], "type": type_}

    relations = []
    for (s, c, o), score in sorted(triples.items(), key=lambda kv: (-kv[1], kv[0])):
        predicate, s_type, o_type = parse_label(labels[c])
        pair = {"subject": entity(s, s_type), "predicate": predicate, "object": entity(o, o_type)}
        relations.append({**pair, "score": round(score, 4)})
    typed = {}
    for r in relations:
        for role in decoding.ROLES:
            typed.setdefault((r[role]["start"], r[role]["end"], role), r[role]["type"])
    return {
        "text": text,
        "relations": relations,
        "entities": [
            {**entity((s, t), typed.get((s, t, role), "")), "role": role, "score": round(score, 4)}
            for (s, t, role), score in sorted(entities.items())
        ],
    }
