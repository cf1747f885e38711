"""A pretraining corpus: documents streamed from files, held out by hash, packed into blocks of
tokens that are cached as Arrow files and memory-mapped.

A block is ``[CLS] line [SEP] line [SEP] ... [SEP]``: consecutive lines fill ``--max-len`` tokens,
across documents, so almost nothing is padding; a line that does not fit is cut at a jieba word
boundary and continues in the next block. Every token keeps the number of its jieba word within
the block (-1 for special tokens), which is what whole-word masking needs. Nothing but the
current chunk of lines is held in memory, so a corpus larger than RAM works.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

import numpy as np

from .errors import UserError
from .readers import TEXT_COLUMNS, encoding_message, read_records

PACK_VERSION = 1
"""Bump when packing changes, so old caches stop matching."""
CHUNK_LINES = 20_000
"""Lines tokenised at a time (the memory bound of building the cache)."""
BATCH_BLOCKS = 4096
"""Blocks per Arrow record batch."""
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_TABULAR = (".tsv", ".csv", ".jsonl", ".json", ".jsonlines")


@dataclass(frozen=True)
class Corpus:
    """Which documents of which files: the files themselves are read only when needed."""

    files: tuple
    flag: str
    text_column: Optional[str] = None
    part: str = "all"
    """'all', or the 'train' or 'dev' side of a ``fraction`` hold-out (by a hash of each document)."""
    fraction: float = 0.0
    documents: int = 0
    """Documents in this part (set by ``scan``)."""
    paragraphs: dict = field(default_factory=dict, compare=False, hash=False)
    """Per .txt file: True when blank lines separate its documents, else one document per line."""
    digest: str = ""
    """SHA-1 of the files' bytes and the column: with ``part`` and ``fraction``, names the cache."""

    def __len__(self) -> int:
        return self.documents

    def held_out(self, fraction: float) -> tuple["Corpus", "Corpus"]:
        """(train, dev) parts of the whole corpus: each document goes to dev with probability ``fraction``,
        decided by a hash of its text, so the same documents every run and in every process."""
        dev_docs = sum(1 for _, doc in self.iter_documents() if _held_out(doc, fraction))
        return (replace(self, part="train", fraction=fraction, documents=self.documents - dev_docs),
                replace(self, part="dev", fraction=fraction, documents=dev_docs))

    def iter_documents(self) -> Iterator[tuple[str, list[str]]]:
        """(file, lines) for every document of this part, in file order."""
        for path in self.files:
            for lines in _documents(path, self.flag, self.text_column, self.paragraphs.get(path, False)):
                if self.part == "all" or _held_out(lines, self.fraction) == (self.part == "dev"):
                    yield path, lines


def _held_out(lines: list[str], fraction: float) -> bool:
    h = hashlib.sha1("\n".join(lines).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(h[:8], "big") < fraction * 2.0 ** 64


def expand_files(spec: str, flag: str) -> tuple:
    """The files of a --corpus value: paths and glob patterns separated by os.pathsep."""
    files = []
    for pattern in filter(None, spec.split(os.pathsep)):
        if glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            if not matches:
                raise UserError(f"{flag} {pattern}: no file matches this pattern")
            files += matches
        elif not os.path.exists(pattern):
            raise UserError(f"{flag} {pattern}: file not found (relative paths start at {os.getcwd()})")
        elif os.path.isdir(pattern):
            raise UserError(f"{flag} {pattern} is a directory; give its files, e.g. {os.path.join(pattern, '*.txt')}")
        else:
            files.append(pattern)
    if not files:
        raise UserError(f"{flag} is required: one or more text files (.txt one document per line, or TSV/CSV/JSONL)")
    return tuple(dict.fromkeys(files))


def scan(spec: str, flag: str, text_column: Optional[str] = None) -> Corpus:
    """Read every file once: check it (UTF-8, some Chinese text) and count its documents.
    Any problem is a UserError naming the file and line, raised before anything is written."""
    files = expand_files(spec, flag)
    digest = hashlib.sha1(f"{PACK_VERSION}|{text_column}".encode())
    paragraphs, documents, chinese = {}, 0, 0
    for path in files:
        digest.update(f"|{os.path.basename(path)}|".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if not path.lower().endswith(_TABULAR):
            paragraphs[path] = _has_blank_line_between(path)
        for lines in _documents(path, flag, text_column, paragraphs.get(path, False)):
            documents += 1
            chinese += sum(len(_CJK.findall(line)) for line in lines) if chinese < 100 else 0
    names = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    if documents == 0:
        raise UserError(f"{flag}: no text in {names}; give UTF-8 text files with one document per line")
    if chinese == 0:
        raise UserError(f"{flag}: no Chinese characters in the {documents} documents of {names}; ernie_ft pretrains "
                        "Chinese models: check the files (and --text-column for TSV/CSV/JSONL)")
    return Corpus(files, flag, text_column, documents=documents, paragraphs=paragraphs, digest=digest.hexdigest())


def _has_blank_line_between(path: str) -> bool:
    seen_text = blank = False
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                if blank and seen_text:
                    return True
                seen_text = True
            else:
                blank = True
    return False


def _documents(path: str, flag: str, text_column: Optional[str], paragraphs: bool) -> Iterator[list[str]]:
    """The documents of one file, each a list of non-empty lines."""
    if path.lower().endswith(".json") and _is_squad(path):  # reading comprehension: each context once
        from .qa_formats import read_qa

        examples, _ = read_qa(path, flag, labelled=False)
        for context in dict.fromkeys(e.context for e in examples):
            lines = [s for s in (part.strip() for part in context.splitlines()) if s]
            if lines:
                yield lines
        return
    if path.lower().endswith(_TABULAR):
        columns, rows = read_records(path, flag)
        lowered = {c.lower(): c for c in columns}
        column = text_column if text_column is not None else next(
            (lowered[c] for c in TEXT_COLUMNS if c in lowered), None)
        if column not in columns:
            raise UserError(f"{flag}: {path} has no {'column ' + repr(column) if column else 'text column'}; columns "
                            f"found: {', '.join(columns)}. Name the text column with --text-column")
        for line, record in rows:
            text = record.get(column)
            if not isinstance(text, str):
                raise UserError(f"{flag}: {path}:{line}: {column!r} is {type(text).__name__}, not text")
            lines = [s for s in (part.strip() for part in text.splitlines()) if s]
            if lines:
                yield lines
        return
    document = []
    for line in _text_lines(path, flag):
        if line:
            document.append(line)
            if not paragraphs:
                yield document
                document = []
        elif document:
            yield document
            document = []
    if document:
        yield document


def _is_squad(path: str) -> bool:
    """Whether a .json file is one SQuAD-style object ({"data": [...]}), not JSON Lines."""
    import json

    with open(path, "rb") as f:
        first = f.readline(1 << 20).strip()
    try:  # a JSON Lines file's first line is a whole record; a pretty-printed SQuAD file's is "{"
        record = json.loads(first)
    except ValueError:
        return first.startswith(b"{")
    return isinstance(record, dict) and isinstance(record.get("data"), list)


def _text_lines(path: str, flag: str) -> Iterator[str]:
    """Stripped lines of a UTF-8 text file, streamed; bad bytes are a UserError with the line number."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if b"\x00" in raw:
                raise UserError(f"{flag}: {path}:{number}: contains NUL bytes, so it is binary or UTF-16; "
                                "save it as UTF-8 text")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(encoding_message(f"{flag}: {path}", path, raw, e.start, first_line=number)) from None
            yield line.strip()


class Packer:
    """Lines of token ids -> blocks of at most ``max_len`` tokens (see the module docstring)."""

    def __init__(self, max_len: int, cls_id: int, sep_id: int):
        self.room = max_len - 2  # [CLS] and the closing [SEP]
        self.cls_id, self.sep_id = cls_id, sep_id
        self.ids: list[int] = []
        self.words: list[int] = []
        self.next_word = 0
        self.done: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, ids: list[int], word_ids: list[int]) -> None:
        """One line's tokens and the jieba word (within the line) of each."""
        base, pos, n = self.next_word, 0, len(ids)
        while pos < n:
            sep = 1 if self.ids else 0
            space = self.room - len(self.ids) - sep
            if space < 1:
                self.flush()
                continue
            take = n - pos
            if take > space:
                take = _word_cut(word_ids, pos, space)
                if take == 0 and self.ids:  # start the line's first word in a block of its own
                    self.flush()
                    continue
                take = take or space  # one word longer than a whole block: cut it
            if sep:
                self.ids.append(self.sep_id)
                self.words.append(-1)
            self.ids += ids[pos:pos + take]
            self.words += [base + w for w in word_ids[pos:pos + take]]
            pos += take
        if n:
            self.next_word = base + max(word_ids) + 1

    def flush(self) -> None:
        if not self.ids:
            return
        ids = np.array([self.cls_id, *self.ids, self.sep_id], dtype=np.int32)
        words = np.array([-1, *self.words, -1], dtype=np.int64)
        content = words >= 0
        if content.any():
            words[content] -= words[content].min()  # small numbers, local to the block
        self.done.append((ids, words.astype(np.int32)))
        self.ids, self.words = [], []

    def take(self) -> list[tuple[np.ndarray, np.ndarray]]:
        done, self.done = self.done, []
        return done


def _word_cut(word_ids: list[int], pos: int, space: int) -> int:
    """The most tokens from ``pos`` (at most ``space``) that end at a word boundary; 0 if none do."""
    for k in range(space, 0, -1):
        if word_ids[pos + k] != word_ids[pos + k - 1]:
            return k
    return 0


def pack(corpus: Corpus, pipeline, max_len: int, path: str, num_proc: int = 1) -> dict:
    """Tokenise and pack ``corpus`` into an Arrow stream file at ``path``; returns counts."""
    import pyarrow as pa

    ints = pa.list_(pa.int32())
    schema = pa.schema([("input_ids", ints), ("words", ints)])
    packer = Packer(max_len, pipeline.cls_id, pipeline.sep_id)
    counts = {"documents": 0, "lines": 0, "tokens": 0, "blocks": 0}

    def write(writer, blocks):
        if blocks:
            writer.write_batch(pa.record_batch([pa.array([b[0] for b in blocks], ints),
                                                pa.array([b[1] for b in blocks], ints)], schema=schema))
            counts["blocks"] += len(blocks)

    def encode(lines, writer):
        for enc in pipeline.encode_many(lines, num_proc=num_proc):
            packer.add(enc.ids, enc.word_ids)
            counts["tokens"] += len(enc.ids)
        write(writer, packer.take())

    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        chunk = []
        for _, lines in corpus.iter_documents():
            counts["documents"] += 1
            chunk += lines
            if len(chunk) >= CHUNK_LINES:
                counts["lines"] += len(chunk)
                encode(chunk, writer)
                chunk = []
        counts["lines"] += len(chunk)
        encode(chunk, writer)
        packer.flush()
        write(writer, packer.take())
    return counts


class Blocks:
    """Packed blocks read from a memory-mapped Arrow file: ``blocks[i]`` is a feature dict
    ({'input_ids', 'words', 'doc': i}), ``lengths`` every block's length, nothing copied into memory."""

    def __init__(self, path: str):
        import pyarrow as pa

        table = pa.ipc.open_stream(pa.memory_map(path)).read_all()
        self.path = path
        self._chunks = []
        starts = [0]
        for ids, words in zip(table.column("input_ids").chunks, table.column("words").chunks):
            self._chunks.append((ids.offsets.to_numpy(), ids.values.to_numpy(), words.values.to_numpy()))
            starts.append(starts[-1] + len(ids))
        self._starts = np.array(starts)
        self.lengths = np.concatenate([np.diff(c[0]) for c in self._chunks]) if self._chunks else np.zeros(0, int)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        c = int(np.searchsorted(self._starts, i, side="right")) - 1
        offsets, ids, words = self._chunks[c]
        j = i - self._starts[c]
        a, b = offsets[j], offsets[j + 1]
        return {"input_ids": ids[a:b], "words": words[a:b], "doc": i}

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def cached_blocks(corpus: Corpus, pipeline, max_len: int, cache_dir: str, num_proc: int = 1) -> tuple[Blocks, str]:
    """The blocks of ``corpus`` from the cache, packing them first on a miss; (blocks, 'cache' or 'tokenised').

    The cache file is named by the corpus bytes, the part, the pipeline and ``max_len``, written to
    a temporary name and renamed into place, so a killed run never leaves half a file behind.
    """
    key = hashlib.sha1(f"{corpus.digest}|{corpus.part}|{corpus.fraction!r}|{pipeline.fingerprint}|{max_len}"
                       .encode()).hexdigest()
    path = os.path.join(cache_dir, f"blocks-{key}.arrow")
    if os.path.isfile(path):
        return Blocks(path), "cache"
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        counts = pack(corpus, pipeline, max_len, tmp, num_proc)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    blocks = Blocks(path)
    padding = 1 - blocks.lengths.sum() / max(1, len(blocks) * max_len)
    print(f"{corpus.flag} ({corpus.part}): {counts['documents']} documents, {counts['lines']} lines, "
          f"{counts['tokens']:,} tokens -> {len(blocks)} blocks of up to {max_len} tokens ({padding:.1%} "
          f"padding); cached in {path}", file=sys.stderr)
    return blocks, "tokenised"
