"""Choosing what to label next (``python -m ernie_ft select``): the texts of a pool the model is least sure of.

Each of the model's ``predict`` records gets an uncertainty, higher for a text whose labels would teach the model more:

- classification (a softmax): ``entropy`` of its probabilities, ``margin`` 1 - (best - second best),
  ``least-confidence`` 1 - best; with a sigmoid per label (``--multi-label``, label paths) the sum of each label's
  binary entropy, and for margin and least confidence the label nearest its threshold;
- NER and relation extraction, from the predicted spans' or triples' scores p (the model's probability of each):
  ``entropy`` the sum of their binary entropies, ``margin`` and ``least-confidence`` the one nearest its threshold. A
  text with no predicted entity or triple scores 0: the model found nothing to doubt (span-level uncertainty cannot
  see the entities it missed);
- ``random``: a seeded shuffle, the baseline every strategy has to beat.

"Nearest its threshold" is 1 at the probability t where the model decides (``TaskHooks.threshold_of``: the tuned,
given or default one; 0.5 for a model that decides by no threshold) and falls to 0 at 0 and at 1: p / t below it,
(1 - p) / (1 - t) above. A text given twice in the pool (both texts, for a sentence pair) is chosen once; ``--diverse``
also skips a text whose character 3-grams (of both texts, for a pair) overlap a chosen one's by more than
``NEAR_DUPLICATE`` (Jaccard), so that near-duplicates are not all picked.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Optional

from ernie_ft import thresholds
from ernie_ft.data.pre_annotations import kind

STRATEGIES = ("entropy", "margin", "least-confidence", "random")
NEAR_DUPLICATE = 0.7
"""The character 3-gram Jaccard overlap above which ``--diverse`` takes two texts for near-duplicates."""


def _binary_entropy(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def _scores(record: dict) -> tuple[list[tuple[float, str]], bool]:
    """([(a probability the record's decision rests on, the output it is of)], whether they are one softmax)."""
    what = kind(record)
    if what == "classes":
        probs = list(record.get("probs", {}).items())
        return [(p, label) for label, p in probs], "labels" not in record  # a label set: a sigmoid per label
    if what == "entities":
        return [(e["score"], e["type"]) for e in record["entities"]], False
    return [(r["score"], r["predicate"]) for r in record["relations"]], False


def _near(p: float, t: float) -> float:
    """How near the probability ``p`` is to the threshold ``t``: 1 at t, 0 at 0 and at 1."""
    return p / t if p < t else (1 - p) / (1 - t)


def uncertainty(record: dict, strategy: str, threshold_of: Optional[Callable[[str], Optional[float]]] = None) -> float:
    """How unsure the model is of ``record`` under ``strategy`` (not 'random'); higher: label it sooner.
    ``threshold_of``: the probability at which an output counts (``TaskHooks.threshold_of``; None: 0.5)."""
    scored, softmax = _scores(record)
    if not scored:
        return 0.0
    probs = [p for p, _ in scored]
    if softmax:
        ranked = sorted(probs, reverse=True) + [0.0]
        if strategy == "entropy":
            return -sum(p * math.log(p) for p in probs if p > 0)
        return 1 - (ranked[0] - ranked[1]) if strategy == "margin" else 1 - ranked[0]
    if strategy == "entropy":
        return sum(_binary_entropy(p) for p in probs)
    given = threshold_of or (lambda output: None)
    return max(_near(p, thresholds.probability(given(output))) for p, output in scored)


def _grams(text: str) -> set:
    return {text[i : i + 3] for i in range(max(len(text) - 2, 1))}


def choose(
    records: list[dict],
    size: int,
    strategy: str,
    diverse: bool = False,
    seed: int = 0,
    threshold_of: Optional[Callable[[str], Optional[float]]] = None,
) -> list[int]:
    """The indices into ``records`` of the ``size`` texts to label next, most useful first: a text given more than
    once only the first time (``threshold_of``: see ``uncertainty``)."""
    if strategy == "random":
        order = random.Random(seed).sample(range(len(records)), len(records))
    else:
        scores = [uncertainty(r, strategy, threshold_of) for r in records]
        order = sorted(range(len(records)), key=lambda i: (-scores[i], i))
    chosen, seen, texts = [], [], set()
    for i in order:
        text = (records[i]["text"], records[i].get("text_pair"))
        if text in texts:
            continue
        grams = _grams("\n".join(t for t in text if t is not None)) if diverse else set()  # a pair: both texts
        if all(len(grams & other) / len(grams | other) <= NEAR_DUPLICATE for other in seen):
            chosen.append(i)
            texts.add(text)
            seen += [grams] if diverse else []
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
    label_config: Optional[str] = None
    """A Label Studio labelling config (a file of its XML): the import in its text fields and tag names."""


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
        source,
        device=options.device,
        overrides=columns,
        engine=engine,
        trust_pickle=options.trust_pickle,
        task=options.task,
        threshold=options.threshold,
        threads=options.threads,
    )
    convert = outputs.tool_import(options.format, loaded, options.label_config)  # a bad config said before predicting
    examples, features, logits = run_inference(loaded, data, options.input, "--input", False, options.batch_size)
    records = loaded.task.predict(logits, features, examples, loaded.labels, data)
    chosen = choose(records, options.size, options.strategy, options.diverse, options.seed, loaded.task.threshold_of)
    if chosen and convert is not None:
        convert.check(records[chosen[0]])  # a config that cannot take these answers: said before the file is made
    out = outputs.writer(options.output, False, options.format, convert)
    try:
        out.write([records[i] for i in chosen])
    finally:
        out.close()
    unique = len({(r["text"], r.get("text_pair")) for r in records})
    repeats = f" ({len(records) - unique} repeats in the pool left out)" if unique < len(records) else ""
    print(
        f"chose {len(chosen)} of {unique} texts by {options.strategy}{' (diverse)' if options.diverse else ''}"
        f"{repeats}; wrote {options.output} ({options.format} import with the model's predictions; "
        f"{engine_line(engine)})",
        file=sys.stderr,
    )
