"""``predict`` over a file chunk by chunk: each chunk of records read by the task (``read_records``), tokenised, run
and answered, its answers written in input order before the next is read, so memory follows the chunk and batch
sizes, not the file's length. A progress bar on standard error; Ctrl-C or SIGTERM stops after the batch in flight,
with every answer of the chunks before it written."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Optional

import numpy as np

from ernie_ft.data.batching import LengthGroupedSampler
from ernie_ft.errors import Interrupted, UserError
from ernie_ft.inference import outputs, progress, records
from ernie_ft.inference.chunks import Chunks, Rows, open_chunks
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.training.trainer import StopRequest


def stop_request() -> StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM while predicting: the batch in flight finishes, the chunk's answers are not written
    (they are not all made), and ``stream`` raises ``Interrupted``. A second Ctrl-C stops at once."""
    return StopRequest(after="this batch", abort="stop at once")


class Progress:
    """Answers made against the total: a tqdm bar (count, rate, ETA) on a terminal, else a plain line every
    ``every`` seconds, so logs stay readable."""

    def __init__(self, total: int, done: int, every: float = 30.0, name: str = "predict"):
        self.total, self.done, self.start, self.every, self.name = total, done, time.monotonic(), every, name
        self.first, self.last = done, self.start
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="doc", file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(f"{self.name}: {self.line(now)}", file=sys.stderr, flush=True)

    def line(self, now: float) -> str:
        rate = (self.done - self.first) / max(now - self.start, 1e-9)
        left = max(self.total - self.done, 0) / rate if rate > 0 else float("nan")
        eta = time.strftime("%H:%M:%S", time.gmtime(left)) if left == left else "?"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{self.done}/{self.total}{share}, {rate:.1f} docs/s, ETA {eta}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def stream(loaded, data, chunks: Chunks, writer, batch_size: int, flag: str = "--input", pool=None) -> int:
    """Answer every record of ``chunks`` after the ``writer.done`` already written, writing each chunk's answers
    before reading the next (with a ``pool``, ``inference.pool``: as its workers answer them, in order); returns how
    many answers the output holds. A signal raises ``Interrupted`` once the batch in flight is done; the output then
    holds every answer of the chunks before it."""
    seed = (loaded.run or {}).get("train", {}).get("seed", 0)
    progress = Progress(chunks.total, writer.done)
    blank = Blank(records.Fields.of(loaded.task, data))
    try:
        with stop_request() as stop:
            rows = blank.counted(chunks.read(writer.done))
            if pool is not None:
                answered = pool.answers(rows, stop)
            else:
                answered = (answer_chunk(loaded, data, r, chunks.path, flag, batch_size, seed, stop) for r in rows)
            for answers in answered:
                if answers is None:
                    break
                writer.write(answers)
                writer.done += len(answers)
                progress.update(len(answers))
    finally:
        progress.close()
    if stop.signum is not None:
        raise Interrupted(stop.signum)
    if blank.count:
        where = "row" if chunks.kind == "parquet" else "line"
        print(f"note: {blank.count} records of {flag} {chunks.path} have an empty text (the first at {where} "
              f"{blank.first}); each is answered in its place with no prediction", file=sys.stderr)  # fmt: skip
    return writer.done


class Blank:
    """Counts the records with an empty text (``records.Fields.is_blank``) as chunks are read."""

    def __init__(self, fields: records.Fields):
        self.fields, self.count, self.first = fields, 0, None

    def counted(self, chunks: Iterator[Rows]) -> Iterator[Rows]:
        for rows in chunks:
            for n, record in rows:
                if self.fields.is_blank(record):
                    self.count += 1
                    self.first = n if self.first is None else self.first
            yield rows


def answer_chunk(loaded, data, rows: Rows, path: str, flag: str, batch_size: int, seed: int, stop: StopRequest):
    """The answers to one chunk's records, in their order, each with the record's other columns (``records``); a
    record with an empty text answered with none. None when ``stop`` came before they were all made."""
    fields = records.Fields.of(loaded.task, data)
    blank = [fields.is_blank(record) for _, record in rows]
    asked = [row for row, empty in zip(rows, blank) if not empty]
    made = _answers(loaded, data, asked, path, flag, batch_size, seed, stop) if asked else []
    if made is None:
        return None
    answers = iter(made)
    return [
        fields.blank_answer(record) if empty else fields.with_columns(next(answers), record)
        for (_, record), empty in zip(rows, blank)
    ]


def _answers(loaded, data, rows: Rows, path: str, flag: str, batch_size: int, seed: int, stop: StopRequest):
    """The task's answers to ``rows``, none of them blank; None when ``stop`` came first."""
    task, pipeline = loaded.task, loaded.pipeline
    try:
        examples = task.read_records([record for _, record in rows], data, flag)
    except UserError as e:
        raise UserError(in_file(str(e), flag, path, [n for n, _ in rows])) from None
    encodings = pipeline.encode_many(task.texts(examples), word_ids=False)
    features = task.featurize(examples, encodings, pipeline, loaded.labels, data)
    if not features:
        raise UserError(f"{flag}: {path}:{rows[0][0]}-{rows[-1][0]}: no model input could be built from these lines")
    lengths = [len(f["input_ids"]) for f in features]
    outputs, stacked = [None] * len(features), True
    for indices in LengthGroupedSampler(lengths, batch_size, shuffle=False).batches():
        if stop.signum is not None:
            return None
        batch = compute_logits(
            loaded.model,
            [features[i] for i in indices],
            pipeline.pad_id,
            batch_size,
            head=task.head,
            **task_batching(task, pipeline, seed),
        )
        stacked &= isinstance(batch, np.ndarray)
        for row, i in enumerate(indices):
            outputs[i] = batch[row]
    logits = np.stack(outputs) if stacked else outputs
    answers = task.predict(logits, features, examples, loaded.labels, data)
    if len(answers) != len(rows):
        raise UserError(f"{flag}: {path}: the task gave {len(answers)} answers to {len(rows)} records")
    return answers


def in_file(message: str, flag: str, path: str, lines: list[int]) -> str:
    """A ``read_records`` message, which names a record as ``{flag}[i]`` or ``{flag}[i].field``, with the record
    named as the file's line instead (``--input: a.jsonl:12``), as the whole-file readers name it."""
    return re.sub(
        re.escape(flag) + r"\[(\d+)\](\.[^:]*)?", lambda m: f"{flag}: {path}:{lines[int(m.group(1))]}", message
    )


def input_chunks(loaded, data, options):
    """(``Chunks`` of the input, "") when the task reads records one chunk at a time, else (None, why not)."""
    task = loaded.task
    if not task.reads_records_apart:  # QA: a question's default id and the check of repeated ids span the file
        return None, f"the {task.name} task reads files only whole (TaskHooks.reads_records_apart)"
    required, _ = task.input_fields
    columns = (data.text_column, data.text_pair_column, data.label_column)

    def whole() -> None:
        task.read(options.input, data, "--input", labelled=False)

    return open_chunks(options.input, options.chunk_size, required[0], columns, whole, blanks=True)


def predict_stream(loaded, data, options, chunks, model_path: str, engine: str, pool=None) -> Optional[int]:
    """The answers to a streamed input, each chunk's written as made (``pool``: by its workers); with
    ``options.output``, its progress file beside it and ``--resume``. None: a resumed output was finished already."""
    convert = outputs.tool_import(options.format, loaded, options.label_config)
    if not options.output:
        out = outputs.writer(None, False, options.format, convert)
        try:
            return stream(loaded, data, chunks, out, options.batch_size, pool=pool)
        finally:
            out.close()
    with progress.held(options.output):
        return _to_output(loaded, data, options, chunks, model_path, engine, convert, pool)


def _to_output(loaded, data, options, chunks, model_path, engine, convert, pool) -> Optional[int]:
    """``predict_stream`` to ``options.output``, held by this process."""
    now = progress.identity(model_path, options.input, options.answer_settings() | {"engine": engine})
    wrote = progress.read_progress(options.output) if options.resume else None
    if options.resume and wrote is None and os.path.exists(options.output):
        raise UserError(
            f"--resume: {options.output} has no {progress.progress_path(options.output)} beside it, so what wrote it "
            "is unknown; run without --resume to write it again"
        )
    if wrote is not None:
        progress.check_resumable(options.output, wrote, now)
        if wrote.get("finished") and os.path.exists(options.output):
            print(f"--resume: {options.output} is complete; nothing to do", file=sys.stderr)
            return None
    else:
        progress.start_over(options.output)
    progress.write_progress(options.output, now, finished=False)
    out = outputs.writer(options.output, wrote is not None, options.format, convert)
    if out.done:
        print(f"--resume: {out.done} predictions in {options.output}; continuing after them", file=sys.stderr)
    try:
        count = stream(loaded, data, chunks, out, options.batch_size, pool=pool)
    except (KeyboardInterrupt, UserError) as e:
        out.close()
        then = (
            "run the same command with --resume to continue"
            if isinstance(e, KeyboardInterrupt)
            else "fix the input and run the command again"
        )
        print(f"{out.done} of {chunks.total} predictions are in {options.output}; {then}", file=sys.stderr)
        raise
    out.close()
    progress.write_progress(options.output, now, finished=True, answers=count)
    return count


def device_name() -> str:
    """The device Paddle runs on, with the CPU's or GPU's model: 'cpu (AMD EPYC 7B13)'; the CPU where Paddle is not
    imported (ONNX Runtime runs on the CPU)."""
    paddle = sys.modules.get("paddle")
    device = paddle.device.get_device() if paddle is not None else "cpu"
    if device.startswith("gpu"):
        return f"{device} ({paddle.device.cuda.get_device_name()})"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{device} ({model})" if model else device
