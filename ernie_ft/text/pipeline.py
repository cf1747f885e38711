"""Text pipeline: a text to WordPiece ids with original-text offsets and jieba word ids (``TextPipeline``).

Normalisation happens in Python, by one of three rule sets chosen by a checkpoint's origin (``RULES``, in
``rules``): ``"ernie_ft"`` (per-character NFKC, then PaddleNLP's BasicTokenizer splits, the default), ``"bert"``
(exactly transformers' BertTokenizer) and ``"paddlenlp"`` (exactly PaddleNLP's ErnieTokenizer); WordPiece is HF
`tokenizers` (Rust). jieba (``segmenter``) never changes a base id: it gives each token its word
(``Encoding.word_ids``, for whole-word masking) and places a vocabulary extension's pieces. Asked
for no word ids (``encode_many(word_ids=False)``) and without an extension, a text costs its
normalisation and the Rust tokenizer only: jieba, most of the cost on Chinese text, does not run.

Vocabulary files are read in ``vocab_files``; directories in ``tokenizer_dir`` (transformers' in
``hf_tokenizer``); ``encode_many``'s cache and process pool live in ``cache``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import sys
import unicodedata
from pathlib import Path

import tokenizers

from ernie_ft.errors import UserError
from ernie_ft.text.cache import can_store, encode_in_processes, read_table, write_table
from ernie_ft.text.encoding import Encoding
from ernie_ft.text.hf_tokenizer import write_hf_tokenizer
from ernie_ft.text.rules import (
    RULES,
    RULES_VERSION,
    char_map,
    normalize_basic,
    normalize_nfkc,
    normalize_text,
    rust_tokenizer,
)
from ernie_ft.text.tokenizer_dir import is_hf_tokenizer_dir, read_tokenizer_dir, saved_extension, write_tokenizer_dir
from ernie_ft.text.vocab_files import SPECIAL_TOKENS, hf_vocab_lines, read_vocab, warn_repeated_lines

__all__ = [
    "PIPELINE_VERSION",
    "RULES",
    "RULES_VERSION",
    "SPECIAL_TOKENS",
    "Encoding",
    "TextPipeline",
    "hf_vocab_lines",
    "is_hf_tokenizer_dir",
    "normalize_text",
    "saved_extension",
]

# Bump when normalisation or segmentation changes, so old encode_many caches stop matching.
PIPELINE_VERSION = 2
ENCODE_CHUNK = 4096
"""Texts tokenised together by one call of the Rust tokenizer (its threads share them); the ids do not depend on it."""


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
        self.vocab, self._lines, vocab_bytes = read_vocab(self.vocab_file)
        vocab = self.vocab
        self.vocab_size = len(self._lines)  # ids run to len-1 even when tokens repeat
        if rules == "bert":
            warn_repeated_lines(self.vocab_file, self._lines)
        self.pad_id, self.cls_id, self.sep_id, self.mask_id, self.unk_id = (vocab[t] for t in SPECIAL_TOKENS)
        self._keep = frozenset()
        if rules == "ernie_ft":
            # Full-width letters and digits always become ASCII ('３０' would be one unknown word);
            # other characters the vocabulary has (full-width punctuation such as '，') stay.
            self._keep = frozenset(t for t in vocab if len(t) == 1 and not (t.isalnum() and "\uff01" <= t <= "\uff5e"))
        # BasicTokenizer strips accents when lower-casing unless told otherwise; NFC is transformers' only.
        self._strip = self.lowercase if self.strip_accents is None else self.strip_accents
        self._compose = rules == "bert"
        self._tok = rust_tokenizer(vocab, rules, self.lowercase, self.tokenize_chinese_chars)
        self.fingerprint = self._load_words_and_extension(self._base_digest(vocab_bytes), user_dict)

    def _base_digest(self, vocab_bytes: bytes):
        """The fingerprint's hash of the settings, vocabulary (``vocab_bytes``: the file's) and rules (the words
        and extension follow)."""
        jieba = importlib.metadata.version("jieba")  # read without importing it (see _jieba)
        digest = hashlib.sha1(
            f"{PIPELINE_VERSION}|{self.lowercase}|{self.segment}|{jieba}|{tokenizers.__version__}|".encode()
        )
        if self.rules == "ernie_ft":
            digest.update(vocab_bytes)
        else:  # the lines, whichever file holds them; the rules follow Python's Unicode tables
            digest.update(
                f"rules|{self.rules}|{RULES_VERSION}|{self._strip}|{self.tokenize_chinese_chars}|"
                f"{unicodedata.unidata_version}|".encode()
            )
            digest.update("\n".join(self._lines).encode("utf-8"))
        return digest

    def _load_words_and_extension(self, digest, user_dict: str | None) -> str:
        """Set up jieba (with the user dictionary) and the vocabulary extension; the fingerprint with them."""
        self._segmenter = None
        if user_dict is not None:
            from ernie_ft.text.segmenter import load_user_dict

            digest.update(b"|user_dict|" + load_user_dict(self._jieba, user_dict))
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

    @property
    def _jieba(self):
        """The pipeline's own jieba segmenter (the global one is shared with user code), made when first asked for: a
        pipeline that never segments (no word ids, no vocabulary extension: running an export) never imports jieba,
        whose import and dictionary take most of a second."""
        if self._segmenter is None:
            from ernie_ft.text.segmenter import Segmenter

            self._segmenter = Segmenter()
        return self._segmenter

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
            norm, index = normalize_nfkc(text, self._keep)
            return norm, index, None
        return normalize_basic(text, self.lowercase, self._strip, self._compose and not self._strip)

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
        """``_encode_chunk`` over ``ENCODE_CHUNK`` texts at a time: each chunk's per-character maps and the Rust
        encodings (tokens, masks and offsets of every text) are freed before the next, so what stays is the
        ``Encoding``s alone (keeping them for a whole 10^6-line file more than doubled the peak memory)."""
        if len(texts) <= ENCODE_CHUNK:
            return self._encode_chunk(texts, word_ids)
        out = []
        for i in range(0, len(texts), ENCODE_CHUNK):
            out += self._encode_chunk(texts[i : i + ENCODE_CHUNK], word_ids)
        return out

    def _encode_chunk(self, texts: list[str], word_ids: bool) -> list[Encoding]:
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
        cache_dir = cache_dir if can_store() else None
        path = Path(cache_dir) / f"{self._cache_key(texts, word_ids)}.arrow" if cache_dir is not None else None
        if path is not None and path.is_file():
            cached = read_table(path, len(texts))
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
            encodings = encode_in_processes(self, self._args, texts, num_proc, word_ids)
        if path is not None:
            write_table(path, encodings)
        return encodings

    def _cache_key(self, texts: list[str], word_ids: bool) -> str:
        digest = hashlib.sha1((self.fingerprint + ("" if word_ids else "|no word ids")).encode())
        for t in texts:  # length prefix keeps ["ab", "c"] and ["a", "bc"] apart
            digest.update(f"{len(t)}:".encode() + t.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def save(self, directory: str) -> None:
        """Write vocab.txt and tokenizer_config.json (PaddleNLP ErnieTokenizer format) plus
        ernie_ft_text.json (settings and rules), the user dictionary and the vocabulary extension
        (vocab_extension/), so from_dir(directory) rebuilds this pipeline."""
        meta = {
            "version": PIPELINE_VERSION,
            "lowercase": self.lowercase,
            "segment": self.segment,
            "user_dict": None,  # the copied file's name, filled in when it is written
            "vocab_extension": None,  # the saved extension's directory, likewise
            "exact_spans": self.exact_spans,
            "rules": self.rules,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
        }
        write_tokenizer_dir(directory, self.vocab_file, self._lines, meta, self._kwargs["user_dict"], self.extension)

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
        vocab_file, kwargs = read_tokenizer_dir(directory, rules)
        return cls(vocab_file, **kwargs)

    def save_hf(self, directory: str, model_max_length: int | None = None) -> list[str]:
        """Write a transformers tokenizer directory: vocab.txt (every id kept: ``hf_vocab_lines``),
        tokenizer_config.json and special_tokens_map.json; for rules other than "bert", which BertTokenizer's
        settings cannot express, also tokenizer.json (loaded by AutoTokenizer and BertTokenizerFast) with these
        rules' character map and splits. Returns the differences from this pipeline that remain, one sentence
        each, for a model card (for rules "bert", only BertTokenizerFast's own, on rare characters)."""
        chars = None if self.rules == "bert" else char_map(self.rules, self._keep, self.lowercase, self._strip)
        return write_hf_tokenizer(self, directory, self._lines, chars, model_max_length)
