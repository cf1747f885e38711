"""``TextPipeline.encode_many``'s helpers: the tokenisation cache (Arrow files beside their SHA-256) and the
process pool that tokenises in several processes."""

from __future__ import annotations

import hashlib
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


def write_table(path: Path, encodings: list[Encoding]) -> None:
    """Store ``encodings`` at ``path`` (an Arrow stream) and the SHA-256 of its bytes beside it."""
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


def read_table(path: Path, rows: int) -> list[Encoding] | None:
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
