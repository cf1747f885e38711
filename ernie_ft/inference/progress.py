"""The files beside a ``predict`` output: its progress file, which records what wrote it (``identity``) and whether
it finished, for ``--resume`` and ``merge`` to check; and its lock, which keeps a second process from writing the
same output at once (``held``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from ernie_ft.errors import UserError

PROGRESS = ".progress.json"
"""The progress file is the output's path with this added: what wrote the output (``identity``), and whether it
finished."""


ROWS = "every record"
"""What an output's answers count, recorded in its progress file: every input record, a blank one too
(``inference.records``); an output of an earlier ernie_ft (none recorded) skipped blank lines."""


def progress_path(output: str) -> str:
    return output + PROGRESS


@contextmanager
def held(output: str, command: str = "predict") -> Iterator[None]:
    """``output`` written by this process alone while in the block: ``OUTPUT.lock`` beside it, locked with ``flock``,
    which the system releases when the process ends, killed too; a second process is refused with a UserError."""
    import fcntl

    path = output + ".lock"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            where = os.path.dirname(os.path.abspath(output))
            raise UserError(f"--output {output}: cannot be written in {where} ({e.strerror}); give a writable "
                            "directory that exists") from None  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"--output {output}: another {command} is writing it (it holds {path}); wait for it to end, or give "
                "another --output"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # else the holder before removed the file as this process opened it: lock the new one
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)


def start_over(output: str) -> None:
    """Remove ``output``, its partial file and its progress file, before a run that writes it from the first answer
    records what it writes: a run stopped before its first write then leaves no other run's answers to resume."""
    for path in (output, output + ".partial", progress_path(output)):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def identity(model_path: str, input_path: str, options: dict) -> dict:
    """What makes an output's answers what they are: the model directory (each file's size and modification time,
    from one listing), the input file (its size and modification time) and the options that change an answer."""
    files = {}
    with os.scandir(model_path) as entries:
        for entry in entries:
            if entry.is_file():
                stat = entry.stat()
                files[entry.name] = [stat.st_size, stat.st_mtime_ns]
    stat = os.stat(input_path)
    return {
        "rows": ROWS,
        "model": os.path.realpath(model_path),
        "model_files": files,
        "input": os.path.realpath(input_path),
        "input_size": stat.st_size,
        "input_mtime_ns": stat.st_mtime_ns,
        "options": options,
    }


def check_resumable(output: str, wrote: dict, now: dict) -> None:
    """UserError unless ``now`` (``identity`` of this run) is what ``wrote`` (the progress file's) records."""
    again = f"give the same model, input and flags, or run without --resume to write {output} again"
    if wrote.get("rows") != now["rows"]:
        raise UserError(f"--resume: {output} was written by an ernie_ft that skipped blank lines, so its answers are "
                        f"not one per input line; run without --resume to write {output} again")  # fmt: skip
    if (wrote["model"], wrote["model_files"]) != (now["model"], now["model_files"]):
        files = [{name: tuple(stat) for name, stat in side["model_files"].items()} for side in (wrote, now)]
        changed = sorted(set(files[0].items()) ^ set(files[1].items()))
        what = f"its {changed[0][0]} differs" if wrote["model"] == now["model"] and changed else "another model"
        raise UserError(f"--resume: {output} was written by --model {wrote['model']}; this is {what}; {again}")
    if (wrote["input"], wrote["input_size"], wrote["input_mtime_ns"]) != (
        now["input"],
        now["input_size"],
        now["input_mtime_ns"],
    ):
        what = "another file" if wrote["input"] != now["input"] else "changed since (its size or modification time)"
        raise UserError(f"--resume: {output} was written from --input {wrote['input']}; this input is {what}; {again}")
    for key, value in now["options"].items():
        if wrote["options"].get(key) != value:
            flag = "--" + key.replace("_", "-")
            given = wrote["options"].get(key)
            raise UserError(f"--resume: {output} was written with {flag} {given}, not {value}; {again}")


def read_progress(output: str) -> Optional[dict]:
    """The progress file of ``output``, None without one."""
    try:
        with open(progress_path(output), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"--resume: {progress_path(output)} cannot be read ({e}); run without --resume") from None


def write_progress(output: str, wrote: dict, finished: bool, answers: Optional[int] = None) -> None:
    """The progress file of ``output``, swapped in whole; ``answers``: how many a finished output holds (``merge``
    checks a part against it)."""
    path = progress_path(output)
    counted = {"answers": answers} if answers is not None else {}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({**wrote, "finished": finished, **counted}, f, ensure_ascii=False, indent=1)
    os.replace(path + ".tmp", path)
