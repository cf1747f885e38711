"""Text pipeline: Unicode normalisation, jieba words, WordPiece ids with original-text offsets.

Normalisation and segmentation happen here in Python; WordPiece is HF `tokenizers` (Rust). Three rule sets
(``RULES``) follow a checkpoint's origin: ``"ernie_ft"`` (per-character NFKC, then PaddleNLP's BasicTokenizer
splits, the default), ``"bert"`` (exactly transformers' BertTokenizer) and ``"paddlenlp"`` (exactly PaddleNLP's
ErnieTokenizer). For the last two, the characters that BERT's BasicTokenizer changes (case, accents, control
and space characters, and with transformers NFC) are mapped here, one character or combining sequence at a
time, with Python's own ``unicodedata`` as those tokenizers use it; Rust then lower-cases ASCII and splits
on a character class built from the same tables, so no Unicode table of the Rust library decides a token.
jieba never changes a base id: it gives each token its word
(``Encoding.word_ids``, for whole-word masking) and places a vocabulary extension's pieces. Asked
for no word ids (``encode_many(word_ids=False)``) and without an extension, a text costs its
normalisation and the Rust tokenizer only: jieba, most of the cost on Chinese text, does not run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jieba
import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from ernie_ft.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
# Bump when normalisation or segmentation changes, so old encode_many caches stop matching.
PIPELINE_VERSION = 2
_SPECIAL_CHARS = (
    r"[\p{S}\x{3040}-\x{30FF}\x{0370}-\x{04FF}\x{0250}-\x{02AF}"
    r"\x{00AD}\x{00B2}\x{00BA}\x{3007}\x{00B5}\x{00D8}\x{014B}\x{01B1}]"
)
_META_FILE = "ernie_ft_text.json"
_USER_DICT_FILE = "jieba_user_dict.txt"
_EXTENSION_DIR = "vocab_extension"

jieba.setLogLevel(logging.WARNING)


class _Segmenter(jieba.Tokenizer):
    """jieba's Tokenizer, with its default dictionary read from disk (about 1 s) once per process rather than once
    per pipeline: later instances start from a copy of it (a user dictionary adds words to its own copy only)."""

    _default_dictionary: tuple[dict, int] | None = None  # (word frequencies, their total), as jieba loaded them

    def initialize(self, dictionary=None):
        if self.initialized or dictionary is not None or self.dictionary != jieba.DEFAULT_DICT:
            return super().initialize(dictionary)
        with self.lock:
            if _Segmenter._default_dictionary is None:
                super().initialize()
                _Segmenter._default_dictionary = (dict(self.FREQ), self.total)
            elif not self.initialized:
                frequencies, total = _Segmenter._default_dictionary
                self.FREQ, self.total, self.initialized = dict(frequencies), total, True


@dataclass
class Encoding:
    """Tokens of one text, without [CLS]/[SEP]."""

    ids: list[int]
    offsets: list[tuple[int, int]]  # [start, end) into the original text, one per token
    word_ids: list[int] | None  # index into TextPipeline.words(text) of each token's word; None: not asked for


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
    norm, index = _normalize(text, keep)
    return norm, list(range(len(text))) if index is None else index


def _normalize(text: str, keep: frozenset) -> tuple[str, list[int] | None]:
    """``normalize_text``, with None for the index when the text is unchanged."""
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


def _normalize_basic(text: str, lower: bool, strip: bool, compose: bool):
    """BasicTokenizer's normalisation of ``text`` (``_basic_unit``): (text, starts, ends) with, per output
    character, the original characters it came from, [start, end); (text, None, None) when nothing changes.

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
    """``_normalize_basic`` by combining sequences: NFC joins characters only inside one. A sequence NFC
    leaves as it is keeps one offset per character; one it joins points at all of its characters."""
    joining = "".join(sorted(re.escape(c) for c in exotic if _joins_previous(c)))

    def alone(i: int) -> tuple[int, int, str]:  # printable ASCII and CJK stay as they are (see _normalize_basic)
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
    return _class_of(points)


def _read_vocab(vocab_file: str) -> tuple[dict, list[str]]:
    """(token -> id, the file's lines) of a vocab.txt, or of a tokenizers ``tokenizer.json`` (``*.json``) with a
    WordPiece model; a UserError when it cannot be read or lacks a special token."""
    if vocab_file.endswith(".json"):
        lines = _tokenizer_json_vocab(Path(vocab_file))
    else:
        try:  # line splitting as PaddleNLP's load_vocabulary; str.splitlines would also split on \u2028
            with open(vocab_file, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f]
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(
                f"vocab file {vocab_file}: cannot read it as UTF-8 text ({e}); give a vocab.txt with one token per line"
            ) from None
    # A repeated token keeps its last id, as PaddleNLP and transformers do ('$' is on two lines of ERNIE 3.0).
    vocab = {tok: i for i, tok in enumerate(lines)}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise UserError(
            f"vocab file {vocab_file}: missing special tokens {', '.join(missing)}; "
            "use the checkpoint's vocab.txt or one written by build_vocab"
        )
    return vocab, lines


def _tokenizer_json(path: Path) -> dict:
    """A tokenizers ``tokenizer.json`` whose model is WordPiece with BERT's settings; a UserError otherwise."""
    data = _read_json(path)
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise UserError(
            f"{path}: its model is {model.get('type') or 'missing'}, not WordPiece; ernie_ft reads BERT-style "
            "tokenizers only (a WordPiece vocabulary, as bert-base-chinese or ERNIE)"
        )
    if model.get("continuing_subword_prefix", "##") != "##" or model.get("max_input_chars_per_word", 100) != 100:
        raise UserError(
            f"{path}: its WordPiece model has continuing_subword_prefix "
            f"{model.get('continuing_subword_prefix')!r} and max_input_chars_per_word "
            f"{model.get('max_input_chars_per_word')}; ernie_ft reads BERT's '##' and 100 only"
        )
    return data


def _tokenizer_json_vocab(path: Path) -> list[str]:
    """The vocabulary of a WordPiece ``tokenizer.json`` as the lines of a vocab.txt (token of id i on line i).

    An id no token has (transformers converts a vocab.txt with a repeated line so: the earlier line's id is
    gone) gets the placeholder ``[unused-repeat-N]``, so every later id stays."""
    vocab = _tokenizer_json(path)["model"]["vocab"]
    lines = {i: tok for tok, i in vocab.items() if isinstance(i, int) and i >= 0}
    if len(lines) != len(vocab):
        raise UserError(
            f"{path}: its WordPiece vocabulary gives two tokens one id, or an id that is not a whole number; "
            "save the tokenizer again with transformers, or give its vocab.txt"
        )
    return [lines.get(i, f"[unused-repeat-{i}]") for i in range(max(lines, default=-1) + 1)]


def _repeated_lines(lines: list[str]) -> dict[str, list[int]]:
    """Tokens on more than one line, with their 0-based line numbers."""
    seen: dict[str, list[int]] = {}
    for i, tok in enumerate(lines):
        seen.setdefault(tok, []).append(i)
    return {tok: where for tok, where in seen.items() if len(where) > 1}


_WARNED_REPEATS: set[str] = set()


def _warn_repeated_lines(vocab_file: str, lines: list[str]) -> None:
    """One stderr line (once per file and process) when a vocabulary repeats a token, for rules "bert"."""
    repeated = _repeated_lines(lines)
    key = os.path.abspath(vocab_file)
    if not repeated or key in _WARNED_REPEATS:
        return
    _WARNED_REPEATS.add(key)
    where = "; ".join(
        f"{tok!r} on lines {', '.join(str(i + 1) for i in lines_of)} (id {lines_of[-1]})"
        for tok, lines_of in repeated.items()
    )
    print(
        f"warning: vocab file {vocab_file}: repeated tokens: {where}; ids follow transformers (the last line), "
        "but re-saving this tokenizer with transformers' save_pretrained drops the earlier line and shifts every "
        "later id; write it with TextPipeline.save_hf, which keeps every id",
        file=sys.stderr,
    )


def _load_user_dict(segmenter, user_dict: str) -> bytes:
    """Load a jieba user dictionary into ``segmenter``; returns the file's bytes (for the fingerprint)."""
    if not os.path.isfile(user_dict):
        raise UserError(
            f"--user-dict {user_dict}: file not found; give a jieba user dictionary "
            "(one 'word [frequency] [tag]' per line) or drop the flag"
        )
    try:
        segmenter.load_userdict(user_dict)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--user-dict {user_dict}: {e}; each line must be 'word [frequency] [tag]' in UTF-8") from None
    return Path(user_dict).read_bytes()


RULES = ("ernie_ft", "bert", "paddlenlp")
"""Tokenization rules: ernie_ft's own (NFKC per character, PaddleNLP's splits), transformers' BertTokenizer,
PaddleNLP's ErnieTokenizer."""
RULES_VERSION = 1  # bump when the "bert" or "paddlenlp" rules change, so their caches stop matching


class TextPipeline:
    """Text -> Encoding for one vocabulary, casing, jieba user dictionary, segmentation mode and rule set."""

    def __init__(
        self,
        vocab_file: str,
        *,
        lowercase: bool = True,
        user_dict: str | None = None,
        segment: bool = True,
        vocab_extension: str | None = None,
        exact_spans: bool = False,
        rules: str = "ernie_ft",
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
    ):
        """``vocab_file``: a vocab.txt, or a tokenizers ``tokenizer.json`` with a WordPiece model.
        ``vocab_extension``: a directory written by ``python -m ernie_ft.vocab learn``; its pieces
        get ids after the vocabulary's. ``exact_spans``: keep the extension's ids (the model's size)
        but encode characters as the base vocabulary does, so span boundaries inside a piece stay
        reachable (token and span heads). ``rules``: one of ``RULES``; ``strip_accents`` (None: as
        ``lowercase``) and ``tokenize_chinese_chars`` are BertTokenizer's, for rules "bert" only."""
        if rules not in RULES:
            raise UserError(f"rules={rules!r}: no such tokenization rules; use one of {', '.join(RULES)}")
        if rules != "bert" and (strip_accents is not None or not tokenize_chinese_chars):
            raise UserError(
                f"strip_accents/tokenize_chinese_chars: BertTokenizer's settings, for rules 'bert' only (got rules "
                f"{rules!r}); drop them"
            )
        self._kwargs = dict(
            vocab_file=str(vocab_file),
            lowercase=bool(lowercase),
            user_dict=None if user_dict is None else str(user_dict),
            segment=bool(segment),
            vocab_extension=None if vocab_extension is None else str(vocab_extension),
            exact_spans=bool(exact_spans),
            rules=rules,
            strip_accents=None if strip_accents is None else bool(strip_accents),
            tokenize_chinese_chars=bool(tokenize_chinese_chars),
        )
        self._args = tuple(self._kwargs.items())
        self.vocab_file = str(vocab_file)
        self.lowercase, self.segment, self.exact_spans = bool(lowercase), bool(segment), bool(exact_spans)
        self.rules, self.strip_accents = rules, self._kwargs["strip_accents"]
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        self.last_cache_hit = False
        self.vocab, self._lines = _read_vocab(self.vocab_file)
        vocab = self.vocab
        self.vocab_size = len(self._lines)  # ids run to len-1 even when tokens repeat
        if rules == "bert":
            _warn_repeated_lines(self.vocab_file, self._lines)
        self.pad_id, self.cls_id, self.sep_id, self.mask_id, self.unk_id = (vocab[t] for t in SPECIAL_TOKENS)
        self._keep = frozenset()
        if rules == "ernie_ft":
            # Full-width letters and digits always become ASCII ('３０' would be one unknown word);
            # other characters the vocabulary has (full-width punctuation such as '，') stay.
            self._keep = frozenset(t for t in vocab if len(t) == 1 and not (t.isalnum() and "\uff01" <= t <= "\uff5e"))
        # BasicTokenizer strips accents when lower-casing unless told otherwise; NFC is transformers' only.
        self._strip = self.lowercase if self.strip_accents is None else self.strip_accents
        self._compose = rules == "bert"
        self._tok = self._rust_tokenizer(vocab)
        self.fingerprint = self._load_words_and_extension(self._base_digest(), user_dict)

    def _rust_tokenizer(self, vocab: dict) -> Tokenizer:
        """WordPiece (Rust) with this rule set's normaliser and pre-tokenizer, for text ``_prepare`` has mapped."""
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        if self.rules == "ernie_ft":
            tok.normalizer = normalizers.BertNormalizer(
                clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=self.lowercase
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
        # Python has mapped every other character (_normalize_basic): only ASCII is left to lower-case.
        if self.lowercase:
            tok.normalizer = normalizers.Lowercase()
        split = _split_class(self.rules == "paddlenlp", self.tokenize_chinese_chars)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated"), pre_tokenizers.WhitespaceSplit()]
        )
        # Both tokenizers take a special token written in a text as that token, before any normalisation.
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
        return tok

    def _base_digest(self):
        """The fingerprint's hash of the settings, vocabulary and rules (the words and extension follow)."""
        digest = hashlib.sha1(
            f"{PIPELINE_VERSION}|{self.lowercase}|{self.segment}|{jieba.__version__}|{tokenizers.__version__}|".encode()
        )
        if self.rules == "ernie_ft":
            digest.update(Path(self.vocab_file).read_bytes())
        else:  # the lines, whichever file holds them; the rules follow Python's Unicode tables
            digest.update(
                f"rules|{self.rules}|{RULES_VERSION}|{self._strip}|{self.tokenize_chinese_chars}|"
                f"{unicodedata.unidata_version}|".encode()
            )
            digest.update("\n".join(self._lines).encode("utf-8"))
        return digest

    def _load_words_and_extension(self, digest, user_dict: str | None) -> str:
        """Set up jieba (with the user dictionary) and the vocabulary extension; the fingerprint with them."""
        self._jieba = _Segmenter()  # private: the global one is shared with user code
        if user_dict is not None:
            digest.update(b"|user_dict|" + _load_user_dict(self._jieba, user_dict))
        self.extension = None
        vocab_extension = self._kwargs["vocab_extension"]
        if vocab_extension is not None:
            from ernie_ft.text.extension import VocabExtension

            if not self.segment:
                raise UserError(
                    f"--vocab-extension {vocab_extension}: pieces live inside jieba words; it needs segment=True"
                )
            self.extension = VocabExtension(vocab_extension, self.vocab, self.vocab_file, self.vocab_size)
            self.vocab_size += len(self.extension.pieces)
            digest.update(f"|extension|{self.extension.digest}|{self.exact_spans}".encode())
        return digest.hexdigest()

    def replace(self, **changes) -> TextPipeline:
        """A pipeline with the same settings except ``changes`` (constructor keywords)."""
        return TextPipeline(**{**self._kwargs, **changes})

    def normalize(self, text: str) -> tuple[str, list[int]]:
        """The text as the Rust tokenizer receives it, and the original index of each of its characters.

        Rules "ernie_ft": full-width ASCII and U+3000 to half-width and NFKC per character, except for
        characters the vocabulary has as tokens; Cc/Cf dropped (\\t \\n \\r become spaces). Rules "bert" and
        "paddlenlp": BasicTokenizer's cleaning, lower-casing (but of ASCII, left to Rust), accent stripping and
        (bert) NFC."""
        norm, starts, _ = self._prepare(text)
        return norm, list(range(len(text))) if starts is None else starts

    def _prepare(self, text: str) -> tuple[str, list[int] | None, list[int] | None]:
        """(normalised text, start, end in the original text of each of its characters); None: unchanged, or
        each end is start + 1."""
        if self.rules == "ernie_ft":
            norm, index = _normalize(text, self._keep)
            return norm, index, None
        return _normalize_basic(text, self.lowercase, self._strip, self._compose and not self._strip)

    @staticmethod
    def _to_original(spans, starts: list[int] | None, ends: list[int] | None) -> list[tuple[int, int]]:
        """Spans of the normalised text as [start, end) of the original text."""
        if starts is None:
            return spans
        if ends is None:
            return [(starts[a], starts[b - 1] + 1) for a, b in spans]
        return [(starts[a], ends[b - 1]) for a, b in spans]

    def _spans(self, norm: str) -> list[tuple[int, int]]:
        """Word spans in normalised-text offsets, whitespace-only words dropped."""
        if not self.segment:
            return [m.span() for m in re.finditer(r"\S+", norm)]
        spans, pos = [], 0
        for w in self._jieba.cut(norm, HMM=True):
            if w.strip():
                spans.append((pos, pos + len(w)))
            pos += len(w)
        return spans

    def normalized_words(self, text: str) -> list[str]:
        """The jieba words of the normalised text (whitespace-only words dropped)."""
        norm = self._prepare(text)[0]
        return [norm[s:e] for s, e in self._spans(norm)]

    def words(self, text: str) -> list[tuple[int, int]]:
        """jieba word spans [start, end) in original-text offsets, whitespace-only words dropped."""
        norm, starts, ends = self._prepare(text)
        return self._to_original(self._spans(norm), starts, ends)

    def encode(self, text: str) -> Encoding:
        """Ids, original-text offsets and word ids of one text (no special tokens, no truncation)."""
        return self._encode_texts([text])[0]

    def _needs_jieba(self, word_ids: bool) -> bool:
        return word_ids or (self.extension is not None and not self.exact_spans)

    def _encode_texts(self, texts: list[str], word_ids: bool = True) -> list[Encoding]:
        prepared = [self._prepare(text) for text in texts]
        norms = [norm for norm, _, _ in prepared]
        if len(norms) == 1:
            encs = [self._tok.encode(norms[0], add_special_tokens=False)]
        else:
            encs = self._tok.encode_batch(norms, add_special_tokens=False)
        segment = self._needs_jieba(word_ids)
        out = []
        for (norm, starts, ends), enc in zip(prepared, encs):
            # The checkpoint's own WordPiece rules decide the tokens, so jieba changes no ids
            # ('1.5kg' stays '1 . 5kg' as ERNIE was pretrained); jieba only says which word each
            # token starts in. Offsets are normalised-text characters, mapped back to the original.
            ids, norm_offsets, words = enc.ids, enc.offsets, None
            if segment:
                spans = self._spans(norm)
                if self.extension is not None and not self.exact_spans:
                    ids, norm_offsets = self.extension.apply(norm, spans, ids, norm_offsets)
                if word_ids:
                    word_of = [-1] * len(norm)
                    for w, (s, e) in enumerate(spans):
                        word_of[s:e] = [w] * (e - s)
                    words = [word_of[a] for a, _ in norm_offsets]
            out.append(Encoding(ids, self._to_original(norm_offsets, starts, ends), words))
        return out

    def encode_many(
        self, texts: list[str], *, cache_dir: str | None = None, num_proc: int = 1, word_ids: bool = True
    ) -> list[Encoding]:
        """Encodings of many texts, equal to [encode(t) for t in texts].

        word_ids=False: each Encoding's word_ids is None, and jieba does not run unless a vocabulary
        extension needs its words (ids and offsets are the same either way).

        With cache_dir, results are stored in <cache_dir>/<sha1(fingerprint, texts)>.arrow (an Arrow
        stream that datasets.Dataset.from_file opens) beside the SHA-256 of its bytes, and read back
        on the next identical call; a cache file that is truncated or altered (its digest differs)
        is not trusted but rebuilt, with a warning. self.last_cache_hit says which happened.
        num_proc > 1 tokenises in that many processes where jieba runs; without it, tokenizers' own
        threads are faster than processes.
        """
        texts = list(texts)
        self.last_cache_hit = False
        path = Path(cache_dir) / f"{self._cache_key(texts, word_ids)}.arrow" if cache_dir is not None else None
        if path is not None and path.is_file():
            cached = _read_table(path, len(texts))
            if cached is not None:
                self.last_cache_hit = True
                return cached
            print(
                f"warning: the tokenisation cache {path} is damaged (truncated or altered); rebuilding it",
                file=sys.stderr,
            )
        num_proc = max(1, min(num_proc, len(texts))) if self._needs_jieba(word_ids) else 1
        if num_proc == 1:
            encodings = self._encode_texts(texts, word_ids)
        else:
            encodings = self._encode_in_processes(texts, num_proc, word_ids)
        if path is not None:
            _write_table(path, encodings)
        return encodings

    def _encode_in_processes(self, texts: list[str], num_proc: int, word_ids: bool) -> list[Encoding]:
        # A stdlib pool, not datasets.map(num_proc=...): with the dill 0.3.4 that paddlenlp pins,
        # multiprocess cannot pickle Dataset._map_single on Python 3.11 and the workers die.
        import multiprocessing

        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        size = -(-len(texts) // (num_proc * 4))  # a few chunks per worker evens out long texts
        chunks = [(self._args, texts[i : i + size], word_ids) for i in range(0, len(texts), size)]
        # Forked workers find this pipeline in the memo; spawned ones rebuild it from _args.
        # Either way jieba is never pickled.
        _MEMO[self._args] = self
        saved_env = os.environ.get("TOKENIZERS_PARALLELISM")
        # The processes are the parallelism; this also stops tokenizers warning in every
        # worker that it was forked after its thread pool was used.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            with ctx.Pool(num_proc) as pool:
                parts = pool.map(_encode_chunk, chunks)
        finally:
            _MEMO.pop(self._args, None)
            if saved_env is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = saved_env
        return [enc for part in parts for enc in part]

    def _cache_key(self, texts: list[str], word_ids: bool) -> str:
        digest = hashlib.sha1((self.fingerprint + ("" if word_ids else "|no word ids")).encode())
        for t in texts:  # length prefix keeps ["ab", "c"] and ["a", "bc"] apart
            digest.update(f"{len(t)}:".encode() + t.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def save(self, directory: str) -> None:
        """Write vocab.txt and tokenizer_config.json (PaddleNLP ErnieTokenizer format) plus
        ernie_ft_text.json (settings and rules), the user dictionary and the vocabulary extension
        (vocab_extension/), so from_dir(directory) rebuilds this pipeline."""
        from paddlenlp.transformers import ErnieTokenizer

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        user_dict = self._kwargs["user_dict"]
        vocab_file = self.vocab_file
        if vocab_file.endswith(".json"):  # a tokenizer.json's vocabulary: written out line by line, ids kept
            vocab_file = str(out / "vocab.txt")
            Path(vocab_file).write_text("".join(t + "\n" for t in self._lines), encoding="utf-8")
        ErnieTokenizer(vocab_file, do_lower_case=self.lowercase).save_pretrained(str(out))
        meta = {
            "version": PIPELINE_VERSION,
            "lowercase": self.lowercase,
            "segment": self.segment,
            "user_dict": None,
            "vocab_extension": None,
            "exact_spans": self.exact_spans,
            "rules": self.rules,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
        }
        if self.extension is not None:
            self.extension.save(str(out / _EXTENSION_DIR))
            meta["vocab_extension"] = _EXTENSION_DIR
        if user_dict is not None:
            target = out / _USER_DICT_FILE
            if not (target.exists() and os.path.samefile(user_dict, target)):
                shutil.copyfile(user_dict, target)
            meta["user_dict"] = _USER_DICT_FILE
        (out / _META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_dir(cls, directory: str, *, rules: str | None = None) -> TextPipeline:
        """Pipeline for a checkpoint or tokenizer directory.

        Saved by ernie_ft (ernie_ft_text.json): its settings and rules ("ernie_ft" when none is recorded).
        A transformers tokenizer (``is_hf_tokenizer_dir``): rules "bert" with do_lower_case, strip_accents and
        tokenize_chinese_chars from tokenizer_config.json, else from tokenizer.json's BertNormalizer, else
        BertTokenizer's defaults. Otherwise (PaddleNLP): rules "ernie_ft", do_lower_case from
        tokenizer_config.json. The vocabulary is vocab.txt, or tokenizer.json's WordPiece vocabulary.
        ``rules``: these rules instead of the recorded ones (e.g. "paddlenlp" for a model named by PaddleNLP).
        """
        d = Path(directory)
        vocab = d / "vocab.txt" if (d / "vocab.txt").is_file() else d / "tokenizer.json"
        if not vocab.is_file():
            raise UserError(
                f"{d}: no vocab.txt or tokenizer.json in this directory; give a checkpoint directory "
                "saved by ernie_ft, by PaddleNLP's or by transformers' save_pretrained"
            )
        config = _read_json(d / "tokenizer_config.json")
        meta = _read_json(d / _META_FILE)
        kwargs: dict = {}
        if is_hf_tokenizer_dir(str(d)):
            kwargs = _hf_settings(d, config)
        elif "do_lower_case" in config:
            kwargs["lowercase"] = bool(config["do_lower_case"])
        for key in ("lowercase", "segment", "exact_spans", "tokenize_chinese_chars"):
            if key in meta:
                kwargs[key] = bool(meta[key])
        for key in ("rules", "strip_accents"):
            if meta.get(key) is not None:
                kwargs[key] = meta[key]
        for key in ("user_dict", "vocab_extension"):
            if meta.get(key):
                kwargs[key] = str(d / meta[key])
        if rules is not None:
            kwargs["rules"] = rules
        if kwargs.get("rules", "ernie_ft") != "bert":
            kwargs.pop("strip_accents", None)
            kwargs.pop("tokenize_chinese_chars", None)
        return cls(str(vocab), **kwargs)

    def save_hf(self, directory: str, model_max_length: int | None = None) -> list[str]:
        """Write a transformers tokenizer directory: vocab.txt (every id kept: ``hf_vocab_lines``),
        tokenizer_config.json and special_tokens_map.json; for rules other than "bert", which BertTokenizer's
        settings cannot express, also tokenizer.json (loaded by AutoTokenizer and BertTokenizerFast) with these
        rules' character map and splits. Returns the differences from this pipeline that remain, one sentence
        each, for a model card (for rules "bert", only BertTokenizerFast's own, on rare characters)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        lines = hf_vocab_lines(self._lines)
        (out / "vocab.txt").write_text("".join(t + "\n" for t in lines), encoding="utf-8")
        special = dict(zip(("pad_token", "cls_token", "sep_token", "mask_token", "unk_token"), SPECIAL_TOKENS))
        config: dict = {
            "tokenizer_class": "BertTokenizer" if self.rules == "bert" else "BertTokenizerFast",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "do_basic_tokenize": True,
            **special,
        }
        if model_max_length is not None:
            config["model_max_length"] = int(model_max_length)
        differences = list(_HF_DIFFERENCES[self.rules])
        if self.rules != "bert":
            config["ernie_ft_rules"] = self.rules  # read back by from_dir
            self._hf_fast_tokenizer({t: i for i, t in enumerate(lines)}).save(str(out / "tokenizer.json"))
        if self.extension is not None:
            differences.append(
                f"The vocabulary extension's {len(self.extension.pieces)} pieces (ids from {len(self._lines)}) are "
                "placed on jieba words, which a transformers tokenizer cannot do: it never produces them."
            )
        for name, value in (("tokenizer_config.json", config), ("special_tokens_map.json", special)):
            (out / name).write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        return differences

    def _hf_fast_tokenizer(self, vocab: dict) -> Tokenizer:
        """This pipeline's Rust tokenizer with its Python character map in front (a precompiled charsmap, the
        normaliser tokenizers has for arbitrary character maps), BERT's [CLS]/[SEP] template and decoder."""
        from tokenizers import decoders, processors

        tok = self._rust_tokenizer(vocab)
        steps = [normalizers.Precompiled(_precompiled_charsmap(self._char_map()))]
        if self.rules == "paddlenlp":  # dropped characters by Python's tables (most of them unassigned ones)
            steps.insert(0, normalizers.Replace(tokenizers.Regex(_class_of(_dropped_points())), ""))
        tok.normalizer = normalizers.Sequence(steps + ([tok.normalizer] if tok.normalizer is not None else []))
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        tok.decoder = decoders.WordPiece(prefix="##")
        return tok

    def _char_map(self) -> dict[str, str]:
        """Every character ``_prepare`` changes on its own, with what it becomes (rules ernie_ft, paddlenlp)."""
        mapping = {}
        for cp in range(0x110000):
            c = chr(cp)
            if 0xD800 <= cp < 0xE000 or c == "\x00" or _UNCHANGED.match(c):
                continue
            if self.rules == "ernie_ft":
                r = _normalize_char.__wrapped__(c)
                if r != c and (c not in self._keep or not r.strip()):
                    mapping[c] = r
            elif not _dropped(c) and (r := _basic_unit.__wrapped__(c, self.lowercase, self._strip, False)) != c:
                mapping[c] = r
        return mapping


_HF_DIFFERENCES = {
    "bert": (
        "AutoTokenizer gives BertTokenizerFast, which transformers converts from vocab.txt; it differs from "
        "BertTokenizer, whose rules ernie_ft follows, on rare characters only: code points Unicode 14 leaves "
        "unassigned, punctuation newer than the tokenizers library's tables, decomposed accents when cased (no "
        "NFC) and U+2B820-U+2B91F (not split as Chinese characters). BertTokenizer gives ernie_ft's ids exactly.",
    ),
    "ernie_ft": (
        "Only the fast tokenizer (tokenizer.json: AutoTokenizer, BertTokenizerFast) applies ernie_ft's rules; "
        "BertTokenizer (slow) reads vocab.txt alone, so it keeps full-width forms and does not split symbols.",
        "A character that ernie_ft's NFKC map changes, followed by combining marks (e.g. 'Ａ' + U+0301), is mapped "
        "with its marks as one unit in tokenizer.json and loses them; ernie_ft keeps them (lower-cased models "
        "strip them either way).",
        "[CLS], [SEP], [PAD], [MASK] and [UNK] written in a text are one special token each in transformers; "
        "ernie_ft splits them like other text.",
    ),
    "paddlenlp": (
        "Only the fast tokenizer (tokenizer.json: AutoTokenizer, BertTokenizerFast) applies PaddleNLP's rules; "
        "BertTokenizer (slow) reads vocab.txt alone, so it does not split symbols such as '～' from words.",
        "A character that PaddleNLP lower-cases or strips of accents, followed by combining marks, is mapped with "
        "its marks as one unit in tokenizer.json and loses them; PaddleNLP keeps them only when cased.",
    ),
}


def hf_vocab_lines(lines: list[str]) -> list[str]:
    """The vocabulary's lines for transformers: every line of a repeated token but its last (the one whose id
    both transformers and ernie_ft use) becomes ``[unused-repeat-N]`` (N: its id), so that transformers'
    load and save_pretrained round trip keeps every id."""
    last = {tok: i for i, tok in enumerate(lines)}
    return [tok if last[tok] == i else f"[unused-repeat-{i}]" for i, tok in enumerate(lines)]


def is_hf_tokenizer_dir(directory: str) -> bool:
    """Whether ``directory`` holds a transformers BERT-style tokenizer (rules "bert"), not one saved by ernie_ft
    or PaddleNLP: tokenizer_config.json names BertTokenizer(Fast), or without a tokenizer class config.json's
    model_type is bert or ernie, or there is only a tokenizer.json; never with PaddleNLP's paddlenlp_version."""
    d = Path(directory)
    if (d / _META_FILE).is_file():
        return False
    model = _read_json(d / "config.json")
    if "paddlenlp_version" in model:
        return False
    config = _read_json(d / "tokenizer_config.json")
    if config.get("tokenizer_class"):
        return config["tokenizer_class"] in ("BertTokenizer", "BertTokenizerFast")
    if model:
        return model.get("model_type") in ("bert", "ernie")
    return not config and not (d / "vocab.txt").is_file() and (d / "tokenizer.json").is_file()


def _hf_settings(d: Path, config: dict) -> dict:
    """TextPipeline keywords of a transformers tokenizer directory (see ``from_dir``)."""
    if config.get("do_basic_tokenize") is False:
        raise UserError(
            f"{d / 'tokenizer_config.json'}: do_basic_tokenize is false (WordPiece on raw whitespace words); "
            "ernie_ft follows BertTokenizer's basic tokenization only"
        )
    keys = ("do_lower_case", "strip_accents", "tokenize_chinese_chars")
    normalizer: dict = {}
    if (d / "tokenizer.json").is_file() and not all(k in config for k in keys):
        normalizer = _tokenizer_json(d / "tokenizer.json").get("normalizer") or {}
        normalizer = normalizer if normalizer.get("type") == "BertNormalizer" else {}
    rules = config.get("ernie_ft_rules", "bert")  # tokenizers written by save_hf say whose rules they follow
    kwargs = {"rules": rules, "lowercase": bool(config.get("do_lower_case", normalizer.get("lowercase", True)))}
    if rules == "bert":
        kwargs["strip_accents"] = config.get("strip_accents", normalizer.get("strip_accents"))
        kwargs["tokenize_chinese_chars"] = config.get(
            "tokenize_chinese_chars", normalizer.get("handle_chinese_chars", True)
        )
    return kwargs


@lru_cache(maxsize=1)
def _dropped_points() -> tuple[int, ...]:
    return tuple(cp for cp in range(0x110000) if _dropped(chr(cp)))


def _class_of(points) -> str:
    """An Oniguruma character class of these code points, as ranges."""
    merged: list[list[int]] = []
    for cp in sorted(points):
        if merged and cp == merged[-1][1] + 1:
            merged[-1][1] = cp
        else:
            merged.append([cp, cp])
    return "[" + "".join(f"\\x{{{lo:X}}}" + (f"-\\x{{{hi:X}}}" if hi > lo else "") for lo, hi in merged) + "]"


def _precompiled_charsmap(mapping: dict[str, str]) -> bytes:
    """A sentencepiece precompiled charsmap (tokenizers' ``Precompiled`` normaliser) of a character map."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    stderr = 2  # C's stderr, whatever sys.stderr is
    sys.stderr.flush()
    saved = os.dup(stderr)
    try:  # sentencepiece's C++ logging writes straight to file descriptor 2
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), stderr)
            spec = spm.SentencePieceNormalizer(
                norm_map=sorted(mapping.items()),
                add_dummy_prefix=False,
                escape_whitespaces=False,
                remove_extra_whitespaces=False,
            ).serialized_normalizer_spec()
    finally:
        os.dup2(saved, stderr)
        os.close(saved)
    parsed = sentencepiece_model_pb2.NormalizerSpec()
    parsed.ParseFromString(spec)
    return parsed.precompiled_charsmap


def saved_extension(directory: str) -> str | None:
    """The vocabulary extension saved in a checkpoint directory (its weights already have the rows)."""
    name = _read_json(Path(directory) / _META_FILE).get("vocab_extension")
    return str(Path(directory) / name) if name else None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); fix or delete the file") from None


_MEMO: dict[tuple, TextPipeline] = {}


def _encode_chunk(job: tuple) -> list[Encoding]:
    """Worker: encode texts with the pipeline for these constructor args, built once per process."""
    args, texts, word_ids = job
    pipe = _MEMO.get(args)
    if pipe is None:
        pipe = _MEMO[args] = TextPipeline(**dict(args))
    return pipe._encode_texts(texts, word_ids)


def _write_table(path: Path, encodings: list[Encoding]) -> None:
    import pyarrow as pa

    ints = pa.list_(pa.int32())
    table = pa.table(
        {
            "ids": pa.array([e.ids for e in encodings], ints),
            "starts": pa.array([[s for s, _ in e.offsets] for e in encodings], ints),
            "ends": pa.array([[t for _, t in e.offsets] for e in encodings], ints),
            "word_ids": pa.array([e.word_ids for e in encodings], ints),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # renamed into place: readers never see half a file
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest = path.with_name(path.name + ".sha256")
    digest_tmp = digest.with_name(f"{digest.name}.{os.getpid()}.tmp")
    digest_tmp.write_text(hashlib.sha256(tmp.read_bytes()).hexdigest() + "\n", encoding="ascii")
    os.replace(tmp, path)  # a process killed between the two leaves a digest that does not match: rebuilt
    os.replace(digest_tmp, digest)


def _read_table(path: Path, rows: int) -> list[Encoding] | None:
    """The encodings cached at ``path``, or None unless its bytes match its recorded SHA-256 and it
    holds ``rows`` rows."""
    import pyarrow as pa

    try:
        data = path.read_bytes()
        expected = path.with_name(path.name + ".sha256").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        return None
    try:
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
    except (pa.ArrowException, OSError):
        return None
    return _from_table(table) if table.num_rows == rows else None


def _from_table(table) -> list[Encoding]:
    cols = [table.column(name).to_pylist() for name in ("ids", "starts", "ends", "word_ids")]
    return [Encoding(ids, list(zip(starts, ends)), word_ids) for ids, starts, ends, word_ids in zip(*cols)]
