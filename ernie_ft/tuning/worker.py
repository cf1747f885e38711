"""One trial of a search, in its own process: ``python -m ernie_ft.tuning.worker --task SPEC --recipe JSON
--output DIR --threads N --fd FD`` (started by ``runner``, never by hand).

The trial trains from its recipe as the training command would, in a process of its own so that trials on one
machine run side by side, each with its share of the cores and its own Paddle. Over the socket ``FD`` it sends
one JSON line per dev evaluation ({"step", "epochs", "metrics"}) and reads back "go" or "prune" (a pruned
trial stops as a stop request stops it: ``last/`` saved); at the end one line {"done": metrics} or {"error":
message}. The socket closing (the search gone) stops the trial at its next evaluation.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import traceback

from ernie_ft.errors import UserError
from ernie_ft.recipes import build_config
from ernie_ft.task import create_task, resolve_task, task_options, unused_data_settings
from ernie_ft.training.quiet import quiet_process


def floats(metrics: dict) -> dict:
    """The numbers among ``metrics`` (the per-class tables and thresholds stay in the trial's metrics.json)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Channel:
    """The trial's end of the socket to the search."""

    def __init__(self, fd: int):
        self.socket = socket.socket(fileno=fd)
        self.reader, self.writer = self.socket.makefile("r", encoding="utf-8"), self.socket.makefile("w")

    def send(self, message: dict) -> None:
        try:
            self.writer.write(json.dumps(message) + "\n")
            self.writer.flush()
        except OSError:  # the search is gone; the trial's files say what happened
            pass

    def on_dev(self, step: int, epochs: float, metrics: dict) -> bool:
        """The trainer's dev hook: report, then stop if the search prunes the trial (or has gone)."""
        self.send({"step": step, "epochs": epochs, "metrics": floats(metrics)})
        try:
            answer = self.reader.readline().strip()
        except OSError:
            answer = ""
        if answer == "prune":
            print(f"pruned by the search at step {step} ({epochs:.2f} epochs)", file=sys.stderr)
        elif answer != "go":
            print("the search has gone: stopping this trial", file=sys.stderr)
        return answer != "go"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ernie_ft.tuning.worker")
    parser.add_argument("--task", required=True)
    parser.add_argument("--recipe", required=True, help="the trial's recipe as JSON")
    parser.add_argument("--output", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    quiet_process()  # a process of ours, as the command's is
    channel = Channel(args.fd)
    try:
        task_cls = resolve_task(args.task)
        recipe = json.loads(args.recipe)
        overrides = {"output": args.output}
        if "threads" not in recipe.get("train", {}):
            overrides["threads"] = args.threads
        config = build_config(
            recipe,
            overrides,
            source="the trial's recipe",
            task_fields=task_options(task_cls),
            unused_data=unused_data_settings(task_cls),
        )
        from ernie_ft.training.trainer import train

        results = train(create_task(task_cls, config.task, args.task), config, on_dev=channel.on_dev)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        channel.send({"error": str(e)})
        return 2
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr)
        return 128 + getattr(e, "signum", 2)
    except Exception as e:  # a bug: its traceback goes to the trial's log, the search goes on
        traceback.print_exc()
        channel.send({"error": f"{type(e).__name__}: {e} (a bug: the traceback is in the trial's log)"})
        return 1
    channel.send({"done": {split: floats(metrics) for split, metrics in results.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
