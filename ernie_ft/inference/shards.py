"""``predict --shard K/N``: one process (a Slurm array task, a Kubernetes indexed job's pod) answers the K-th of N
contiguous parts of the input, K counted from 1, and writes it as its ``--output``; ``merge_parts`` (``python -m
ernie_ft merge``) joins the N parts in K order into the answers of the whole input, after checking that they are
the N finished parts of one input, model and flags (their progress files, ``inference.outputs``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator

from ernie_ft.errors import UserError
from ernie_ft.inference import progress
from ernie_ft.inference.chunks import Chunks, Rows


def parse_shard(text: str) -> tuple[int, int]:
    """(K, N) of ``--shard K/N``; UserError unless 1 <= K <= N."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if found is None:
        raise UserError(f"--shard {text}: expected K/N, this process's part K of N parts counted from 1 (1/4 to 4/4)")
    k, n = int(found.group(1)), int(found.group(2))
    if n < 1:
        raise UserError(f"--shard {text}: N is the number of parts, 1 or more")
    if k == 0:
        raise UserError(
            f"--shard {text}: K counts from 1 (1/{n} to {n}/{n}); give a 0-based index such as Kubernetes' "
            f"JOB_COMPLETION_INDEX as $((JOB_COMPLETION_INDEX + 1))/{n}"
        )
    if k > n:
        raise UserError(f"--shard {text}: there is no part {k} of {n}; K is 1 to {n}")
    return k, n


def shard_range(total: int, k: int, n: int) -> tuple[int, int | None]:
    """(first record, end or None: to the file's end) of part ``k`` of ``n`` of ``total`` records: contiguous,
    the sizes within one of each other, the last part open-ended (a CSV's count is an upper bound)."""
    return total * (k - 1) // n, (total * k // n if k < n else None)


def shard_chunks(chunks: Chunks, k: int, n: int) -> Chunks:
    """``chunks`` cut to part ``k`` of ``n`` (``shard_range``): its records keep their file line numbers."""
    start, end = shard_range(chunks.total, k, n)

    def read(skip: int) -> Iterator[Rows]:
        left = None if end is None else end - start - skip
        if left is not None and left <= 0:
            return
        for rows in chunks.read(start + skip):
            if left is not None:
                rows, left = rows[:left], left - min(left, len(rows))
            if rows:
                yield rows
            if left == 0:
                return

    return Chunks(chunks.path, chunks.kind, (chunks.total if end is None else end) - start, read)


def merge_parts(output: str, parts: list[str]) -> int:
    """Join the parts written by ``predict --shard K/N`` into ``output``, in K order (the parts may be given in any
    order); returns how many answers it holds. UserError naming the part when one is missing, unfinished, written
    without --shard, or by another model, input or flags than the others, or when a part's format is not
    ``output``'s."""
    if not parts:
        raise UserError("merge: give the parts to join, the --output files of predict --shard 1/N to N/N")
    described = [_part(part) for part in parts]
    first, (_, n) = described[0], described[0][1]
    for part, shard, wrote in described[1:]:
        _check_same(part, wrote, first[0], first[2])
        if shard[1] != n:
            raise UserError(f"merge: {part} is part {shard[0]}/{shard[1]}, {first[0]} part {first[1][0]}/{n}; "
                            f"give the parts of one run of {n}")  # fmt: skip
    by_k = {}
    for part, (k, _), _ in described:
        if k in by_k:
            raise UserError(f"merge: {by_k[k]} and {part} are both part {k}/{n}; give each part once")
        by_k[k] = part
    missing = [k for k in range(1, n + 1) if k not in by_k]
    if missing:
        raise UserError(
            f"merge: part {missing[0]}/{n} is missing: give the --output of predict --shard {missing[0]}/{n} too "
            f"({len(missing)} of {n} parts missing)"
        )
    if os.path.realpath(output) in {os.path.realpath(p) for p in parts}:
        raise UserError(f"merge: --output {output} is one of the parts; give a new file")
    ordered = [by_k[k] for k in range(1, n + 1)]
    counts = {part: wrote["answers"] for part, _, wrote in described}
    parquet = output.lower().endswith(".parquet")
    for part in ordered:
        if part.lower().endswith(".parquet") != parquet:
            kind = "Parquet" if parquet else "JSON Lines"
            raise UserError(f"merge: {part} is not {kind} as --output {output} is; give an --output of its format")
    with progress.held(output, "merge"):
        (_join_parquet if parquet else _join_lines)(output, ordered, counts)
    total = sum(counts.values())
    print(f"merged {n} parts ({total} predictions) into {output}", file=sys.stderr)
    return total


def _part(part: str) -> tuple[str, tuple[int, int], dict]:
    """(part, (K, N), its progress file) of a finished part, else UserError naming it."""
    if not os.path.isfile(part):
        raise UserError(f"merge: {part} not found; check the path of each part")
    beside = progress.progress_path(part)
    try:
        wrote = progress.read_progress(part)
    except UserError:
        raise UserError(f"merge: {beside} cannot be read; run that part's predict --shard again") from None
    if wrote is None:
        raise UserError(f"merge: {part} has no {beside} beside it, so it is not a part written by predict --shard")
    shard = wrote["options"].get("shard")
    if shard is None:
        raise UserError(f"merge: {part} was written without --shard: it is a whole input's answers, not a part")
    if not wrote.get("finished") or "answers" not in wrote:
        raise UserError(
            f"merge: {part} (--shard {shard}) is unfinished; run its predict command again with --resume to finish it"
        )
    return part, parse_shard(shard), wrote


def _check_same(part: str, wrote: dict, first_part: str, first: dict) -> None:
    """UserError unless ``part`` was written from the same model, input and flags (but --shard) as ``first_part``."""
    then = f"give the parts of one input, model and flags (the first, {first_part}, sets them)"
    if (wrote["model"], wrote["model_files"]) != (first["model"], first["model_files"]):
        raise UserError(f"merge: {part} was written by another model ({wrote['model']}) than {first_part}; {then}")
    if (wrote["input"], wrote["input_size"], wrote["input_mtime_ns"]) != (
        first["input"],
        first["input_size"],
        first["input_mtime_ns"],
    ):
        raise UserError(f"merge: {part} is a part of another input ({wrote['input']}, or it changed); {then}")
    for key, value in first["options"].items():
        if key != "shard" and wrote["options"].get(key) != value:
            flag = "--" + key.replace("_", "-")
            raise UserError(f"merge: {part} was written with {flag} {wrote['options'].get(key)}, not {value}; {then}")


def _join_lines(output: str, parts: list[str], counts: dict) -> None:
    with open(output + ".partial", "wb") as out:
        for part in parts:
            lines = 0
            with open(part, "rb") as f:
                while block := f.read(1 << 20):
                    lines += block.count(b"\n")
                    out.write(block)
            if lines != counts[part]:
                raise UserError(f"merge: {part} holds {lines} lines, but its predict wrote {counts[part]}; "
                                "it changed since: run that part again")  # fmt: skip
    os.replace(output + ".partial", output)


def _join_parquet(output: str, parts: list[str], counts: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for part in parts:
            source = pq.ParquetFile(part)
            if source.metadata.num_rows != counts[part]:
                raise UserError(f"merge: {part} holds {source.metadata.num_rows} rows, but its predict wrote "
                                f"{counts[part]}; it changed since: run that part again")  # fmt: skip
            writer = writer or pq.ParquetWriter(output + ".partial", source.schema_arrow)
            for batch in source.iter_batches():
                try:
                    writer.write_table(pa.Table.from_batches([batch]).cast(writer.schema))
                except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
                    raise UserError(f"merge: {part}'s columns differ from the first part's ({e}); write the parts "
                                    "as JSON Lines (--output ending in .jsonl)") from None  # fmt: skip
    finally:
        if writer is not None:
            writer.close()
    os.replace(output + ".partial", output)
