"""GPLinker's decode and the relation metrics.

Decode (per window): the entity pointer's spans scoring > t are the subjects (head 0) and objects (head 1); for each
relation class c and each subject-object pair, the triple is kept when both its head-head score (subject's first
token, object's first token; head 2 + c) and its tail-tail score (last tokens; head 2 + C + c) are > t. The
threshold t is the logit of ``--threshold`` (a probability, 0.5 by default: t = 0, GPLinker's rule), or of the one
``--tune-thresholds`` chose. Its score is the sigmoid of the smallest of the four logits (subject, object, head-head,
tail-tail). An entity on an edge of a window that cuts the text is not taken from that window (it may be cut short;
the neighbouring window holds it whole: ``data.windows.on_cut_edge``, as nested NER does). Windows' triples are
merged per text, each keeping its best score; a triple whose two ends lie in no common window is never found. A
window keeps at most ``thresholds.MAX_PER_TOKEN`` entity cells per role and pointer cells per kind per token, the
best-scoring: an untrained model scores half of all cells above 0, which would otherwise take minutes and gigabytes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Optional

import numpy as np

from ernie_ft.data.windows import on_cut_edge
from ernie_ft.relation.formats import allowed, parse_label

ROLES = ("subject", "object")


def best_cells(cells: np.ndarray, limit: Optional[int]) -> np.ndarray:
    """The ``limit`` highest-scoring of ``cells`` (rows ending in their score), all of them when there are fewer or
    ``limit`` is None; in their order."""
    if limit is None or len(cells) <= limit:
        return cells
    return cells[np.sort(np.argpartition(-cells[:, -1], limit - 1)[:limit])]


def _capped(cells: np.ndarray, limit: Optional[int]) -> np.ndarray:
    """``best_cells`` of each head (column 0) of (head, i, j, logit) rows, sorted (head, i, j)."""
    if limit is None:
        return cells
    parts = [best_cells(cells[cells[:, 0] == h], limit) for h in np.unique(cells[:, 0])]
    return np.concatenate(parts) if parts else cells


def sparse_rows(logits: np.ndarray, floor: float = 0.0, limit: Optional[int] = None) -> list[np.ndarray]:
    """Per batch row of [B, heads, L, L] logits: the cells above ``floor`` as float32 rows (head, i, j, logit);
    with ``limit`` at most that many per head (the best-scoring)."""
    rows = []
    for x in logits:
        cells = np.argwhere(x > floor)
        cells = np.concatenate([cells.astype("float32"), x[tuple(cells.T)][:, None]], axis=1)
        rows.append(_capped(cells, limit))
    return rows


def packed_rows(packed: np.ndarray, floor: float = 0.0, limit: Optional[int] = None) -> list[np.ndarray]:
    """``sparse_rows`` of the model's packed output [B, L, 4L + 4C] (``relation.model``): per batch row the entity
    cells above ``floor``, and the pointer cells above it that ``decode_window`` can read, those of (subject,
    object) pairs among those entities: head-head cells at their first tokens, tail-tail cells at their last.
    Each pointer score is summed here as the dense scores sum it, (shared + end bias) + start bias in float32, for
    these pairs alone; rows are sorted as ``sparse_rows`` sorts them (head, i, j). With ``limit``: at most that many
    entity cells per role (the best-scoring; pairs are formed among those) and pointer cells per kind (head-head,
    tail-tail)."""
    length = packed.shape[1]
    classes = (packed.shape[2] - 4 * length) // 4
    rows = []
    for x in packed:
        entities = x[:, : 2 * length].reshape(length, 2, length)  # [i, role, j]
        found = np.argwhere(entities > floor)  # (i, role, j)
        cells = np.column_stack([found[:, [1, 0, 2]], entities[tuple(found.T)]]).astype("float32")
        cells = _capped(cells, limit)
        parts = [cells]
        subjects, objects = cells[cells[:, 0] == 0, 1:3].astype(int), cells[cells[:, 0] == 1, 1:3].astype(int)
        for kind, token in ((0, 0), (1, 1)):  # head-head: first tokens (i); tail-tail: last tokens (j)
            s, o = np.unique(subjects[:, token]), np.unique(objects[:, token])
            shared = x[:, (2 + kind) * length : (3 + kind) * length]
            start = 4 * length + 2 * classes * kind
            bias = x[:, start : start + 2 * classes].reshape(length, classes, 2)  # (end, start) per class
            scores = (shared[np.ix_(s, o)][:, :, None] + bias[o, :, 0][None]) + bias[s, :, 1][:, None]  # [S, O, C]
            a, b, c = np.nonzero(scores > floor)
            found = np.column_stack([2 + kind * classes + c, s[a], o[b], scores[a, b, c]]).astype("float32")
            parts.append(best_cells(found, limit))
        cells = np.concatenate(parts).astype("float32")
        rows.append(cells[np.lexsort(cells[:, 2::-1].T)])
    return rows


def summary_rows(outputs: np.ndarray, floor: float = 0.0, per_token: Optional[int] = None, lengths=None) -> list:
    """The cells above ``floor`` of a batch's outputs: packed [B, L, 4L + 4C] (``packed_rows``) or, from an export
    of the previous version, dense [B, 2 + 2C, L, L] (``sparse_rows``); with ``per_token``, at most that many per
    token of each input (``lengths``: its tokens with [CLS] and [SEP]; without, the padded length L) per entity role
    and pointer kind. Capped by each input's own length, an input keeps the same cells whatever it is batched with."""
    length = outputs.shape[-1] if outputs.ndim == 4 else outputs.shape[1]
    lengths = [length] * len(outputs) if lengths is None else [int(n) for n in lengths]
    rows = sparse_rows if outputs.ndim == 4 else packed_rows
    return [
        rows(outputs[i : i + 1], floor, None if per_token is None else per_token * n)[0] for i, n in enumerate(lengths)
    ]


def _sigmoid(x: float) -> float:
    return float(1 / (1 + np.exp(-x)))


def decode_window(cells: np.ndarray, n_classes: int, keep) -> tuple[dict, dict]:
    """({(role, i, j): logit}, {((sh, st), c, (oh, ot)): logit}) of one window's positive cells (token positions
    in the window); ``keep(c)`` says whether class c may be predicted (the schema)."""
    entities, pointers = {}, defaultdict(dict)
    for h, i, j, logit in cells:
        h, i, j = int(h), int(i), int(j)
        if h < 2:
            entities[(h, i, j)] = float(logit)
        else:
            pointers[h - 2][(i, j)] = float(logit)
    starting = [defaultdict(list), defaultdict(list)]  # per role: first token -> [(last token, logit)]
    for (role, i, j), logit in entities.items():
        starting[role][i].append((j, logit))
    triples = {}
    for c in range(n_classes):  # from the head-head cells found: each pair of entities starting there
        heads, tails = pointers.get(c), pointers.get(n_classes + c)
        if not heads or not tails or not keep(c):
            continue
        for (sh, oh), head_logit in heads.items():
            for st, s_logit in starting[0].get(sh, ()):
                for ot, o_logit in starting[1].get(oh, ()):
                    if (st, ot) in tails:
                        triples[((sh, st), c, (oh, ot))] = min(s_logit, o_logit, head_logit, tails[(st, ot)])
    return entities, triples


def decode(
    rows: list, features: list[dict], n_docs: int, labels: list[str], schema=None, threshold: float = 0.0
) -> list[tuple[dict, dict]]:
    """Per text: ({(start, end, role): score}, {((s, e), class, (s, e)): score}) in characters, merged over its
    windows (the best score of each), from the cells of ``rows`` scoring above ``threshold``."""
    keep = [allowed(schema, label) for label in labels]
    out = [({}, {}) for _ in range(n_docs)]
    for cells, f in zip(rows, features):
        start, end = f["_window"]
        offsets = f["_offsets"]

        def chars(i: int, j: int, offsets=offsets, start=start):  # window positions ([CLS] is 0) -> characters
            return offsets[start + i - 1][0], offsets[start + j - 1][1]

        inside = (cells[:, 1:3] >= 1).all(axis=1) & (cells[:, 1:3] <= end - start).all(axis=1)
        cut = (cells[:, 0] < 2) & on_cut_edge(cells[:, 1], cells[:, 2], (start, end), len(offsets))
        cells = cells[inside & ~cut & (cells[:, 3] > threshold)]
        entities, triples = decode_window(cells, len(labels), keep.__getitem__)
        doc_entities, doc_triples = out[f["doc"]]
        for (role, i, j), logit in entities.items():
            key = (*chars(i, j), ROLES[role])
            doc_entities[key] = max(doc_entities.get(key, 0.0), _sigmoid(logit))
        for ((sh, st), c, (oh, ot)), logit in triples.items():
            key = (chars(sh, st), c, chars(oh, ot))
            doc_triples[key] = max(doc_triples.get(key, 0.0), _sigmoid(logit))
    return out


def above(decoded: list[tuple[dict, dict]], probability: float) -> list[tuple[dict, dict]]:
    """``decode``'s answer at a higher threshold: the entities and triples scoring above ``probability``. Equal to
    decoding at that threshold (a triple's score is its smallest logit's sigmoid, merged over windows by the best),
    so thresholds are tuned from one decode at the lowest."""
    return [
        ({k: v for k, v in entities.items() if v > probability}, {k: v for k, v in triples.items() if v > probability})
        for entities, triples in decoded
    ]


def normalise(s: str) -> str:
    """DuIE's rule for comparing entity strings: book-title marks 《》 around it dropped, lower case."""
    s = s.strip()
    if len(s) > 2 and s.startswith("《") and s.endswith("》"):
        s = s[1:-1]
    return s.lower()


def text_triples(text: str, triples, labels: list[str]) -> set:
    """{(subject text, predicate, object text)} of decoded triples, normalised."""
    return {
        (normalise(text[s[0] : s[1]]), parse_label(labels[c])[0], normalise(text[o[0] : o[1]])) for s, c, o in triples
    }


def prf(tp: int, predicted: int, gold: int) -> dict:
    p, r = tp / predicted if predicted else 0.0, tp / gold if gold else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


class TripleCounts:
    """The counts ``relation_metrics`` scores from, added a chunk of texts at a time."""

    def __init__(self, labels: list[str]):
        self.labels, self.counts, self.per = labels, Counter(), defaultdict(Counter)

    def add(self, examples: list, decoded: list) -> None:
        counts, per = self.counts, self.per
        for e, (entities, triples) in zip(examples, decoded):
            gold = {(normalise(s), p, normalise(o)) for s, p, o in e.gold}
            predicted = text_triples(e.text, triples, self.labels)
            for kind, items in (("tp", gold & predicted), ("pred", predicted), ("gold", gold)):
                counts[kind] += len(items)
                for _, p, _ in items:
                    per[p][kind] += 1
            gold_entities = {(s, t, "subject") for (s, t, _), _, _ in e.triples}
            gold_entities |= {(s, t, "object") for _, _, (s, t, _) in e.triples}
            counts["etp"] += len(gold_entities & set(entities))
            counts["epred"] += len(entities)
            counts["egold"] += len(gold_entities)

    def metrics(self) -> dict:
        counts = self.counts
        triple = prf(counts["tp"], counts["pred"], counts["gold"])
        entity = prf(counts["etp"], counts["epred"], counts["egold"])
        metrics = {f"triple_{k}": v for k, v in triple.items()}
        metrics.update({f"entity_{k}": v for k, v in entity.items()})
        metrics.update(predicted_triples=counts["pred"], gold_triples=counts["gold"])
        per = self.per.items()
        metrics["per_predicate"] = {p: {**prf(c["tp"], c["pred"], c["gold"]), "support": c["gold"]} for p, c in per}
        return metrics


def relation_metrics(examples: list, decoded: list, labels: list[str]) -> dict:
    """triple_f1 (and precision, recall) on (subject text, predicate, object text) per text, DuIE's rule;
    entity_f1 on exact (start, end, role) spans of subjects and objects; per-predicate counts."""
    counts = TripleCounts(labels)
    counts.add(examples, decoded)
    return counts.metrics()


def predicate_table(metrics: dict) -> str:
    """The per-predicate table, most frequent first, and the overall rows."""
    rows = sorted(metrics["per_predicate"].items(), key=lambda kv: (-kv[1]["support"], kv[0]))
    width = max([len(p) for p, _ in rows] + [9])
    lines = [f"{'predicate':<{width}}  precision  recall     f1  support"]
    for p, m in rows:
        lines.append(f"{p:<{width}}  {m['precision']:9.4f}  {m['recall']:6.4f}  {m['f1']:.4f}  {m['support']:7d}")
    for name, row in (("triple", "all triples"), ("entity", "entities")):
        m = {k: metrics[f"{name}_{k}"] for k in ("precision", "recall", "f1")}
        lines.append(f"{row:<{width}}  {m['precision']:9.4f}  {m['recall']:6.4f}  {m['f1']:.4f}")
    return "\n".join(lines)
