"""``python -m ernie_ft tune TASK [the task's flags] --trials N [--space SPEC] --output DIR``: a hyperparameter search
on Optuna over any task's training flags (``--task file.py:Class`` for a custom task).

The task's own flags are the first trial's settings and what the others share; ``--space`` names what varies. The
study lives in DIR/study.db (or ``--storage``): the same command again, with a larger ``--trials``, goes on, and
several machines on one ``--storage`` share it. The search's own flags are below; ``--metric`` and ``--seed`` are
the training flags of the same name (the dev metric trials are scored on; each trial's seed).
"""

from __future__ import annotations

from ernie_ft.cli.parsers import Parser
from ernie_ft.cli.train import build_parser as build_train_parser
from ernie_ft.cli.train import task_description
from ernie_ft.errors import UserError
from ernie_ft.recipes import build_config, load_recipe
from ernie_ft.task import BUILTIN, resolve_task, task_options, unused_data_settings

TUNE_FLAGS = (
    "trials", "space", "workers", "storage", "study", "pruner", "prune_after", "prune_warmup", "sampler",
    "sampler_seed", "heartbeat",
)  # fmt: skip


def split_task(argv: list[str]) -> tuple[str, list[str]]:
    """(the task spec, the other arguments): ``TASK ...`` (a built-in name) or ``--task SPEC`` anywhere."""
    rest = list(argv)
    for i, arg in enumerate(rest):
        if arg == "--task" or arg.startswith("--task="):
            rest.pop(i)
            spec = arg.split("=", 1)[1] if "=" in arg else (rest.pop(i) if i < len(rest) else "")
            if not spec:
                raise UserError("--task needs a value: a built-in name or module:Class / file.py:Class")
            return spec, rest
    if rest and rest[0] in BUILTIN:
        return rest[0], rest[1:]
    given = f" (not {rest[0]!r})" if rest and not rest[0].startswith("-") else ""
    raise UserError(f"tune needs a task first{given}: one of {', '.join(BUILTIN)}, or --task file.py:Class")


def build_parser(prog: str, spec: str, task_cls) -> Parser:
    """The task's training flags and the search's own."""
    parser = build_train_parser(prog, task_description(spec), task_cls)
    parser.description = f"Search the training settings of {spec} with Optuna. " + parser.description
    parser.usage = f"{prog} TASK|--task SPEC [the task's flags] --output DIR --trials N [--space SPEC] [options]"
    add_search_flags(parser.add_argument_group("search settings"))
    return parser


def add_search_flags(group) -> None:
    """The search's own flags (``TUNE_FLAGS``)."""
    group.add_argument("--trials", type=int, required=True, help="trials the study holds at the end (all calls)")
    group.add_argument(
        "--space",
        help="what varies: NAME=LOW..HIGH[:log] or NAME=A|B|C, comma-separated, NAME any of the flags above "
        "(lr=1e-5..1e-2:log,epochs=1..5,batch_size=16|32,warmup=0..0.2). Default: the task's (docs/tuning.md)",
    )
    group.add_argument("--workers", type=int, default=1, help="trials run at once here, the cores split (default 1)")
    group.add_argument("--storage", help="an Optuna storage URL shared by several machines. Default: DIR/study.db")
    group.add_argument("--study", help="the study's name in --storage. Default: the --output directory's name")
    group.add_argument(
        "--pruner",
        default="median",
        help="median (a trial worse than the median of the others at the same point), hyperband, none, or "
        "threshold:VALUE (a trial worse than VALUE at an evaluation); default median",
    )
    group.add_argument(
        "--prune-after", type=int, default=3, help="trials that finish before the median pruner prunes (default 3)"
    )
    group.add_argument(
        "--prune-warmup",
        type=float,
        default=0.0,
        metavar="EPOCHS",
        help="epochs of its own a trial trains before any pruner may stop it (e.g. 0.5); default 0",
    )
    group.add_argument("--sampler", choices=("tpe", "random"), default="tpe", help="default tpe")
    group.add_argument(
        "--sampler-seed",
        type=int,
        help="the sampler's seed, with each trial's number (no trial draws another's settings). Default: --seed",
    )
    group.add_argument(
        "--heartbeat",
        type=int,
        default=60,
        metavar="SECONDS",
        help="a running trial's heartbeat in the study; one silent twice as long (its tune killed) is failed by the "
        "next call, and its parameters run again (default 60)",
    )


def own_process() -> None:
    """What the tune command sets for its whole process, as its owner (a library call of ``tuning.search.tune``
    leaves them to its caller): Optuna's log level (its INFO line per trial says again what tune prints) and
    matplotlib's backend (the pictures are files: no window, no display needed)."""
    import matplotlib
    import optuna

    matplotlib.use("Agg")
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def run(argv: list[str], prog: str) -> int:
    """Parse, search, report; the exit status (130 after Ctrl-C, through ``cli.run_guarded``)."""
    from ernie_ft.tuning import search

    if argv and argv[0] in ("-h", "--help"):  # the search's flags; the task's come with TASK --help
        parser = Parser(prog=prog, description=__doc__.split("\n\n")[0].replace("``", ""), allow_abbrev=False)
        parser.usage = f"{prog} TASK|--task SPEC [the task's flags] --output DIR --trials N [--space SPEC] [options]"
        parser.epilog = f"{prog} TASK --help lists the task's flags too"
        add_search_flags(parser.add_argument_group("search settings"))
        parser.parse_args(argv)
    spec, rest = split_task(argv)
    task_cls = resolve_task(spec)
    args = vars(build_parser(prog, spec, task_cls).parse_args(rest))
    tune = {name: args.pop(name, None) for name in TUNE_FLAGS}
    recipe_path = args.pop("config", None)
    config = build_config(
        load_recipe(recipe_path) if recipe_path else {},
        args,
        source=f"--config {recipe_path}" if recipe_path else "flags",
        task_fields=task_options(task_cls),
        unused_data=unused_data_settings(task_cls),
    )
    if not config.train.output:
        raise UserError("--output is required (the directory of the study, its trials and the best checkpoint)")
    if tune["trials"] < 1 or tune["workers"] < 1:
        raise UserError("--trials and --workers must be at least 1")
    if tune["sampler_seed"] is None:
        tune["sampler_seed"] = config.train.seed
    own_process()
    search.tune(spec, task_cls, config, **tune)
    return 0
