"""Choosing what to label next (``python -m ernie_ft select``): the texts of a pool the model is least sure of.

Each of the model's ``predict`` records gets an uncertainty, higher for a text whose labels would teach the model more:

- classification (a softmax): ``entropy`` of its probabilities, ``margin`` 1 - (best - second best),
  ``least-confidence`` 1 - best; with a sigmoid per label (``--multi-label``) the sum of each label's binary entropy,
  and for margin and least confidence the label nearest 0.5 (1 - 2 |p - 0.5|);
- NER and relation extraction, from the predicted spans' or triples' scores p (the model's probability of each):
  ``entropy`` the sum of their binary entropies, ``margin`` and ``least-confidence`` the one nearest 0.5. A text with
  no predicted entity or triple scores 0: the model found nothing to doubt (span-level uncertainty cannot see the
  entities it missed);
- ``random``: a seeded shuffle, the baseline every strategy has to beat.

``--diverse`` skips a text whose character 3-grams overlap a chosen one's by more than ``NEAR_DUPLICATE`` (Jaccard),
so that near-duplicates are not all picked.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Optional

from ernie_ft.data.pre_annotations import kind

STRATEGIES = ("entropy", "margin", "least-confidence", "random")
NEAR_DUPLICATE = 0.7
"""The character 3-gram Jaccard overlap above which ``--diverse`` takes two texts for near-duplicates."""


def _binary_entropy(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def _scores(record: dict) -> tuple[list[float], bool]:
    """(the probabilities the record's decision rests on, whether they are one softmax)."""
    what = kind(record)
    if what == "classes":
        probs = list(record.get("probs", {}).values())
        return probs, "labels" not in record  # a label set: a sigmoid per label
    if what == "entities":
        return [e["score"] for e in record["entities"]], False
    return [r["score"] for r in record["relations"]], False


def uncertainty(record: dict, strategy: str) -> float:
    """How unsure the model is of ``record`` under ``strategy`` (not 'random'); higher: label it sooner."""
    probs, softmax = _scores(record)
    if not probs:
        return 0.0
    if softmax:
        ranked = sorted(probs, reverse=True) + [0.0]
        if strategy == "entropy":
            return -sum(p * math.log(p) for p in probs if p > 0)
        return 1 - (ranked[0] - ranked[1]) if strategy == "margin" else 1 - ranked[0]
    if strategy == "entropy":
        return sum(_binary_entropy(p) for p in probs)
    return 1 - 2 * min(abs(p - 0.5) for p in probs)


def _grams(text: str) -> set:
    return {text[i : i + 3] for i in range(max(len(text) - 2, 1))}


def choose(records: list[dict], size: int, strategy: str, diverse: bool = False, seed: int = 0) -> list[int]:
    """The indices into ``records`` of the ``size`` texts to label next, most useful first."""
    if strategy == "random":
        order = random.Random(seed).sample(range(len(records)), len(records))
    else:
        scores = [uncertainty(r, strategy) for r in records]
        order = sorted(range(len(records)), key=lambda i: (-scores[i], i))
    if not diverse:
        return order[:size]
    chosen, seen = [], []
    for i in order:
        grams = _grams(records[i]["text"])
        if all(len(grams & other) / len(grams | other) <= NEAR_DUPLICATE for other in seen):
            chosen.append(i)
            seen.append(grams)
            if len(chosen) == size:
                break
    return chosen


@dataclass(frozen=True)
class SelectOptions:
    """What ``select`` runs: the command line's flags as values."""

    model: str
    """Checkpoint directory, as ``predict`` takes it."""
    input: str
    """The pool: unlabelled records in any format the checkpoint's task reads."""
    output: str
    """The import file to write."""
    size: int
    """How many texts to choose."""
    strategy: str = "entropy"
    """One of ``STRATEGIES``."""
    diverse: bool = False
    """Skip a text that nearly repeats a chosen one (``NEAR_DUPLICATE``)."""
    format: str = "label-studio"
    """One of ``pre_annotations.FORMATS``."""
    seed: int = 0
    """The shuffle of the ``random`` strategy."""
    batch_size: int = 64
    text_column: Optional[str] = None
    text_pair_column: Optional[str] = None
    device: str = "auto"
    threads: int = 0
    """Math threads on CPU; 0 shares the cores this process may use."""
    engine: str = "auto"
    threshold: Optional[float] = None
    trust_pickle: bool = False
    task: Optional[str] = None


def select(options: SelectOptions) -> None:
    """``python -m ernie_ft select``: predict the pool, choose, write the import file."""
    import sys

    from ernie_ft.inference import outputs
    from ernie_ft.inference.predict import engine_line, load_for_inference, resolve_engine, run_inference
    from ernie_ft.training import checkpoint

    source = checkpoint.checkpoint_dir(options.model)
    engine = resolve_engine(source, options.engine)
    columns = {"text_column": options.text_column, "text_pair_column": options.text_pair_column}
    loaded, data = load_for_inference(
        source, options.device, columns, engine, options.trust_pickle, options.task, options.threshold, options.threads
    )
    examples, features, logits = run_inference(loaded, data, options.input, "--input", False, options.batch_size)
    records = loaded.task.predict(logits, features, examples, loaded.labels, data)
    chosen = choose(records, options.size, options.strategy, options.diverse, options.seed)
    convert = outputs.tool_import(options.format, loaded)
    out = outputs.writer(options.output, False, options.format, convert)
    try:
        out.write([records[i] for i in chosen])
    finally:
        out.close()
    print(
        f"chose {len(chosen)} of {len(records)} texts by {options.strategy}{' (diverse)' if options.diverse else ''}; "
        f"wrote {options.output} ({options.format} import with the model's predictions; {engine_line(engine)})",
        file=sys.stderr,
    )
