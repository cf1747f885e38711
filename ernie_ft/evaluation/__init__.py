"""Metrics (classification, entities, CMRC/SQuAD), their tables and pictures."""

import re


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of ``metric`` is better (losses, errors, perplexity); else greater is."""
    words = set(re.split(r"[^a-z]+", metric.lower()))
    return bool(words & {"loss", "error", "perplexity", "ppl", "wer", "cer"})
