"""``TextPipeline.encode_many``'s helpers: the tokenisation cache (Arrow files beside their SHA-256) and the
process pool that tokenises in several processes."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from ernie_ft.text.encoding import Encoding

_MEMO: dict[tuple, object] = {}


def encode_in_processes(pipeline, args: tuple, texts: list[str], num_proc: int, word_ids: bool) -> list[Encoding]:
    """``pipeline.encode_many(texts, word_ids=word_ids)`` in ``num_proc`` processes; ``args``: the pipeline's
    constructor keywords as a tuple of pairs, from which a spawned process builds it again."""
    # A stdlib pool, not datasets.map(num_proc=...): with the dill 0.3.4 that paddlenlp pins,
    # multiprocess cannot pickle Dataset._map_single on Python 3.11 and the workers die.
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    size = -(-len(texts) // (num_proc * 4))  # a few chunks per worker evens out long texts
    chunks = [(type(pipeline), args, texts[i : i + size], word_ids) for i in range(0, len(texts), size)]
    # Forked workers find this pipeline in the memo; spawned ones rebuild it from args.
    # Either way jieba is never pickled.
    _MEMO[args] = pipeline
    saved_env = os.environ.get("TOKENIZERS_PARALLELISM")
    # The processes are the parallelism; this also stops tokenizers warning in every
    # worker that it was forked after its thread pool was used.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        with ctx.Pool(num_proc) as pool:
            parts = pool.map(_encode_chunk, chunks)
    finally:
        _MEMO.pop(args, None)
        if saved_env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved_env
    return [enc for part in parts for enc in part]


def _encode_chunk(job: tuple) -> list[Encoding]:
    """Worker: encode texts with the pipeline for these constructor args, built once per process."""
    cls, args, texts, word_ids = job
    pipe = _MEMO.get(args)
    if pipe is None:
        pipe = _MEMO[args] = cls(**dict(args))
    return pipe.encode_many(texts, word_ids=word_ids)


COLUMNS = ("ids", "starts", "ends", "word_ids")
BATCH_ROWS = 8192
"""Rows in one record batch: its Arrow columns are all that writing holds beside the encodings."""


def can_store() -> bool:
    """Whether pyarrow, which the cache's files need, is installed (the runtime install, which runs exports, has
    none: it tokenises without a cache)."""
    return importlib.util.find_spec("pyarrow") is not None


def write_table(path: Path, encodings: list[Encoding]) -> None:
    """Store ``encodings`` at ``path`` (an Arrow stream, ``BATCH_ROWS`` rows a record batch) and the SHA-256 of
    its bytes beside it."""
    import pyarrow as pa

    ints = pa.list_(pa.int32())
    schema = pa.schema([(name, ints) for name in COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # renamed into place: readers never see half a file
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for i in range(0, len(encodings), BATCH_ROWS):
            part = encodings[i : i + BATCH_ROWS]
            columns = [_list_column(rows) for rows in zip(*(e.columns() for e in part))]
            writer.write_batch(pa.record_batch(columns, schema=schema))
    digest = path.with_name(path.name + ".sha256")
    digest_tmp = digest.with_name(f"{digest.name}.{os.getpid()}.tmp")
    with pa.memory_map(str(tmp)) as mapped:
        digest_tmp.write_text(hashlib.sha256(mapped.read_buffer()).hexdigest() + "\n", encoding="ascii")
    os.replace(tmp, path)  # a process killed between the two leaves a digest that does not match: rebuilt
    os.replace(digest_tmp, digest)


def read_table(path: Path, rows: int) -> list[Encoding] | None:
    """The encodings cached at ``path``, or None unless its bytes match its recorded SHA-256 and it
    holds ``rows`` rows. The file is mapped, not read into memory, and hashed and parsed from that one mapping."""
    import pyarrow as pa

    try:
        expected = path.with_name(path.name + ".sha256").read_text(encoding="ascii").strip()
        mapped = pa.memory_map(str(path))
    except (OSError, UnicodeDecodeError, pa.ArrowException):
        return None
    with mapped:
        data = mapped.read_buffer()
        if hashlib.sha256(data).hexdigest() != expected:
            return None
        try:
            reader = pa.ipc.open_stream(pa.BufferReader(data))
            batches = list(reader)  # views into the mapping, no copy
        except (pa.ArrowException, OSError):
            return None
        if sum(batch.num_rows for batch in batches) != rows:
            return None
        return [enc for batch in batches for enc in _from_batch(batch)]


def _list_column(rows: list):
    """A list<int32> Arrow column from int32 rows (``Encoding.columns()``; None rows: a column of nulls), made from
    their bytes
    (``Array.from_buffers``: ``pa.array`` on numpy would import pandas to ask whether it was given a Series)."""
    import numpy as np
    import pyarrow as pa

    if any(row is None for row in rows):
        return pa.nulls(len(rows), pa.list_(pa.int32()))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(row) for row in rows], out=offsets[1:])
    values = pa.Array.from_buffers(pa.int32(), int(offsets[-1]), [None, pa.py_buffer(b"".join(rows))])
    offsets = pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)])
    return pa.ListArray.from_arrays(offsets, values)


def _from_batch(batch) -> list[Encoding]:
    """The encodings of one record batch, each column's numbers copied from the mapping as they are."""
    columns = []
    for name in COLUMNS:
        column = batch.column(name)
        if column.null_count == len(column):
            columns.append(None)
        else:  # offsets index the whole values buffer, also in a sliced column
            columns.append((column.offsets.to_numpy(), column.values.to_numpy()))

    def row(column, i: int):
        if column is None:
            return None
        offsets, values = column
        return values[offsets[i] : offsets[i + 1]].tobytes()

    return [Encoding.from_columns(*(row(c, i) for c in columns)) for i in range(batch.num_rows)]
