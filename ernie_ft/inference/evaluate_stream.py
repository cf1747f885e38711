"""``evaluate`` over a labelled file read in chunks: each chunk's records read by the task, run through the model and
scored, keeping only what the metrics need (the gold and predicted labels of each text; entity or triple counts, with
each text's mistakes written to errors.txt as they are found), so memory follows the chunk and batch sizes, not the
file's length. The metrics and the report equal those of the file read whole.

Streamed: the tasks whose ``TaskHooks.tally`` keeps their metrics chunk by chunk (``evaluation.tallies``: the
built-in classifier, with one label per text, label sets or label paths, the NER tagger and span model, relations).
Everything else is read whole, with a note saying why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.inference.chunks import Chunks, Rows, open_chunks
from ernie_ft.inference.stream import Progress
from ernie_ft.models.modeling import compute_logits, task_batching

FLAG = "--input"


def labelled_chunks(loaded, data, path: str, chunk_size: int, tally) -> tuple[Optional[Chunks], str]:
    """(the chunks of the labelled file ``path``, '') when ``evaluate`` can stream it, else (None, why it is read
    whole). ``tally``: what the task scores chunks with (``TaskHooks.tally``), None when it scores only whole."""
    task = loaded.task
    if not task.reads_records_apart:
        return None, f"the {task.name} task reads files only whole (TaskHooks.reads_records_apart)"
    if tally is None:
        return None, f"the {task.name} task scores a file only whole (TaskHooks.tally)"
    columns = (data.text_column, data.text_pair_column, data.label_column)

    def whole() -> None:
        loaded.task.read(path, data, FLAG, labelled=True)

    return open_chunks(path, chunk_size, None, columns, whole)  # plain text holds no labels: read whole


def read_chunk(task, data, rows: Rows, path: str, folder: str, labels: list[str]) -> list:
    """The labelled examples of one chunk, read by the task's own ``read`` (``labelled=True``) from the chunk's
    records written as JSON Lines in ``folder`` and checked against the model's ``labels`` (``check_labels``: while
    the examples still name the file they were read from, which the task may have recorded, e.g. its label columns),
    named by ``path`` and their lines in it as if read from it whole."""
    first, last = rows[0][0], rows[-1][0]
    part = os.path.join(folder, f"{os.path.basename(path)}.lines-{first}-{last}.jsonl")
    with open(part, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False, default=str) + "\n" for _, record in rows)
    lines = [n for n, _ in rows]
    try:
        examples = task.read(part, data, FLAG, labelled=True)
        task.check_labels(examples, labels, data, FLAG)
    except UserError as e:
        named = re.sub(re.escape(part) + r"(?::(\d+))?", lambda m: in_file(path, lines, m.group(1)), str(e))
        raise UserError(named) from None
    finally:
        os.remove(part)
    if len(examples) != len(rows):
        found = f"the task read {len(examples)} examples from {len(rows)} records"
        raise UserError(f"{FLAG}: {path}:{first}-{last}: {found}")
    return [dataclasses.replace(e, source=path, line=n) for e, n in zip(examples, lines)]


def in_file(path: str, lines: list[int], line: Optional[str]) -> str:
    """``path:line`` of the chunk's line ``line`` (from 1), or ``path`` when no line is named."""
    return path if line is None or int(line) > len(lines) else f"{path}:{lines[int(line) - 1]}"


def score_chunks(loaded, data, chunks: Chunks, tally, batch_size: int):
    """Run every chunk through the model and add its examples to ``tally`` (labels checked chunk by chunk, as the
    whole file's would be); the progress on standard error."""
    task, pipeline = loaded.task, loaded.pipeline
    seed = (loaded.run or {}).get("train", {}).get("seed", 0)  # the run's seed: the masks its dev scores had
    progress = Progress(chunks.total, 0, name="evaluate")
    try:
        with tempfile.TemporaryDirectory(prefix="ernie_ft-evaluate-") as folder:
            for rows in chunks.read(0):
                examples = read_chunk(task, data, rows, chunks.path, folder, loaded.labels)
                encodings = pipeline.encode_many(task.texts(examples), word_ids=False)
                features = task.featurize(examples, encodings, pipeline, loaded.labels, data)
                if not features:
                    raise UserError(f"{FLAG}: {chunks.path}:{rows[0][0]}-{rows[-1][0]}: no model input could be built")
                logits = compute_logits(
                    loaded.model,
                    features,
                    pipeline.pad_id,
                    batch_size,
                    head=task.head,
                    **task_batching(task, pipeline, seed),
                )
                tally.add(logits, features, examples)
                progress.update(len(examples))
    except BaseException:
        tally.discard()
        raise
    finally:
        progress.close()
    if not tally.count:
        raise UserError(f"{FLAG}: {chunks.path} holds no records to score")
    return tally
