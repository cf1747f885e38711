"""The label set a task learns from its training examples (``Task.fit_labels`` and ``Task.check_labels`` call these):
the order of the labels, the warning for labels with few training examples, and the check that the labels of dev,
test and prediction files are among them."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from ernie_ft.errors import UserError


def label_order(values: Sequence[Any]) -> list[str]:
    """Sorted label names: numerically when every label is an integer, else by string."""
    unique = set(values)
    if all(v.lstrip("-").isdigit() for v in unique):
        return sorted(unique, key=int)
    return sorted(unique)


FEW_EXAMPLES = 5
"""A label with fewer training examples than this gets a warning: a model rarely learns it from so few."""


def warn_rare_labels(counts: dict, source: str, noun: str = "label") -> None:
    """One ``warning:`` line on stderr naming the labels of ``counts`` ({label: training examples}) with fewer than
    ``FEW_EXAMPLES`` examples in ``source``, rarest first, and how many are never positive (0: a label column that
    holds no 1); nothing when there are none."""
    rare = sorted((n, label) for label, n in counts.items() if n < FEW_EXAMPLES)
    if not rare:
        return
    shown = ", ".join(f"{label} {n}" for n, label in rare[:8]) + (", ..." if len(rare) > 8 else "")
    nouns = noun + ("es" if noun.endswith("s") else "s")
    zero = sum(n == 0 for n, _ in rare)
    never = f", {zero} never positive (a model learns never to predict {'them' if zero > 1 else 'it'})" if zero else ""
    print(
        f"warning: {source}: {len(rare)} of {len(counts)} {nouns} have fewer than {FEW_EXAMPLES} training examples "
        f"({shown}){never}; a model rarely learns such a {noun}: label more examples of it, or merge it into a related "
        "one",
        file=sys.stderr,
    )


def check_known_labels(
    examples: Sequence,
    labels_of: Callable[[Any], Iterable[str]],
    known: Sequence[str],
    allow_new: bool,
    flag: str,
    noun: str = "label",
) -> None:
    """Raise UserError at the first example whose labels include one outside ``known``, unless ``allow_new``.

    ``labels_of(example)`` gives one example's labels (empty when it has none); examples carry
    ``source`` and ``line`` for the message. ``flag`` is the file's flag (--dev, --test, --input)
    and ``noun`` what a label is called ("label", "entity type", "intent"). With ``allow_new`` the
    task scores such labels as errors.
    """
    if allow_new:
        return
    allowed = set(known)
    for example in examples:
        unknown = sorted(set(labels_of(example)) - allowed)
        if unknown:
            shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
            raise UserError(
                f"{example.source}:{example.line}: {noun} {unknown[0]!r} ({flag}) does not occur in the "
                f"training data ({noun}s: {shown}); fix it or pass --allow-new-labels to score such "
                f"{noun}s as errors"
            )
