"""What each process started by paddle.distributed.launch runs: the parent's command line.

The launcher's own argument parser would take flags such as ``--train`` for abbreviations of
its ``--trainers``, so the command travels in the environment instead of on the command line.
The process ends through ``leave``.

On several nodes no launcher locks the output directory (the nodes may share one filesystem): the
job's global rank 0, the one process that writes it, holds the lock for the run (``hold_output``).
"""

import json
import os
import runpy
import signal
import sys
import traceback

from ernie_ft.errors import UserError

ARGV_VARIABLE = "ERNIE_FT_WORKER_ARGV"
OUTPUT_VARIABLE = "ERNIE_FT_WORKER_OUTPUT"  # set on several nodes: the output directory rank 0 locks
STARTED_VARIABLE = "ERNIE_FT_WORKER_STARTED"  # set on several nodes: the file a worker creates (``rendezvous.py``)


def leave(status: int) -> None:
    """End a launched process at once, without the interpreter's teardown.

    In Paddle 3.3 rank 0 hosts the job's TCPStore in a libuv thread. When a peer disconnects while
    rank 0's interpreter is unloading its libraries at exit, that thread's read callback aborts the
    process (SIGABRT, exit -6, no message; seen with gdb on a core: the main thread in _dl_fini, the
    LibUVMasterDaemon thread in LibUVClient::readCallback -> abort), after the work is done. This
    happened in about 1 of 15 two-process launches here. ``os._exit`` runs no teardown, so there is
    nothing to race with; every file the run writes is closed (or line-buffered) by then.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except RuntimeError:  # called from a signal handler in the middle of a write
            pass
    os._exit(status)


def _leave_on_signal(signum, frame):
    """SIGTERM outside the command (while importing it, or once it has ended and Paddle's launcher repeats the
    signal): nothing to stop gracefully, so leave at once with the status a signalled command has."""
    leave(128 + signum)


def hold_output() -> None:
    """In global rank 0 of a multi-node job, lock the output directory ``OUTPUT_VARIABLE`` names until this
    process ends (UserError if another run holds it); elsewhere nothing."""
    output = os.environ.get(OUTPUT_VARIABLE)
    if output and os.environ.get("PADDLE_TRAINER_ID") == "0":
        from ernie_ft.training.lock import lock_output

        lock_output(output)


def announce_start() -> None:
    """Create the file ``STARTED_VARIABLE`` names, if any: the launcher started this worker, so every node of the
    job has joined (the command's watch over the rendezvous, ``rendezvous.watch``, stops waiting)."""
    marker = os.environ.get(STARTED_VARIABLE)
    if marker:
        try:
            open(marker, "a").close()
        except OSError:  # the command has ended and removed its directory: nothing waits for it
            pass


def _status(exit: SystemExit) -> int:
    if exit.code is None or isinstance(exit.code, int):
        return exit.code or 0
    print(exit.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    from ernie_ft.training.quiet import quiet_process

    quiet_process()  # this process is ours, as the command's is: the same quiet before anything imports Paddle
    module, *args = json.loads(os.environ[ARGV_VARIABLE])
    sys.argv = [module, *args]
    signal.signal(signal.SIGTERM, _leave_on_signal)  # the command puts its own in place while it runs
    announce_start()
    try:
        hold_output()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except UserError as e:  # the output directory is another run's: one line, as the command prints it
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except SystemExit as e:
        code = _status(e)
    except KeyboardInterrupt as e:  # 130 after Ctrl-C, 143 after a SIGTERM (errors.Interrupted)
        code = 128 + getattr(e, "signum", 2)
    except BaseException:  # a bug of ours: show it, then leave the same way
        traceback.print_exc()
        code = 1
    leave(code)
