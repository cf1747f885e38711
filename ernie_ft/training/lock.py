"""One run per output directory: an exclusive lock on ``OUTPUT/.lock`` held while the run lives."""

from __future__ import annotations

import os

from ernie_ft.errors import UserError

LOCK = ".lock"
_held_locks: dict = {}  # path -> open lock file, held until the process exits


def lock_output(path: str) -> None:
    """Hold an exclusive lock on ``OUTPUT/.lock`` until this process exits: a second run pointed at
    the same directory stops with a UserError instead of interleaving its files with this one's."""
    import fcntl

    os.makedirs(path, exist_ok=True)
    lock_path = os.path.join(path, LOCK)
    if os.path.abspath(lock_path) in _held_locks:
        return
    f = open(lock_path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        raise UserError(
            f"--output {path} is in use by another ernie_ft run{f' (pid {holder})' if holder else ''}; "
            "wait for it to finish or choose another directory"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held_locks[os.path.abspath(lock_path)] = f


def release_output(path: str) -> None:
    """Let go of ``lock_output(path)``'s lock (when the run ends; a long-lived process may train again)."""
    f = _held_locks.pop(os.path.abspath(os.path.join(path, LOCK)), None)
    if f is not None:
        f.close()
