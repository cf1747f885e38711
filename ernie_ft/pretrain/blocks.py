"""Packed blocks of a pretraining corpus: tokenised once into an Arrow file and read memory-mapped.

A block is ``[CLS] line [SEP] line [SEP] ... [SEP]``: consecutive lines fill ``--max-len`` tokens,
across documents, so almost nothing is padding; a line that does not fit is cut at a jieba word
boundary and continues in the next block. Every token keeps the number of its jieba word within
the block (-1 for special tokens), which is what whole-word masking needs. Only the current chunk
of lines is held in memory while the file is written, and nothing of it while it is read.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

from ernie_ft.pretrain.corpus import Corpus

CHUNK_LINES = 20_000
"""Lines tokenised at a time (the memory bound of building the cache)."""


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
            self.ids += ids[pos : pos + take]
            self.words += [base + w for w in word_ids[pos : pos + take]]
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
            writer.write_batch(
                pa.record_batch(
                    [pa.array([b[0] for b in blocks], ints), pa.array([b[1] for b in blocks], ints)], schema=schema
                )
            )
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
    a temporary name and renamed into place, so a killed run never leaves half a file behind; a
    cache file that does not open (damaged on disk) is rebuilt, with a warning.
    """
    import pyarrow as pa

    key = hashlib.sha1(
        f"{corpus.digest}|{corpus.part}|{corpus.fraction!r}|{pipeline.fingerprint}|{max_len}".encode()
    ).hexdigest()
    path = os.path.join(cache_dir, f"blocks-{key}.arrow")
    if os.path.isfile(path):
        try:
            return Blocks(path), "cache"
        except (pa.ArrowException, OSError, KeyError) as e:
            print(f"warning: the block cache {path} is damaged ({e}); rebuilding it", file=sys.stderr)
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
    print(
        f"{corpus.flag} ({corpus.part}): {counts['documents']} documents, {counts['lines']} lines, "
        f"{counts['tokens']:,} tokens -> {len(blocks)} blocks of up to {max_len} tokens ({padding:.1%} "
        f"padding); cached in {path}",
        file=sys.stderr,
    )
    return blocks, "tokenised"
