"""Entity-level metrics (strict spans, as seqeval's strict mode), error kinds and their table."""

from __future__ import annotations

from collections import Counter

from ernie_ft.evaluation.tables import format_table


def entity_metrics(gold: list, predicted: list, types: list[str]) -> dict:
    """Entity-level precision, recall and F1, micro and per type, strict: a predicted entity counts
    only with exactly the gold start, end and type (seqeval's strict mode).

    ``gold`` and ``predicted`` hold one collection of (start, end, type) per example.
    """
    counts = EntityCounts()
    for g, p in zip(gold, predicted):
        counts.add(g, p)
    return counts.metrics(types)


class EntityCounts:
    """``entity_metrics`` kept as counts, added to one example at a time (``evaluate`` over a file read in chunks):
    the metrics of everything added equal ``entity_metrics`` of it all at once."""

    def __init__(self):
        self.hits, self.gold, self.predicted = Counter(), Counter(), Counter()

    def add(self, gold, predicted) -> None:
        """One example's gold and predicted (start, end, type) entities."""
        g, p = set(gold), set(predicted)
        self.gold.update(t for *_, t in g)
        self.predicted.update(t for *_, t in p)
        self.hits.update(t for *_, t in g & p)

    def metrics(self, types: list[str]) -> dict:
        """The metrics of every example added: micro, then per type (``types`` first, then any other in order)."""

        def scores(tp: int, n_g: int, n_p: int) -> dict:
            precision, recall = tp / n_p if n_p else 0.0, tp / n_g if n_g else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            return {"precision": precision, "recall": recall, "f1": f1, "support": n_g, "predicted": n_p}

        hits, n_gold, n_pred = self.hits, self.gold, self.predicted
        names = list(dict.fromkeys([*types, *sorted(n_gold | n_pred)]))
        return {
            **scores(sum(hits.values()), sum(n_gold.values()), sum(n_pred.values())),
            "per_type": {t: scores(hits[t], n_gold[t], n_pred[t]) for t in names},
        }


def entity_errors(text: str, gold, predicted) -> list[tuple[str, str]]:
    """(kind, description) of each mistake: wrong type (same span), boundary (overlapping, same type),
    missed and spurious."""

    def show(span):
        return f"{text[span[0] : span[1]]} [{span[0]}, {span[1]}) {span[2]}"

    gold, predicted = set(gold) - set(predicted), set(predicted) - set(gold)
    errors = []
    for g in sorted(gold):
        match = next(
            (p for p in sorted(predicted) if p[0] < g[1] and g[0] < p[1] and ((p[:2] == g[:2]) or p[2] == g[2])), None
        )
        if match is None:
            errors.append(("missed", show(g)))
            continue
        predicted.discard(match)
        kind = "wrong type" if match[:2] == g[:2] else "boundary"
        errors.append((kind, f"{show(g)} -> predicted {show(match)}"))
    return errors + [("spurious", show(p)) for p in sorted(predicted)]


def format_entity_table(metrics: dict) -> str:
    """Per-type precision/recall/F1 table with a micro-average row (see ``metrics.format_table``)."""

    def cells(name: str, m: dict) -> tuple:
        return (
            name,
            f"{m['precision']:.4f}",
            f"{m['recall']:.4f}",
            f"{m['f1']:.4f}",
            str(m["support"]),
            str(m["predicted"]),
        )

    return format_table(
        ("type", "precision", "recall", "f1", "gold", "predicted"),
        [cells(t, m) for t, m in metrics["per_type"].items()],
        [cells("micro avg", metrics)],
    )


ERRORS_HEADER = (
    "# one block per text with mistakes: file:line, the text, then each entity as 'text [start, end) type' (end "
    "exclusive)\n"
)
"""The first line of ``evaluate``'s errors.txt for entities."""


def error_block(source: str, line: int, text: str, errors: list[tuple[str, str]]) -> str:
    """One text's block of errors.txt: where it is, the text, then each ``entity_errors`` mistake."""
    return f"\n{source}:{line}\t{text}\n" + "".join(f"  {kind:<10}  {what}\n" for kind, what in errors)


def entity_report(metrics: dict, kinds: Counter, path: str, repaired: int) -> str:
    """``evaluate``'s printed report for entities: the per-type table, the count of each kind of mistake (listed in
    ``path``), and how many predicted tags broke BIO and were repaired."""
    counts = ", ".join(f"{kinds[k]} {k}" for k in ("missed", "spurious", "wrong type", "boundary"))
    note = f"\n{repaired} predicted tags broke BIO and were repaired (an I- without its B- starts an entity)"
    return f"{format_entity_table(metrics)}\nerrors: {counts}; listed in {path}" + (note if repaired else "")
