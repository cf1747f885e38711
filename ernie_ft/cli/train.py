"""``python -m ernie_ft classify|ner|qa|pretrain [train]`` and ``python -m ernie_ft --task SPEC``: fine-tune
(or pretrain) with every run-config field, and the task's own options, as a flag."""

from __future__ import annotations

import argparse
import dataclasses
import os

from ernie_ft.cli.parsers import Parser, add_field_flags, flag_name
from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.recipes import SECTIONS, TOP_LEVEL, build_config, field_docs, load_recipe
from ernie_ft.task import BUILTIN, TaskHooks, create_task, task_options, unused_data_settings

DESCRIPTIONS = {
    "classify": "Fine-tune ERNIE for text classification (single texts or sentence pairs).",
    "ner": "Fine-tune ERNIE for named-entity recognition (CoNLL, CLUENER or span JSONL).",
    "qa": "Fine-tune ERNIE for extractive question answering (SQuAD-style JSON or JSONL).",
    "pretrain": "Pretrain ERNIE (masked language model, whole-word masking) on unlabelled text; predict fills [MASK].",
    "relation": "Fine-tune ERNIE for relation extraction: entity pairs and their predicates (DuIE JSONL, doccano...).",
}


def task_description(spec: str) -> str:
    return DESCRIPTIONS.get(spec, f"Fine-tune ERNIE for the task {spec}.")


def build_parser(prog: str, description: str, task_cls: type | None = None) -> Parser:
    """The training command line: every config field (and task option) as a flag, all defaulting to 'not given'.

    ``task_cls``: the task class with the ``TaskHooks`` (``resolve_task``); None: a task with the defaults.
    """
    hooks = task_cls or TaskHooks
    data = "--corpus FILE... [--dev FILE]" if hooks.reads_corpus else "--train FILE [--dev FILE] [--test FILE]"
    parser = Parser(
        prog=prog,
        description=description,
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        usage=f"{prog} [train] {data} --model MODEL --output DIR "
        f"[options]\n       {prog} predict --model DIR --input FILE [--output FILE]",
    )
    parser.add_argument("--config", help="YAML recipe with data:, model: and train: sections; flags override it")
    unused = unused_data_settings(hooks)
    if hooks.reads_corpus:
        parser.add_argument(
            "--corpus",
            nargs="+",
            dest="train",
            metavar="FILE",
            help=".txt files (one document per line, or documents separated by blank lines), TSV, "
            "CSV or JSONL (with --text-column), or glob patterns such as 'corpus/*.txt'",
        )
        unused = {**unused, "train": "its text comes from --corpus FILE..."}
    parser.inapplicable = {flag_name(name): reason for name, reason in unused.items()}
    for section, cls in SECTIONS.items():
        fields = [f for f in dataclasses.fields(cls) if not (section == "data" and f.name in unused)]
        add_field_flags(parser.add_argument_group(f"{section} settings"), cls, fields)
    options = task_options(task_cls)
    if options:
        add_field_flags(parser.add_argument_group("task settings (recipe section task:)"), task_cls, options)
    docs = field_docs(RunConfig)
    for name in TOP_LEVEL:
        parser.add_argument(flag_name(name), action="store_true", help=docs.get(name, ""))
    return parser


def parse_train_args(argv: list[str], prog: str, description: str, task_cls: type | None = None) -> RunConfig:
    """Parse training flags (and the recipe they name) into a validated RunConfig."""
    args = vars(build_parser(prog, description, task_cls).parse_args(argv))
    recipe_path = args.pop("config", None)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    return build_config(
        recipe,
        args,
        source=f"--config {recipe_path}" if recipe_path else "flags",
        task_fields=task_options(task_cls),
        unused_data=unused_data_settings(task_cls),
    )


def run(spec: str, task_cls: type, config: RunConfig, argv: list[str]) -> int:
    """Train the task ``spec`` (its class ``task_cls``) as ``config`` says: here, or in the processes
    ``--nproc``/``--gpus``/``--ips`` ask for, which are given the same arguments ``argv``."""
    from ernie_ft.training import gpus, launch

    if config.parallel.gpus is not None:  # before reading any data or starting any process
        gpus.check_gpus(config.parallel.gpus)
    config, argv = from_label_studio(config, argv)
    if launch.needs_launch(config.parallel):
        if not config.train.output:
            raise UserError("--output is required (the directory for the model, metrics and logs)")
        if config.resume:
            check_resumed_batch(config)
        command = [spec] if spec in BUILTIN else ["--task", spec]
        return launch.launch([*command, *argv], config.parallel, config.train.output)
    from ernie_ft.training.trainer import train

    train(create_task(task_cls, config.task, spec), config)
    return 0


def check_resumed_batch(config: RunConfig) -> None:
    """``--resume`` with several processes: the saved run's global batch against the one these processes would make,
    checked before any of them starts (each would import Paddle first), on the node that holds ``OUTPUT/last``."""
    from ernie_ft.training import checkpoint, gpus, resume_state

    parallel = config.parallel
    was = resume_state.saved_global_batch(os.path.join(config.train.output, checkpoint.LAST))
    per_node = len(gpus.check_gpus(parallel.gpus)) if parallel.gpus is not None else parallel.nproc
    processes = per_node * parallel.nodes
    if was is None or processes % parallel.tensor_parallel:  # the ranks report these
        return
    dp = processes // parallel.tensor_parallel
    mismatch = resume_state.batch_mismatch(was, config.train.batch_size * dp, dp)
    if mismatch:
        raise UserError(mismatch)


def from_label_studio(config: RunConfig, argv: list[str]) -> tuple[RunConfig, list[str]]:
    """``--train label-studio://HOST:PORT/PROJECT``: the project's export fetched (``data.label_studio_api``) and
    saved under the run's ``logs/`` (the one place of an output directory the run's own checks leave to it), then
    trained from as that file; (the config and the arguments for launched processes, naming the file)."""
    from ernie_ft.data import label_studio_api
    from ernie_ft.training import checkpoint

    value = config.data.train
    if not label_studio_api.is_project(value):
        return config, argv
    if not config.train.output:
        raise UserError("--output is required (the directory for the model, metrics and logs)")
    label_studio_api.parse(value, "--train")
    checkpoint.check_output(config.train.output, config.resume, config.overwrite)
    path = label_studio_api.save_export(value, "--train", os.path.join(config.train.output, checkpoint.LOGS))
    print(f"--train {value}: the project's export saved as {path}", flush=True)
    argv = [path if a == value else a.replace(value, path) if a.startswith("--train=") else a for a in argv]
    return dataclasses.replace(config, data=dataclasses.replace(config.data, train=path)), argv
