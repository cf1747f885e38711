"""Entity-level metrics (strict spans, as seqeval's strict mode), error kinds and their table."""

from __future__ import annotations

from collections import Counter

from ernie_ft.evaluation.tables import format_table


def entity_metrics(gold: list, predicted: list, types: list[str]) -> dict:
    """Entity-level precision, recall and F1, micro and per type, strict: a predicted entity counts
    only with exactly the gold start, end and type (seqeval's strict mode).

    ``gold`` and ``predicted`` hold one collection of (start, end, type) per example.
    """
    hits, n_gold, n_pred = Counter(), Counter(), Counter()
    for g, p in zip(gold, predicted):
        g, p = set(g), set(p)
        n_gold.update(t for *_, t in g)
        n_pred.update(t for *_, t in p)
        hits.update(t for *_, t in g & p)

    def scores(tp: int, n_g: int, n_p: int) -> dict:
        precision, recall = tp / n_p if n_p else 0.0, tp / n_g if n_g else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "support": n_g, "predicted": n_p}

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
