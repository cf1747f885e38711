"""Every ``python -m ernie_ft`` command in one table.

    python -m ernie_ft classify|ner|qa [train] --train FILE ...   (also python -m ernie_ft.classify ...)
    python -m ernie_ft pretrain [train] --corpus FILE... ...        (also python -m ernie_ft.pretrain ...)
    python -m ernie_ft --task tasks/multilabel_intent.py:MultiLabelIntent --train FILE ...
    python -m ernie_ft predict --model DIR --input FILE                (any task's checkpoint)
    python -m ernie_ft evaluate|export|vocab|serve ...

Each command has a module here (``train``, ``predict``, ``evaluate``, ``export``, ``vocab``, ``serve``) with
``build_parser(prog)`` and ``run(args)``, which turns the parsed flags into the library's typed options;
the flags several commands share are defined once in ``flags``. The functions below, one per command,
take its arguments and return the exit status: 0, 2 after a user error (one ``error:`` line, no
traceback), 130 on Ctrl-C, 143 on SIGTERM. As attributes of this package they stand for the modules of
the same name (``from ernie_ft.cli import evaluate`` gives the command); import from a module by its full
name (``from ernie_ft.cli.evaluate import build_parser``). Library modules never import this package.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Optional

from ernie_ft.cli import distill as distill_command
from ernie_ft.cli import evaluate as evaluate_command
from ernie_ft.cli import export as export_command
from ernie_ft.cli import merge as merge_command
from ernie_ft.cli import predict as predict_command
from ernie_ft.cli import select as select_command
from ernie_ft.cli import serve as serve_command
from ernie_ft.cli import train as train_command
from ernie_ft.cli import tune as tune_command
from ernie_ft.cli import vocab as vocab_command
from ernie_ft.errors import Interrupted, UserError, missing_install
from ernie_ft.task import BUILTIN, resolve_task, with_hooks


def quiet_imports() -> None:
    """Hide what Paddle and PaddleNLP print that is noise to a user (``training.quiet.quiet_process``), for this
    command and the processes it starts. A command line's entry only: library functions leave the process alone."""
    from ernie_ft.training.quiet import quiet_process

    quiet_process()


def run_guarded(action: Callable) -> int:
    """The exit status of a command: ``action``'s if it returns an int (else 0), 2 after a UserError
    (one 'error:' line), 128 + the signal after Ctrl-C (130) or a SIGTERM (143).

    A SIGTERM raises ``Interrupted`` like Ctrl-C's KeyboardInterrupt, so cleanups run (the output
    lock, half-written files) instead of the process dying where it stands; training replaces this
    with a graceful stop (finish the step, save a resumable state).
    """
    quiet_imports()
    previous = {
        signal.SIGINT: signal.getsignal(signal.SIGINT),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_interrupted),
    }
    try:
        status = action()
        return status if isinstance(status, int) else 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # the runtime install, asked to train or export: which install has it
        if missing_install(e) is None:
            raise
        print(f"error: {missing_install(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        print(
            "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}", file=sys.stderr
        )
        return 128 + signum
    finally:  # training may leave its own handlers in place until here (trainer.StopRequest.restore)
        for s, handler in previous.items():
            signal.signal(s, handler)


def check_paths(args) -> None:
    """``--model`` (a directory) and ``--input`` (a file) checked before a command imports Paddle, so a wrong path
    fails at once; what the file holds is for the readers to check."""
    model, path = getattr(args, "model", None), getattr(args, "input", None)
    if model is not None and not os.path.isdir(model):
        raise UserError(f"--model {model}: directory not found")
    if path is None or os.path.isdir(path):  # a directory may be a saved dataset: the reader says
        return
    if not os.path.exists(path):
        raise UserError(f"--input: {path} not found; check the path (relative paths start at {os.getcwd()})")
    if not os.access(path, os.R_OK):
        raise UserError(f"--input: {path} cannot be read: permission denied")
    if os.path.getsize(path) == 0:
        raise UserError(f"--input: {path} is empty; it needs one record per line")


def checked(run: Callable, args) -> Callable:
    """``run(args)`` after ``check_paths``."""
    return lambda: check_paths(args) or run(args)


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def run_task(spec: str, argv: list[str], prog: str, task_cls: Optional[type] = None) -> int:
    """``train`` (the default) or ``predict`` for the task ``spec`` (a BUILTIN name, module:Class or
    file.py:Class). ``task_cls`` is the class itself when the caller has it (a task file run as a script)."""
    if argv and argv[0] == "predict":
        custom = None if spec in BUILTIN else spec  # the user named this task: it replaces the recorded one
        return predict(argv[1:], f"{prog} predict", fill_mask=spec == "pretrain", task=custom)
    train_argv = argv[1:] if argv and argv[0] == "train" else argv

    def train() -> int:
        cls = with_hooks(task_cls) if task_cls is not None else resolve_task(spec)
        config = train_command.parse_train_args(train_argv, prog, train_command.task_description(spec), cls)
        return train_command.run(spec, cls, config, train_argv)

    return run_guarded(train)


def predict(
    argv: list[str], prog: str = "python -m ernie_ft predict", fill_mask: bool = False, task: Optional[str] = None
) -> int:
    """``fill_mask``: only a pretrain checkpoint fits (``pretrain predict``); ``task``: the task spec to load
    the checkpoint with unless ``--task`` names one (``python -m ernie_ft --task SPEC predict``)."""
    args = predict_command.build_parser(prog).parse_args(argv)
    return run_guarded(checked(lambda a: predict_command.run(a, fill_mask=fill_mask, task=task), args))


def evaluate(argv: list[str], prog: str = "python -m ernie_ft evaluate") -> int:
    args = evaluate_command.build_parser(prog).parse_args(argv)
    return run_guarded(checked(evaluate_command.run, args))


def export(argv: list[str], prog: str = "python -m ernie_ft export") -> int:
    args = export_command.build_parser(prog).parse_args(argv)
    return run_guarded(checked(export_command.run, args))


def select(argv: list[str], prog: str = "python -m ernie_ft select") -> int:
    args = select_command.build_parser(prog).parse_args(argv)
    return run_guarded(checked(select_command.run, args))


def vocab(argv: list[str], prog: str = "python -m ernie_ft vocab") -> int:
    args = vocab_command.build_parser(prog).parse_args(argv)
    return run_guarded(lambda: vocab_command.run(args))


def serve(argv: list[str], prog: str = "python -m ernie_ft serve") -> int:
    args = serve_command.build_parser(prog).parse_args(argv)
    return run_guarded(lambda: serve_command.run(args))


# The command table: name -> (function(argv, prog) -> exit status, one line of help).
COMMANDS: dict[str, tuple[Callable, str]] = {
    **{
        name: (lambda argv, prog, name=name: run_task(name, argv, prog), description)
        for name, description in train_command.DESCRIPTIONS.items()
    },
    "distill": (
        lambda argv, prog: run_guarded(lambda: distill_command.run(argv, prog)),
        "Distil a trained classifier into a smaller student (the teacher's soft labels at a temperature).",
    ),
    "predict": (predict, "Predict with any checkpoint; one JSON object per input."),
    "evaluate": (evaluate, "Score a checkpoint on a labelled file: metrics, tables and pictures."),
    "export": (export, "Export a checkpoint for Paddle Inference."),
    "merge": (
        lambda argv, prog: run_guarded(lambda: merge_command.run(merge_command.build_parser(prog).parse_args(argv))),
        "Join the parts of predict --shard K/N into the answers of the whole input, in input order.",
    ),
    "select": (select, "Choose the texts of a pool to label next, with the model's pre-annotations."),
    "tune": (
        lambda argv, prog: run_guarded(lambda: tune_command.run(argv, prog)),
        "Search a task's training settings (Optuna): trials, pruning, a study several machines share.",
    ),
    "vocab": (vocab, "Learn a vocabulary extension (jieba words + BPE) from a corpus."),
    "serve": (serve, "Serve a checkpoint over HTTP, with dynamic batching and a page to try it."),
}


def task_command(name: str) -> Callable[[list[str]], int]:
    """``python -m ernie_ft.<name>`` as a function of its argument list, returning the exit status."""
    command, _ = COMMANDS[name]
    return lambda argv: command(list(argv), f"python -m ernie_ft.{name}")


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items())
    return (
        f"usage: python -m ernie_ft COMMAND [options]   (python -m ernie_ft COMMAND --help for its options)\n"
        f"       python -m ernie_ft --task module:Class|file.py:Class [train|predict] [options]\n\n"
        f"commands:\n{rows}"
    )


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """``python -m ernie_ft COMMAND ...``; ``prog`` names the command in usage lines
    (``python -m ernie_ft.classify`` when run that way)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    task_flag = next((i for i, a in enumerate(argv) if a == "--task" or a.startswith("--task=")), None)
    if task_flag is not None and argv[0] not in COMMANDS:  # a custom task: --task SPEC anywhere
        flag = argv.pop(task_flag)
        spec = flag.split("=", 1)[1] if "=" in flag else (argv.pop(task_flag) if task_flag < len(argv) else "")
        if not spec:
            print("error: --task needs a value: a built-in name or module:Class / file.py:Class", file=sys.stderr)
            return 2
        return run_task(spec, argv, prog or f"python -m ernie_ft --task {spec}")
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        from ernie_ft.recipes import suggest

        print(f"error: unknown command {name!r}.{suggest(name, COMMANDS)}\n\n{usage()}", file=sys.stderr)
        return 2
    command, _ = COMMANDS[name]
    return command(rest, prog or f"python -m ernie_ft {name}")
