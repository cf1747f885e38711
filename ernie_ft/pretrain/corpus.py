"""A pretraining corpus: which files, which documents (read as streams, checked before anything is
written), and which of them are held out as dev (by a hash of each document). ``blocks.py`` packs
and caches its tokens."""

from __future__ import annotations

import glob
import hashlib
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from ernie_ft.data.readers import PAIR_COLUMNS, TEXT_COLUMNS, default_column
from ernie_ft.data.sources import encoding_message, read_records
from ernie_ft.errors import UserError

PACK_VERSION = 2
"""Bump when packing changes, so old caches stop matching (2: a pair column's text joins its record)."""
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_TABULAR = (".tsv", ".csv", ".jsonl", ".json", ".jsonlines")


@dataclass(frozen=True)
class Corpus:
    """Which documents of which files: the files themselves are read only when needed."""

    files: tuple
    flag: str
    text_column: Optional[str] = None
    pair_column: Optional[str] = None
    """A tabular record's second text (default text_b or sentence2 when present): its lines follow the first's."""
    part: str = "all"
    """'all', or the 'train' or 'dev' side of a ``fraction`` hold-out (by a hash of each document)."""
    fraction: float = 0.0
    documents: int = 0
    """Documents in this part (set by ``scan``)."""
    paragraphs: dict = field(default_factory=dict, compare=False, hash=False)
    """Per .txt file: True when blank lines separate its documents, else one document per line."""
    digest: str = ""
    """SHA-1 of the files' bytes and the column: with ``part`` and ``fraction``, names the cache."""
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64), compare=False, hash=False, repr=False)
    """Every document's hash key (``_key``), in order (set by ``scan``): the held-out split without a re-read."""

    def __len__(self) -> int:
        return self.documents

    def held_out(self, fraction: float) -> tuple[Corpus, Corpus]:
        """(train, dev) parts of the whole corpus: each document goes to dev with probability ``fraction``,
        decided by a hash of its text, so the same documents every run and in every process."""
        dev_docs = int((self.keys < np.uint64(_limit(fraction))).sum())
        return (
            replace(self, part="train", fraction=fraction, documents=self.documents - dev_docs),
            replace(self, part="dev", fraction=fraction, documents=dev_docs),
        )

    def iter_documents(self) -> Iterator[tuple[str, list[str]]]:
        """(file, lines) for every document of this part, in file order."""
        limit = _limit(self.fraction)
        for path in self.files:
            for lines in _documents(
                path, self.flag, self.text_column, self.pair_column, self.paragraphs.get(path, False)
            ):
                if self.part == "all" or (_key(lines) < limit) == (self.part == "dev"):
                    yield path, lines


def _key(lines: list[str]) -> int:
    """A document's place in [0, 2**64): the first 8 bytes of the SHA-1 of its text."""
    return int.from_bytes(hashlib.sha1("\n".join(lines).encode("utf-8", "surrogatepass")).digest()[:8], "big")


def _limit(fraction: float) -> int:
    """Documents whose key is below this are held out."""
    return math.ceil(fraction * 2.0**64)


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


def scan(spec: str, flag: str, text_column: Optional[str] = None, pair_column: Optional[str] = None) -> Corpus:
    """Read every file once: check it (UTF-8, some Chinese text) and count its documents.
    Any problem is a UserError naming the file and line, raised before anything is written."""
    files = expand_files(spec, flag)
    digest = hashlib.sha1(f"{PACK_VERSION}|{text_column}|{pair_column}".encode())
    paragraphs, keys, chinese = {}, [], 0
    for path in files:
        digest.update(f"|{os.path.basename(path)}|".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if not path.lower().endswith(_TABULAR):
            paragraphs[path] = _has_blank_line_between(path)
        for lines in _documents(path, flag, text_column, pair_column, paragraphs.get(path, False)):
            keys.append(_key(lines))
            chinese += sum(len(_CJK.findall(line)) for line in lines) if chinese < 100 else 0
    documents = len(keys)
    names = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    if documents == 0:
        raise UserError(f"{flag}: no text in {names}; give UTF-8 text files with one document per line")
    if chinese == 0:
        raise UserError(
            f"{flag}: no Chinese characters in the {documents} documents of {names}; ernie_ft pretrains "
            "Chinese models: check the files (and --text-column for TSV/CSV/JSONL)"
        )
    return Corpus(
        files,
        flag,
        text_column,
        pair_column,
        documents=documents,
        paragraphs=paragraphs,
        digest=digest.hexdigest(),
        keys=np.array(keys, dtype=np.uint64),
    )


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


def _documents(
    path: str, flag: str, text_column: Optional[str], pair_column: Optional[str], paragraphs: bool
) -> Iterator[list[str]]:
    """The documents of one file, each a list of non-empty lines (a tabular record's text, then its pair's)."""
    if path.lower().endswith(".json") and _is_squad(path):  # reading comprehension: each context once
        from ernie_ft.data.squad import read_qa

        examples, _ = read_qa(path, flag, labelled=False)
        for context in dict.fromkeys(e.context for e in examples):
            lines = [s for s in (part.strip() for part in context.splitlines()) if s]
            if lines:
                yield lines
        return
    if path.lower().endswith(_TABULAR):
        columns, rows = read_records(path, flag)
        column = text_column if text_column is not None else default_column(columns, TEXT_COLUMNS)
        if column not in columns:
            raise UserError(
                f"{flag}: {path} has no {'column ' + repr(column) if column else 'text column'}; columns "
                f"found: {', '.join(columns)}. Name the text column with --text-column"
            )
        pair = pair_column if pair_column is not None else default_column(columns, PAIR_COLUMNS)
        if pair is not None and pair not in columns:
            raise UserError(
                f"{flag}: {path} has no column {pair!r} (--text-pair-column); columns found: {', '.join(columns)}"
            )
        names = [column] if pair in (None, column) else [column, pair]
        for line, record in rows:
            lines = []
            for name in names:
                text = record.get(name)
                if text is None and name == pair:  # a record without a second text
                    continue
                if not isinstance(text, str):
                    raise UserError(f"{flag}: {path}:{line}: {name!r} is {type(text).__name__}, not text")
                lines += [s for s in (part.strip() for part in text.splitlines()) if s]
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
                raise UserError(
                    f"{flag}: {path}:{number}: contains NUL bytes, so it is binary or UTF-16; save it as UTF-8 text"
                )
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(encoding_message(f"{flag}: {path}", path, raw, e.start, first_line=number)) from None
            yield line.strip()
