"""``--dev-split``: a dev set held out of the training examples, the same one on every run with the same file
(``TaskHooks.split_dev``'s default, and the tasks' own ``split_dev`` with their labels)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Callable, Optional

from ernie_ft.errors import UserError

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
