"""Vocabularies for scratch models: every character of the training texts, in the vocab.txt format.

``python -m ernie_ft.vocab learn`` (``learn_vocab.learn_command``) learns a vocabulary extension.
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tokenizers import normalizers

from ernie_ft.text.rules import normalize_text
from ernie_ft.text.vocab_files import SPECIAL_TOKENS


def _stands_alone(c: str) -> bool:
    """True when BertPreTokenizer always splits c into its own piece (CJK ideograph or punctuation),
    so it never needs a '##' continuation form."""
    o = ord(c)  # the ranges are BERT's _is_chinese_char and _is_punctuation (ASCII part)
    return any(lo <= o <= hi for lo, hi in _ALONE_RANGES) or unicodedata.category(c).startswith("P")


_ALONE_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
    (33, 47),
    (58, 64),
    (91, 96),
    (123, 126),
)


def build_vocab(texts: Iterable[str], *, min_count: int = 1, lowercase: bool = True) -> list[str]:
    """Vocabulary for a scratch model: [PAD] [CLS] [SEP] [MASK], then each character of the
    normalised texts seen >= min_count times, by frequency then codepoint, and [UNK] last.
    Characters that can sit inside a word (letters, digits, symbols) also get a '##' form."""
    bert = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    counts: Counter = Counter()
    for text in texts:
        counts.update(bert.normalize_str(normalize_text(text)[0]))
    chars = sorted(
        (c for c, n in counts.items() if n >= min_count and not c.isspace()), key=lambda c: (-counts[c], ord(c))
    )
    tokens = list(SPECIAL_TOKENS[:4])
    for c in chars:
        tokens.append(c)
        if not _stands_alone(c):
            tokens.append("##" + c)
    tokens.append("[UNK]")
    return tokens


def write_vocab(tokens: list[str], path: str) -> None:
    """Write tokens one per line (UTF-8), the vocab.txt format TextPipeline and PaddleNLP read."""
    bad = [t for t in tokens if not t or "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"vocabulary tokens must be non-empty single lines, got {bad[:3]!r}")
    tmp = Path(f"{path}.{os.getpid()}.tmp")  # renamed into place: data-parallel ranks write the same file at once
    tmp.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    os.replace(tmp, path)
