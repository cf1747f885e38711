"""The three tokenization rule sets (``RULES``): what each does to a text before WordPiece, and its Rust splits.

``"ernie_ft"``: NFKC per character (``normalize_text``), then PaddleNLP's BasicTokenizer splits in Rust.
``"bert"`` (exactly transformers' BertTokenizer) and ``"paddlenlp"`` (exactly PaddleNLP's ErnieTokenizer): the
characters BERT's BasicTokenizer changes (case, accents, control and space characters, and with transformers NFC)
are mapped here (``normalize_basic``), one character or combining sequence at a time, with Python's own
``unicodedata`` as those tokenizers use it; Rust then lower-cases ASCII and splits on a character class built from
the same tables (``rust_tokenizer``), so no Unicode table of the Rust library decides a token.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from ernie_ft.text.vocab_files import SPECIAL_TOKENS

RULES = ("ernie_ft", "bert", "paddlenlp")
"""Tokenization rules: ernie_ft's own (NFKC per character, PaddleNLP's splits), transformers' BertTokenizer,
PaddleNLP's ErnieTokenizer."""
RULES_VERSION = 1  # bump when the "bert" or "paddlenlp" rules change, so their caches stop matching

_SPECIAL_CHARS = (
    r"[\p{S}\x{3040}-\x{30FF}\x{0370}-\x{04FF}\x{0250}-\x{02AF}"
    r"\x{00AD}\x{00B2}\x{00BA}\x{3007}\x{00B5}\x{00D8}\x{014B}\x{01B1}]"
)


@lru_cache(maxsize=1 << 16)
def _normalize_char(c: str) -> str:
    if c in "\t\n\r":
        return " "
    # Cs: a lone surrogate cannot cross into the Rust tokenizer at all.
    if unicodedata.category(c) in ("Cc", "Cf", "Cs"):
        return ""
    return unicodedata.normalize("NFKC", c)  # also full-width ASCII -> ASCII and U+3000 -> ' '


# Printable ASCII and CJK unified ideographs: characters normalisation never changes (a test checks
# each one), left out before the per-character look-ups, which cost most of normalisation.
_UNCHANGED = re.compile("[\x20-\x7e\u3400-\u4dbf\u4e00-\u9fff]+")


def normalize_text(text: str, keep: frozenset = frozenset()) -> tuple[str, list[int]]:
    """Normalised text and, per normalised character, the index of its original character.

    NFKC is applied per character (not to the whole string) so each output character
    has exactly one source character; '…' becomes '...' with all three pointing at it.
    Characters in ``keep`` (those the vocabulary has as tokens of their own) stay as they
    are: a pretrained ERNIE saw '，' (id 4), not ','.
    """
    norm, index = normalize_nfkc(text, keep)
    return norm, list(range(len(text))) if index is None else index


def normalize_nfkc(text: str, keep: frozenset) -> tuple[str, list[int] | None]:
    """``normalize_text`` (rules "ernie_ft"), with None for the index when the text is unchanged."""
    # Most characters pass through unchanged: look each distinct one up once, then copy runs.
    changed = {
        c: r
        for c in set(_UNCHANGED.sub("", text))
        if (r := _normalize_char(c)) != c and (c not in keep or not r.strip())
    }
    if not changed:
        return text, None
    return _replace_chars(text, changed)


def _replace_chars(text: str, changed: dict[str, str]) -> tuple[str, list[int]]:
    """``text`` with each character in ``changed`` replaced, and the original index of each output character."""
    out: list[str] = []
    index: list[int] = []
    last = 0
    for i, c in enumerate(text):
        if c in changed:
            r = changed[c]
            out += (text[last:i], r)
            index += range(last, i)
            index += [i] * len(r)
            last = i + 1
    out.append(text[last:])
    index += range(last, len(text))
    return "".join(out), index


# The rules of BERT's BasicTokenizer, as transformers 4.x and PaddleNLP 2.8 write them (their _is_control,
# _is_whitespace, _is_punctuation, _is_chinese_char and PaddleNLP's _is_symbol), with Python's unicodedata.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
_PADDLENLP_SYMBOLS = (0x00AD, 0x00B2, 0x00BA, 0x3007, 0x00B5, 0x00D8, 0x014B, 0x01B1)
_ASCII_PUNCTUATION = [*range(33, 48), *range(58, 65), *range(91, 97), *range(123, 127)]
# No P or S character lies beyond (Unicode 14; a test checks the whole range).
_PUNCTUATION_SCAN_END = 0x20000


def _dropped(c: str) -> bool:
    """BasicTokenizer._clean_text drops it: NUL, U+FFFD and every C* character except tab, newline and CR."""
    return c in "\x00\ufffd" or (c not in "\t\n\r" and unicodedata.category(c)[0] == "C")


@lru_cache(maxsize=1 << 16)
def _basic_unit(unit: str, lower: bool, strip: bool, compose: bool) -> str:
    """What BERT's BasicTokenizer makes of one character (or one combining sequence), before its splits.

    In transformers' order: lower-cased per character (``PreTrainedTokenizer.tokenize``), cleaned (controls
    dropped, spaces to ' '), NFC (transformers only: ``compose``), lower-cased again and accents stripped
    (NFD, Mn dropped) per word. Characters ``str.split`` splits on become ' '.
    """
    if lower:
        unit = "".join(c.lower() for c in unit)
    unit = "".join("" if _dropped(c) else " " if c in " \t\n\r" or unicodedata.category(c) == "Zs" else c for c in unit)
    if compose:
        unit = unicodedata.normalize("NFC", unit)
    if lower:
        unit = unit.lower()
    if strip:
        unit = "".join(c for c in unicodedata.normalize("NFD", unit) if unicodedata.category(c) != "Mn")
    return "".join(" " if c.isspace() else c for c in unit)


@lru_cache(maxsize=1)
def _nfc_seconds() -> frozenset:
    """Characters NFC may join to the character before them: second halves of canonical pairs, Hangul V and T."""
    seconds = {chr(c) for c in [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]}
    for cp in range(0x30000):  # canonical decompositions end at U+2FA1D
        parts = unicodedata.decomposition(chr(cp)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(chr(int(parts[1], 16)))
    return frozenset(seconds)


@lru_cache(maxsize=1 << 16)
def _joins_previous(c: str) -> bool:
    """Whether NFC may join ``c`` to the character before it, or ``c`` vanishes and lets its neighbours join."""
    if _dropped(c):
        return True
    first = unicodedata.normalize("NFD", c)[0]
    return unicodedata.combining(first) > 0 or first in _nfc_seconds()


def normalize_basic(text: str, lower: bool, strip: bool, compose: bool):
    """BasicTokenizer's normalisation of ``text`` (``_basic_unit``, rules "bert" and "paddlenlp"): (text, starts,
    ends) with, per output character, the original characters it came from, [start, end); (text, None, None) when
    nothing changes.

    Printable ASCII and the common CJK blocks are left as they are (Rust lower-cases ASCII, so the special
    tokens ``[CLS]`` etc. written in a text stay whole, as transformers matches them before lower-casing).
    With ``compose`` (NFC without stripping accents), a character and the combining ones after it are one unit.
    """
    exotic = set(_UNCHANGED.sub("", text))
    if not exotic:
        return text, None, None
    if compose and any(_joins_previous(c) for c in exotic):
        return _normalize_sequences(text, exotic, lower, strip)
    changed = {c: r for c in exotic if (r := _basic_unit(c, lower, strip, compose)) != c}
    if not changed:
        return text, None, None
    norm, index = _replace_chars(text, changed)
    return norm, index, None


def _normalize_sequences(text: str, exotic: set, lower: bool, strip: bool):
    """``normalize_basic`` by combining sequences: NFC joins characters only inside one. A sequence NFC
    leaves as it is keeps one offset per character; one it joins points at all of its characters."""
    joining = "".join(sorted(re.escape(c) for c in exotic if _joins_previous(c)))

    def alone(i: int) -> tuple[int, int, str]:  # printable ASCII and CJK stay as they are (see normalize_basic)
        c = text[i]
        return i, i + 1, _basic_unit(c, lower, strip, True) if c in exotic else c

    pieces: list[tuple[int, int, str]] = []
    last = 0
    for m in re.finditer(f"(?s).[{joining}]+", text):
        pieces += [alone(i) for i in range(last, m.start())]
        whole = _basic_unit(m.group(), lower, strip, True)
        each = [_basic_unit(c, lower, strip, True) for c in m.group()]
        if "".join(each) == whole:
            pieces += [(m.start() + k, m.start() + k + 1, r) for k, r in enumerate(each)]
        else:
            pieces.append((m.start(), m.end(), whole))
        last = m.end()
    pieces += [alone(i) for i in range(last, len(text))]
    norm = "".join(r for _, _, r in pieces)
    return norm, [s for s, _, r in pieces for _ in r], [e for _, e, r in pieces for _ in r]


@lru_cache(maxsize=4)
def _split_class(symbols: bool, chinese: bool) -> str:
    """An Oniguruma class of the characters BasicTokenizer makes words of their own: punctuation (ASCII
    non-alphanumerics and Unicode P*), with ``symbols`` PaddleNLP's symbols (S* and a few more), with
    ``chinese`` the CJK ideographs. Built from Python's unicodedata, the tables transformers and PaddleNLP use."""
    points = set(_ASCII_PUNCTUATION)
    for cp in range(_PUNCTUATION_SCAN_END):
        category = unicodedata.category(chr(cp))[0]
        if category == "P" or (symbols and category == "S"):
            points.add(cp)
    if symbols:
        points.update(_PADDLENLP_SYMBOLS)
    if chinese:
        points.update(cp for lo, hi in _CJK_RANGES for cp in range(lo, hi + 1))
    return class_of(points)


@lru_cache(maxsize=1)
def dropped_points() -> tuple[int, ...]:
    """Every code point BasicTokenizer drops (``_dropped``)."""
    return tuple(cp for cp in range(0x110000) if _dropped(chr(cp)))


def class_of(points) -> str:
    """An Oniguruma character class of these code points, as ranges."""
    merged: list[list[int]] = []
    for cp in sorted(points):
        if merged and cp == merged[-1][1] + 1:
            merged[-1][1] = cp
        else:
            merged.append([cp, cp])
    return "[" + "".join(f"\\x{{{lo:X}}}" + (f"-\\x{{{hi:X}}}" if hi > lo else "") for lo, hi in merged) + "]"


def rust_tokenizer(vocab: dict, rules: str, lowercase: bool, tokenize_chinese_chars: bool) -> Tokenizer:
    """WordPiece (Rust) with this rule set's normaliser and pre-tokenizer, for text already normalised here
    (``normalize_nfkc`` or ``normalize_basic``)."""
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    if rules == "ernie_ft":
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
        )
        # As PaddleNLP's BasicTokenizer: symbols, kana, Greek/Cyrillic and IPA stand alone ('4～6' is
        # '4 ～ 6'), then BERT's whitespace and punctuation split.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(tokenizers.Regex(_SPECIAL_CHARS), behavior="isolated"),
                pre_tokenizers.BertPreTokenizer(),
            ]
        )
        return tok
    # Python has mapped every other character (normalize_basic): only ASCII is left to lower-case.
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    split = _split_class(rules == "paddlenlp", tokenize_chinese_chars)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated"), pre_tokenizers.WhitespaceSplit()]
    )
    # Both tokenizers take a special token written in a text as that token, before any normalisation.
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def char_map(rules: str, keep: frozenset, lower: bool, strip: bool) -> dict[str, str]:
    """Every character these rules change on its own, with what it becomes (rules "ernie_ft" with the kept
    characters ``keep``, or "paddlenlp" with its casing and accent stripping): the map a tokenizer.json holds."""
    mapping = {}
    for cp in range(0x110000):
        c = chr(cp)
        if 0xD800 <= cp < 0xE000 or c == "\x00" or _UNCHANGED.match(c):
            continue
        if rules == "ernie_ft":
            r = _normalize_char.__wrapped__(c)
            if r != c and (c not in keep or not r.strip()):
                mapping[c] = r
        elif not _dropped(c) and (r := _basic_unit.__wrapped__(c, lower, strip, False)) != c:
            mapping[c] = r
    return mapping
