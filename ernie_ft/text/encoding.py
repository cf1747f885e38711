"""``Encoding``: the tokens of one text, what the pipeline returns and the tokenisation cache stores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Encoding:
    """Tokens of one text, without [CLS]/[SEP]."""

    ids: list[int]
    offsets: list[tuple[int, int]]  # [start, end) into the original text, one per token
    word_ids: list[int] | None  # index into TextPipeline.words(text) of each token's word; None: not asked for
