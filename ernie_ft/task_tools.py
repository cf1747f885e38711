"""The small functions tasks share (``Task`` methods call them): the label order, the check that dev and test
labels occur in train, the warning for labels with few training examples, and the dev set held out of train
(``--dev-split``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

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
    ``FEW_EXAMPLES`` examples in ``source``, rarest first; nothing when there are none."""
    rare = sorted((n, label) for label, n in counts.items() if n < FEW_EXAMPLES)
    if not rare:
        return
    shown = ", ".join(f"{label} {n}" for n, label in rare[:8]) + (", ..." if len(rare) > 8 else "")
    nouns = noun + ("es" if noun.endswith("s") else "s")
    print(
        f"warning: {source}: {len(rare)} of {len(counts)} {nouns} have fewer than {FEW_EXAMPLES} training examples "
        f"({shown}); a model rarely learns such a {noun}: label more examples of it, or merge it into a related one",
        file=sys.stderr,
    )


DEV_SPLIT_SEED = 1013  # fixed, not --seed: runs with other seeds are scored on the same dev examples


def split_dev(
    train: list, fraction: Optional[float], labels_of: Optional[Callable[[Any], Iterable[str]]] = None
) -> tuple[list, Optional[list]]:
    """(train, dev): ``fraction`` of ``train`` held out as dev, the same examples on every run with the same
    file (a permutation drawn with ``DEV_SPLIT_SEED``); (train, None) when ``fraction`` is None.

    With ``labels_of`` (an example's labels), an example that holds the last training example of a label stays
    in train and the next one is held out instead, so dev never has a label train lacks. Prints how many were
    held out (the loading line); holding out none or all of them is a UserError.
    """
    if not fraction:
        return train, None
    import random
    from collections import Counter

    wanted, source = round(len(train) * fraction), getattr(train[0], "source", "--train") if train else "--train"
    if not 0 < wanted < len(train):
        share = "none" if wanted < 1 else "all"
        raise UserError(
            f"--dev-split {fraction} of the {len(train)} examples of {source} holds out {share} of them; give a "
            "fraction that leaves examples for both, or --dev FILE"
        )
    counts = Counter(label for e in train for label in labels_of(e)) if labels_of else Counter()
    held, kept = set(), 0
    for i in random.Random(DEV_SPLIT_SEED).sample(range(len(train)), len(train)):
        labels = list(labels_of(train[i])) if labels_of else []
        if len(held) == wanted:
            break
        if any(counts[label] <= 1 for label in labels):
            kept += 1
            continue
        counts.subtract(labels)
        held.add(i)
    if not held:
        raise UserError(f"--dev-split {fraction}: every label of {source} has a single example; give --dev FILE")
    note = f"; {kept} kept in train as the only examples of a label" if kept else ""
    print(
        f"--dev-split {fraction}: {len(held)} of the {len(train)} examples of {source} held out as dev (the same ones "
        f"on every run){note}",
        file=sys.stderr,
    )
    return [e for i, e in enumerate(train) if i not in held], [e for i, e in enumerate(train) if i in held]


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
