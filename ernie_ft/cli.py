"""Command lines for every task: ``train`` (the default) and ``predict``.

Flags are generated from the config dataclasses, so a new setting is one field with a
docstring. Paddle is imported only after the arguments are parsed, so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Callable, Optional

from .config import SECTIONS, TOP_LEVEL, RunConfig, build_config, field_docs, load_recipe, suggest, type_name
from .errors import UserError
from .task import create_task, task_options


class Parser(argparse.ArgumentParser):
    """argparse that names the closest flag for a typo and exits with status 2."""

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            flags = [a for a in message.split(":", 1)[1].split() if a.startswith("-")]
            known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
            if flags:
                message = f"unknown flag {flags[0]}.{suggest(flags[0].split('=')[0], known)} See --help."
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_field(group, f: dataclasses.Field, doc: str) -> None:
    default = f.default if f.default is not dataclasses.MISSING else None
    help_text = doc + (f" (default: {default})" if default not in (None, "") else "")
    if type_name(f) == "bool":
        group.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, help=help_text)
    else:
        group.add_argument(_flag(f.name), metavar=f.name.upper(), help=help_text)


def train_parser(prog: str, description: str, task_cls=None) -> Parser:
    """The training command line: every config field (and task option) as a flag, all defaulting to 'not given'."""
    parser = Parser(prog=prog, description=description, allow_abbrev=False, argument_default=argparse.SUPPRESS,
                    usage=f"{prog} [train] --train FILE [--dev FILE] [--test FILE] --model MODEL --output DIR "
                          f"[options]\n       {prog} predict --model DIR --input FILE [--output FILE]")
    parser.add_argument("--config", help="YAML recipe with data:, model: and train: sections; flags override it")
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section} settings")
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            _add_field(group, f, docs.get(f.name, ""))
    options = task_options(task_cls)
    if options:
        group = parser.add_argument_group("task settings (recipe section task:)")
        docs = field_docs(task_cls)
        for f in options:
            _add_field(group, f, docs.get(f.name, ""))
    docs = field_docs(RunConfig)
    for name in TOP_LEVEL:
        parser.add_argument(_flag(name), action="store_true", help=docs.get(name, ""))
    return parser


def predict_parser(prog: str) -> Parser:
    parser = Parser(prog=f"{prog} predict", allow_abbrev=False,
                    description="Predict with a trained checkpoint; writes one JSON object per input.")
    parser.add_argument("--model", required=True, help="checkpoint directory (OUTPUT or OUTPUT/best)")
    parser.add_argument("--input", required=True, help="TSV, CSV, JSONL, a .txt file with one text per line, or SQuAD JSON (qa)")
    parser.add_argument("--output", help="JSONL file to write (default: standard output)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--text-column", help="column or key with the text (default as in training)")
    parser.add_argument("--text-pair-column", help="column or key with the second text")
    parser.add_argument("--device", default="auto", help="cpu, gpu, gpu:N or auto")
    parser.add_argument("--engine", default="dygraph", choices=("dygraph", "inference"),
                        help="inference: run the model exported by python -m ernie_ft.export with Paddle Inference")
    return parser


def parse_train_args(argv: list[str], prog: str, description: str, task_cls=None) -> RunConfig:
    """Parse training flags (and the recipe they name) into a validated RunConfig."""
    args = vars(train_parser(prog, description, task_cls).parse_args(argv))
    recipe_path = args.pop("config", None)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    return build_config(recipe, args, source=f"--config {recipe_path}" if recipe_path else "flags",
                        task_fields=task_options(task_cls))


def quiet_imports() -> None:
    """Hide the warnings Paddle prints on import (ccache, distutils): noise to a user, not advice."""
    import warnings

    warnings.filterwarnings("ignore", message="No ccache found")
    warnings.filterwarnings("ignore", message="Setuptools is replacing distutils")


def run_cli(task_cls: Optional[Callable], prog: str, description: str, argv: Optional[list[str]] = None,
            module: Optional[list[str]] = None, task_name: Optional[str] = None) -> int:
    """Entry point shared by every task's ``python -m``: dispatch, run, and turn UserError into exit 2.

    ``task_cls`` is the task's class (its dataclass fields become flags); ``task_name`` names
    the task in checkpoints when the class does not.

    ``module`` is how a launched worker process starts the same command: ``python -m`` and
    these words (e.g. ["ernie_ft.classify"] or ["ernie_ft", "--task", "file.py:Class"]).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_imports()

    def run() -> int:
        if argv and argv[0] == "predict":
            from .predict import predict

            predict(predict_parser(prog).parse_args(argv[1:]))
            return 0
        train_argv = argv[1:] if argv and argv[0] == "train" else argv
        config = parse_train_args(train_argv, prog, description, task_cls)
        from . import runtime

        if runtime.needs_launch(config.parallel):
            if not config.train.output:
                raise UserError("--output is required (the directory for the model, metrics and logs)")
            if module is None:
                raise UserError(f"{prog} cannot start several processes; use python -m ernie_ft --task ...")
            return runtime.launch(module[0], [*module[1:], *train_argv], config.parallel, config.train.output)
        from .trainer import train

        train(create_task(task_cls, config.task, task_name), config)
        return 0

    return run_guarded(run)


def run_guarded(action: Callable) -> int:
    """The exit status of a command: ``action``'s if it returns an int (else 0), 2 after a UserError
    (one 'error:' line), 130 on Ctrl-C."""
    try:
        status = action()
        return status if isinstance(status, int) else 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
