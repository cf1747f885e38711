"""Text pipeline: Unicode normalisation, jieba words, WordPiece ids with original-text offsets.

Normalisation and segmentation happen here in Python; WordPiece is HF `tokenizers` (Rust) with
PaddleNLP's BasicTokenizer rules. jieba never changes a base id: it gives each token its word
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


def _read_vocab(vocab_file: str) -> tuple[dict, list[str]]:
    """(token -> id, the file's lines) of a vocab.txt; a UserError when it cannot be read or lacks a special token."""
    try:  # line splitting as PaddleNLP's load_vocabulary; str.splitlines would also split on \u2028
        with open(vocab_file, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"vocab file {vocab_file}: cannot read it as UTF-8 text ({e}); give a vocab.txt with one token per line"
        ) from None
    # A repeated token keeps its last id, as PaddleNLP does ('$' is on two lines of ERNIE 3.0).
    vocab = {tok: i for i, tok in enumerate(lines)}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise UserError(
            f"vocab file {vocab_file}: missing special tokens {', '.join(missing)}; "
            "use the checkpoint's vocab.txt or one written by build_vocab"
        )
    return vocab, lines


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


class TextPipeline:
    """Text -> Encoding for one vocabulary, casing, jieba user dictionary and segmentation mode."""

    def __init__(
        self,
        vocab_file: str,
        *,
        lowercase: bool = True,
        user_dict: str | None = None,
        segment: bool = True,
        vocab_extension: str | None = None,
        exact_spans: bool = False,
    ):
        """``vocab_extension``: a directory written by ``python -m ernie_ft.vocab learn``; its pieces
        get ids after the vocabulary's. ``exact_spans``: keep the extension's ids (the model's size)
        but encode characters as the base vocabulary does, so span boundaries inside a piece stay
        reachable (token and span heads)."""
        self._kwargs = dict(
            vocab_file=str(vocab_file),
            lowercase=bool(lowercase),
            user_dict=None if user_dict is None else str(user_dict),
            segment=bool(segment),
            vocab_extension=None if vocab_extension is None else str(vocab_extension),
            exact_spans=bool(exact_spans),
        )
        self._args = tuple(self._kwargs.items())
        self.vocab_file = str(vocab_file)
        self.lowercase, self.segment, self.exact_spans = bool(lowercase), bool(segment), bool(exact_spans)
        self.last_cache_hit = False
        self.vocab, lines = _read_vocab(vocab_file)
        vocab = self.vocab
        self.vocab_size = len(lines)  # ids run to len-1 even when tokens repeat
        # Full-width letters and digits always become ASCII ('３０' would be one unknown word);
        # other characters the vocabulary has (full-width punctuation such as '，') stay.
        self._keep = frozenset(t for t in vocab if len(t) == 1 and not (t.isalnum() and "\uff01" <= t <= "\uff5e"))
        self.pad_id, self.cls_id, self.sep_id, self.mask_id, self.unk_id = (vocab[t] for t in SPECIAL_TOKENS)
        self._tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        self._tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=self.lowercase
        )
        # As PaddleNLP's BasicTokenizer: symbols, kana, Greek/Cyrillic and IPA stand alone ('4～6' is
        # '4 ～ 6'), then BERT's whitespace and punctuation split.
        self._tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(tokenizers.Regex(_SPECIAL_CHARS), behavior="isolated"),
                pre_tokenizers.BertPreTokenizer(),
            ]
        )

        digest = hashlib.sha1(
            f"{PIPELINE_VERSION}|{self.lowercase}|{self.segment}|{jieba.__version__}|{tokenizers.__version__}|".encode()
        )
        digest.update(Path(vocab_file).read_bytes())
        self._jieba = _Segmenter()  # private: the global one is shared with user code
        if user_dict is not None:
            digest.update(b"|user_dict|" + _load_user_dict(self._jieba, user_dict))
        self.extension = None
        if vocab_extension is not None:
            from ernie_ft.text.extension import VocabExtension

            if not self.segment:
                raise UserError(
                    f"--vocab-extension {vocab_extension}: pieces live inside jieba words; it needs segment=True"
                )
            self.extension = VocabExtension(vocab_extension, vocab, vocab_file, self.vocab_size)
            self.vocab_size += len(self.extension.pieces)
            digest.update(f"|extension|{self.extension.digest}|{self.exact_spans}".encode())
        self.fingerprint = digest.hexdigest()

    def replace(self, **changes) -> TextPipeline:
        """A pipeline with the same settings except ``changes`` (constructor keywords)."""
        return TextPipeline(**{**self._kwargs, **changes})

    def normalize(self, text: str) -> tuple[str, list[int]]:
        """Full-width ASCII and U+3000 to half-width and NFKC per character, except for characters the
        vocabulary has as tokens; Cc/Cf dropped (\\t \\n \\r become spaces).
        Returns (normalised text, original index of each of its characters)."""
        return normalize_text(text, self._keep)

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
        norm = normalize_text(text, self._keep)[0]
        return [norm[s:e] for s, e in self._spans(norm)]

    def words(self, text: str) -> list[tuple[int, int]]:
        """jieba word spans [start, end) in original-text offsets, whitespace-only words dropped."""
        norm, index = normalize_text(text, self._keep)
        return [(index[s], index[e - 1] + 1) for s, e in self._spans(norm)]

    def encode(self, text: str) -> Encoding:
        """Ids, original-text offsets and word ids of one text (no special tokens, no truncation)."""
        return self._encode_texts([text])[0]

    def _needs_jieba(self, word_ids: bool) -> bool:
        return word_ids or (self.extension is not None and not self.exact_spans)

    def _encode_texts(self, texts: list[str], word_ids: bool = True) -> list[Encoding]:
        prepared = [_normalize(text, self._keep) for text in texts]
        norms = [norm for norm, _ in prepared]
        if len(norms) == 1:
            encs = [self._tok.encode(norms[0], add_special_tokens=False)]
        else:
            encs = self._tok.encode_batch(norms, add_special_tokens=False)
        segment = self._needs_jieba(word_ids)
        out = []
        for (norm, index), enc in zip(prepared, encs):
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
            offsets = norm_offsets if index is None else [(index[a], index[b - 1] + 1) for a, b in norm_offsets]
            out.append(Encoding(ids, offsets, words))
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
        ernie_ft_text.json, the user dictionary and the vocabulary extension (vocab_extension/), so
        from_dir(directory) rebuilds this pipeline."""
        from paddlenlp.transformers import ErnieTokenizer

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        user_dict = self._kwargs["user_dict"]
        ErnieTokenizer(self.vocab_file, do_lower_case=self.lowercase).save_pretrained(str(out))
        meta = {
            "version": PIPELINE_VERSION,
            "lowercase": self.lowercase,
            "segment": self.segment,
            "user_dict": None,
            "vocab_extension": None,
            "exact_spans": self.exact_spans,
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
    def from_dir(cls, directory: str) -> TextPipeline:
        """Pipeline for a checkpoint directory: vocab.txt, do_lower_case from tokenizer_config.json,
        and lowercase/segment/user dictionary/extension/exact_spans from ernie_ft_text.json when present."""
        d = Path(directory)
        if not (d / "vocab.txt").is_file():
            raise UserError(
                f"{d}: no vocab.txt in this directory; give a checkpoint directory "
                "saved by ernie_ft or by PaddleNLP's save_pretrained"
            )
        kwargs: dict = {}
        config = _read_json(d / "tokenizer_config.json")
        if "do_lower_case" in config:
            kwargs["lowercase"] = bool(config["do_lower_case"])
        meta = _read_json(d / _META_FILE)
        for key in ("lowercase", "segment", "exact_spans"):
            if key in meta:
                kwargs[key] = bool(meta[key])
        for key in ("user_dict", "vocab_extension"):
            if meta.get(key):
                kwargs[key] = str(d / meta[key])
        return cls(str(d / "vocab.txt"), **kwargs)


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
