"""``python -m ernie_ft distill``: train a student classifier on a trained classifier's soft labels (or a student
tagger on a softmax NER teacher's per-token soft labels), with every training flag of ``classify`` (the student is
``--student``, not ``--model``)."""

from __future__ import annotations

import argparse
import dataclasses
import os

from ernie_ft.cli.parsers import Parser, add_field_flags, flag_name
from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.recipes import SECTIONS, TOP_LEVEL, build_config, field_docs, load_recipe
from ernie_ft.task import task_options

DESCRIPTION = (
    "Distil a trained classifier (the teacher) into a student model: the student learns the teacher's soft labels "
    "at a temperature, mixed with the hard labels, on the labelled and the unlabelled texts. The result is an "
    "ordinary classification checkpoint. The student takes the teacher's labels and data settings (--label-names, "
    "--max-len, --stride, --window-pooling, the columns) unless given here. With --transfer hidden or "
    "hidden+attention the student also learns the teacher's hidden states (and attention scores) layer by layer, "
    "TinyBERT's intermediate-layer distillation; a scratch student then takes the teacher's vocabulary. An NER "
    "teacher trained without --crf teaches a student tagger its soft labels token by token (--transfer logits; "
    "the result is an ordinary ner checkpoint, and a scratch student takes the teacher's vocabulary); a nested NER "
    "teacher (ner --nested) teaches a nested student its span scores."
)


def distill_options() -> list[dataclasses.Field]:
    from ernie_ft.distill.task import Distillation

    return task_options(Distillation)


def build_parser(prog: str) -> Parser:
    """The training command line of ``classify`` with the distillation's flags, ``--student`` for ``--model``."""
    parser = Parser(
        prog=prog,
        description=DESCRIPTION,
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        usage=f"{prog} --teacher RUN --student MODEL --train FILE [--unlabelled FILE...] [--dev FILE] --output DIR "
        "[options]",
    )
    parser.add_argument("--config", help="YAML recipe with data:, model:, train: and task: sections; flags override it")
    group = parser.add_argument_group("distillation (recipe section task:)")
    from ernie_ft.distill.task import Distillation

    docs = field_docs(Distillation)
    group.add_argument("--teacher", metavar="RUN", help=docs["teacher"])
    group.add_argument(
        "--student",
        dest="model",
        metavar="MODEL",
        help="the student, anything --model of classify takes: scratch:tiny (the default), scratch:nano, scratch:LxH "
        "(L layers of width H, e.g. scratch:2x128), a PaddleNLP name or a checkpoint directory (recipe: model: model:)",
    )
    group.add_argument("--unlabelled", nargs="+", metavar="FILE", help=docs["unlabelled"])
    own = ("temperature", "alpha", "transfer", "transfer_weight", "nested", "student_vocab", "class_weights")
    own += ("threshold", "thresholds", "tune_thresholds", "top_k")  # a multi-label teacher's student
    add_field_flags(group, Distillation, [f for f in distill_options() if f.name in own])
    parser.inapplicable = {"--model": "the student model is --student MODEL"}
    for section, cls in SECTIONS.items():
        fields = [f for f in dataclasses.fields(cls) if (section, f.name) != ("model", "model")]
        add_field_flags(parser.add_argument_group(f"{section} settings"), cls, fields)
    run_docs = field_docs(RunConfig)
    for name in TOP_LEVEL:
        parser.add_argument(flag_name(name), action="store_true", help=run_docs.get(name, ""))
    return parser


def parse_distill_args(argv: list[str], prog: str) -> RunConfig:
    """The flags (and the recipe they name) over the teacher's data settings, as a validated RunConfig whose
    ``task`` holds the distillation's settings."""
    from ernie_ft.distill.teacher import inherited_data, teacher_dir

    args = vars(build_parser(prog).parse_args(argv))
    recipe_path = args.pop("config", None)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    teacher = args.get("teacher") or (recipe.get("task") or {}).get("teacher")
    if not teacher:
        raise UserError("--teacher is required: the output directory of a classification or NER run to distil")
    data = recipe.get("data") or {}
    if isinstance(data, dict):  # else build_config says what is wrong with it
        recipe = {**recipe, "data": {**inherited_data(teacher_dir(teacher), {**data, **args}), **data}}
    config = build_config(
        recipe,
        args,
        source=f"--config {recipe_path}" if recipe_path else "flags",
        task_fields=distill_options(),
    )
    return with_transfer(config, teacher_dir(teacher))


def with_transfer(config: RunConfig, teacher: str) -> RunConfig:
    """``config`` checked for the student that the teacher's task names (``teacher``: its checkpoint directory;
    ``teacher.student_class``): the kind of student (--nested), --transfer, and, where the teacher reads the student's
    token ids (--transfer hidden and hidden+attention, and a teacher that runs in every step: NER), no tensor
    parallelism and a scratch student without --vocab given the teacher's vocabulary."""
    from ernie_ft.distill.nested import check_kind
    from ernie_ft.distill.teacher import student_class, teacher_task

    given = config.task.get("teacher", teacher)
    student = student_class(teacher, given)
    check_kind(student, teacher_task(teacher), given, config.task.get("nested"))
    transfer = config.task.get("transfer", "logits")
    student.check_transfer(transfer)
    if transfer == "logits" and not student.teacher_in_every_step:
        return config
    if config.parallel.tensor_parallel > 1:
        what = student.teacher_kind if transfer == "logits" else f"--transfer {transfer}"
        other = "" if student.teacher_in_every_step else " or --transfer logits"
        raise UserError(
            f"{what} does not run with --tensor-parallel {config.parallel.tensor_parallel}: the teacher runs whole "
            f"beside the student; use data parallelism (--nproc, --gpus){other}"
        )
    model = config.model
    if model.model.startswith("scratch:") and model.vocab is None and not config.task.get("student_vocab"):
        vocab = os.path.join(teacher, "vocab.txt")
        config = dataclasses.replace(config, model=dataclasses.replace(model, vocab=vocab))
    return config


def run(argv: list[str], prog: str) -> int:
    """Distil as the flags say: here, or in the processes ``--nproc``/``--gpus``/``--ips`` ask for."""
    from ernie_ft.training import gpus, launch

    config = parse_distill_args(argv, prog)
    if config.parallel.gpus is not None:  # before reading any data or starting any process
        gpus.check_gpus(config.parallel.gpus)
    if launch.needs_launch(config.parallel):
        if not config.train.output:
            raise UserError("--output is required (the directory for the model, metrics and logs)")
        return launch.launch(["distill", *argv], config.parallel, config.train.output)
    from ernie_ft.distill import distill

    distill(config)
    return 0
