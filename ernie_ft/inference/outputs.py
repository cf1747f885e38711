"""Prediction answers written as they are made: JSON Lines (one answer a line, in input order), or Parquet when the
output ends in ``.parquet``, or an annotation tool's import (``--format``: Label Studio's JSON array of tasks,
doccano's JSON Lines) with the answers as pre-annotations. What wrote an output, and the lock while it is written,
are ``inference.progress``'s."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.inference.records import Blank


class JsonLines:
    """Answers as JSON Lines to ``path`` (None: standard output), flushed after each chunk. ``resume``: continue the
    file after its last complete line (a line cut by a kill is dropped): ``done`` answers are there already."""

    def __init__(self, path: Optional[str], resume: bool = False):
        self.path, self.done = path, 0
        if path is None:
            self.file = sys.stdout
            return
        if resume and os.path.exists(path):
            self.done, torn = _complete_lines(path)
            if torn:
                print(f"note: {path}: its last line was cut off ({torn} bytes); dropped, it is answered again",
                      file=sys.stderr)  # fmt: skip
        self.file = open(path, "a" if resume else "w", encoding="utf-8")

    def write(self, answers: list[dict]) -> None:
        self.file.writelines(json.dumps(answer, ensure_ascii=False) + "\n" for answer in answers)
        self.file.flush()

    def close(self) -> None:
        if self.path is not None:
            self.file.close()


def _complete_lines(path: str) -> tuple[int, int]:
    """(how many complete lines ``path`` holds, the bytes of a last line without its end); that last line is cut
    off the file."""
    lines, size, end = 0, 0, 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            lines += block.count(b"\n")
            if b"\n" in block:
                end = size + block.rindex(b"\n") + 1
            size += len(block)
    if end < size:
        with open(path, "r+b") as f:
            f.truncate(end)
    return lines, size - end


class Parquet:
    """Answers as a Parquet file, one row group per chunk: a field holding a string, number or boolean is a column
    of that type, a list or object a column of its JSON text (named in the schema's metadata, ``json_columns``);
    the columns are the first chunk's fields, after any chunks of records without a text (``records.Blank``), which
    are held until an answer's fields are known (an input that has only those: their own fields, ``only_blank`` in
    the metadata). Written to ``PATH.partial`` and moved to ``path`` when closed, so ``path`` is always a whole
    file; ``resume`` copies the rows ``path`` holds first."""

    def __init__(self, path: str, resume: bool = False):
        import pyarrow.parquet as pq

        self.path, self.partial, self.writer, self.done, self.json = path, path + ".partial", None, 0, set()
        self.held: list[dict] = []
        if resume and os.path.exists(path):
            try:
                done = pq.ParquetFile(path)
            except Exception as e:  # pyarrow raises several kinds; all mean it is no whole Parquet file
                raise UserError(f"--resume: {path} cannot be read as Parquet ({e}); run without --resume") from None
            self.done = done.metadata.num_rows
            if (done.schema_arrow.metadata or {}).get(b"only_blank"):
                self.held = [Blank(row) for row in done.read().to_pylist()]
                return
            self._open(done.schema_arrow)
            for batch in done.iter_batches():
                self.writer.write_batch(batch)

    def _open(self, schema) -> None:
        import pyarrow.parquet as pq

        self.schema = schema
        self.json = set(json.loads((schema.metadata or {}).get(b"json_columns", b"[]")))
        self.writer = pq.ParquetWriter(self.partial, schema)

    def write(self, answers: list[dict]) -> None:
        if self.writer is None:
            if all(isinstance(answer, Blank) for answer in answers):
                self.held += answers  # their columns are not all known yet
                return
            answers, self.held = self.held + answers, []
            self._open(_schema(sorted(answers, key=lambda answer: isinstance(answer, Blank))))
        self._write(answers)

    def _write(self, answers: list[dict]) -> None:
        import pyarrow as pa

        columns = self.schema.names
        extra = next((key for answer in answers for key in answer if key not in columns), None)
        if extra is not None:
            raise UserError(
                f'--output {self.path}: an answer has the field "{extra}" that the first answers had not; a Parquet '
                "file's columns are fixed by its first rows: write JSON Lines instead (--output ending in .jsonl)"
            )
        values = {c: [self._value(c, answer.get(c)) for answer in answers] for c in columns}
        try:
            self.writer.write_table(pa.Table.from_pydict(values, schema=self.schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise UserError(f"--output {self.path}: an answer does not fit the first answers' columns ({e}); "
                            "write JSON Lines instead (--output ending in .jsonl)") from None  # fmt: skip

    def _value(self, column: str, value):
        return json.dumps(value, ensure_ascii=False) if column in self.json and value is not None else value

    def close(self) -> None:
        if self.writer is None and self.held:
            self._open(_schema(self.held, only_blank=True))
            self._write(self.held)
        if self.writer is not None:
            self.writer.close()
            os.replace(self.partial, self.path)


def _schema(answers: list[dict], only_blank: bool = False):
    """The Parquet schema of the first chunk's answers (see ``Parquet``)."""
    import pyarrow as pa

    types, nested = {}, []
    for answer in answers:
        for key, value in answer.items():
            if types.get(key) is None and value is not None:
                kind = (
                    pa.bool_()
                    if isinstance(value, bool)
                    else pa.int64()
                    if isinstance(value, int)
                    else pa.float64()
                    if isinstance(value, float)
                    else pa.string()
                )
                nested += [key] if not isinstance(value, (bool, int, float, str)) else []
                types[key] = kind
            types.setdefault(key, None)
    fields = [pa.field(key, kind or pa.string()) for key, kind in types.items()]
    nested += [key for key, kind in types.items() if kind is None]  # never given: JSON text of what comes
    blank = {"only_blank": "1"} if only_blank else {}
    return pa.schema(fields, metadata={"json_columns": json.dumps(nested), **blank})


class JsonArray:
    """Answers as one JSON array (Label Studio imports only that) to ``path`` (None: standard output), an answer a
    line between a first line ``[`` and a last ``]``, flushed after each chunk: a whole array once closed, and one
    ``--resume`` continues after its last complete answer (the closing ``]`` and a line cut by a kill dropped)."""

    def __init__(self, path: Optional[str], resume: bool = False):
        self.path, self.done = path, 0
        if path is None:
            self.file = sys.stdout
        elif resume and os.path.exists(path):
            self.done = _array_items(path)
            self.file = open(path, "a", encoding="utf-8")
            self.written = self.done
            return
        else:
            self.file = open(path, "w", encoding="utf-8")
        self.file.write("[\n")
        self.written = 0

    def write(self, answers: list[dict]) -> None:
        for answer in answers:
            self.file.write((",\n" if self.written else "") + json.dumps(answer, ensure_ascii=False))
            self.written += 1
        self.file.flush()

    def close(self) -> None:
        self.file.write("\n]\n" if self.written else "]\n")
        self.file.flush()
        if self.path is not None:
            self.file.close()


def _array_items(path: str) -> int:
    """How many complete items a ``JsonArray`` file holds; the file is cut after the last of them (the closing ``]``
    and a line a kill cut short go). A file that is no such array is a UserError."""
    count, end, position = 0, None, 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            start, position = position, position + len(line)
            item = line.rstrip(b"\n")
            if number == 1:
                if item != b"[":
                    raise UserError(f"--resume: {path} is not a JSON array written by predict; run without --resume")
                end = position
                continue
            if item == b"]":
                break
            item = item[:-1] if item.endswith(b",") else item
            try:
                json.loads(item)
            except ValueError:
                break  # a line cut by a kill: answered again
            count, end = count + 1, start + len(item)
    if end is None:
        raise UserError(f"--resume: {path} is empty; run without --resume")
    with open(path, "r+b") as f:
        f.truncate(end)
    return count


class Converted:
    """A writer whose answers are first made into something else (``convert``, one answer at a time, a
    ``tool_imports.ToolImport``): an annotation tool's import record; closed, it says its ``note``."""

    def __init__(self, inner, convert):
        self.inner, self.convert = inner, convert

    @property
    def done(self) -> int:
        return self.inner.done

    @done.setter
    def done(self, value: int) -> None:
        self.inner.done = value

    def write(self, answers: list[dict]) -> None:
        self.inner.write([_blank(self.convert.fmt, a) if isinstance(a, Blank) else self.convert(a) for a in answers])

    def close(self) -> None:
        self.inner.close()
        note = self.convert.note()
        if note:
            print(note, file=sys.stderr)


def _blank(fmt: str, answer: dict) -> dict:
    """The import record of a record without a text (``records.Blank``): its fields, no prediction, so that the
    import keeps one record per input record, as ``--resume`` counts them."""
    return {"data": dict(answer)} if fmt == "label-studio" else {**answer, "label": []}


FORMATS = ("answers", "label-studio", "doccano")
"""What ``predict --format`` writes: the answers themselves (JSON Lines, or Parquet), or an annotation tool's import
with them as pre-annotations (``data.pre_annotations``)."""


def model_name(model_dir: str) -> str:
    """What a model is called where others see it (``serve``'s clients, an import's ``model_version``): its
    directory's last part, never a path of this machine's filesystem. A run's ``best/`` is called by the run's name,
    as ``--model RUN`` loads it (``runs/cs`` and ``runs/cs/best`` are both ``cs``); its ``last/`` is ``cs/last``."""
    parts = os.path.normpath(os.path.abspath(model_dir)).split(os.sep)
    if parts[-1] == "best" and len(parts) > 2:
        return parts[-2]
    return "/".join(parts[-2:]) if parts[-1] == "last" and len(parts) > 2 else parts[-1]


def tool_import(fmt: str, loaded, label_config: Optional[str] = None):
    """The ``tool_imports.ToolImport`` making answers of the ``loaded`` checkpoint into ``fmt``'s import records, in
    the names of the Label Studio labelling config in the file ``label_config`` (``--label-config``); None for
    'answers', which refuses a ``label_config``."""
    from ernie_ft.inference.tool_imports import ToolImport, read_label_config

    if fmt in ("label-studio", "doccano"):
        return ToolImport(fmt, loaded, model_name(loaded.directory), label_config)
    read_label_config(label_config, fmt)
    return None


def writer(path: Optional[str], resume: bool, fmt: str = "answers", convert: Optional[Callable] = None):
    """The writer of ``path``'s format (None: JSON Lines on standard output), or of ``fmt``'s import (``convert``:
    its ``tool_import``)."""
    if fmt != "answers":
        if path is not None and path.lower().endswith(".parquet"):
            raise UserError(f"--output {path}: --format {fmt} writes JSON; give an --output ending in .json(l)")
        inner = JsonArray(path, resume) if fmt == "label-studio" else JsonLines(path, resume)
        return Converted(inner, convert)
    if path is not None and path.lower().endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError(f"--output {path}: writing Parquet needs pyarrow; pip install pyarrow") from None
        return Parquet(path, resume)
    return JsonLines(path, resume)
