"""Command-line parsers: the training flags generated from the config dataclasses, and ``predict``'s.

A new setting is one dataclass field with a docstring; it becomes a flag and a recipe key.
Nothing here imports paddle, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ernie_ft.config import SECTIONS, TOP_LEVEL, RunConfig, build_config, field_docs, load_recipe, suggest, type_name
from ernie_ft.task import task_options, unused_data_settings


class Parser(argparse.ArgumentParser):
    """argparse that names the closest flag for a typo and exits with status 2.

    ``inapplicable`` maps flags the command leaves out on purpose (settings its task never reads)
    to the reason, which replaces the suggestion.
    """

    inapplicable: dict = {}

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            flags = [a for a in message.split(":", 1)[1].split() if a.startswith("-")]
            known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
            flag = flags[0].split("=")[0] if flags else None
            if flag in self.inapplicable:
                message = f"{flag} does not apply to {self.prog} ({self.inapplicable[flag]}). See --help."
            elif flags:
                message = f"unknown flag {flags[0]}.{suggest(flag, known)} See --help."
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_field(group, f: dataclasses.Field, doc: str) -> None:
    default = f.default if f.default is not dataclasses.MISSING else None
    help_text = (doc + (f" (default: {default})" if default not in (None, "") else "")).replace(
        "%", "%%"
    )  # argparse formats help
    if type_name(f) == "bool":
        group.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, help=help_text)
    else:
        group.add_argument(_flag(f.name), metavar=f.name.upper(), help=help_text)


def train_parser(prog: str, description: str, task_cls=None) -> Parser:
    """The training command line: every config field (and task option) as a flag, all defaulting to 'not given'."""
    corpus = getattr(task_cls, "reads_corpus", False)
    data = "--corpus FILE... [--dev FILE]" if corpus else "--train FILE [--dev FILE] [--test FILE]"
    parser = Parser(
        prog=prog,
        description=description,
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        usage=f"{prog} [train] {data} --model MODEL --output DIR "
        f"[options]\n       {prog} predict --model DIR --input FILE [--output FILE]",
    )
    parser.add_argument("--config", help="YAML recipe with data:, model: and train: sections; flags override it")
    unused = unused_data_settings(task_cls)
    if corpus:
        parser.add_argument(
            "--corpus",
            nargs="+",
            dest="train",
            metavar="FILE",
            help=".txt files (one document per line, or documents separated by blank lines), TSV, "
            "CSV or JSONL (with --text-column), or glob patterns such as 'corpus/*.txt'",
        )
        unused = {**unused, "train": "its text comes from --corpus FILE..."}
    parser.inapplicable = {_flag(name): reason for name, reason in unused.items()}
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section} settings")
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            if not (section == "data" and f.name in unused):
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
    parser = Parser(
        prog=f"{prog} predict",
        allow_abbrev=False,
        description="Predict with a trained checkpoint; writes one JSON object per input.",
    )
    parser.add_argument("--model", required=True, help="checkpoint directory (OUTPUT or OUTPUT/best)")
    parser.add_argument(
        "--input", required=True, help="TSV, CSV, JSONL, a .txt file with one text per line, or SQuAD JSON (qa)"
    )
    parser.add_argument("--output", help="JSONL file to write (default: standard output)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--text-column", help="column or key with the text (default as in training)")
    parser.add_argument("--text-pair-column", help="column or key with the second text")
    parser.add_argument("--device", default="auto", help="cpu, gpu, gpu:N or auto")
    parser.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "inference", "dygraph"),
        help="inference: run the model exported by python -m ernie_ft.export with Paddle Inference; "
        "auto (the default): inference when --model holds an export, else dygraph",
    )
    parser.add_argument(
        "--top-k", type=int, help="fill-mask (a pretrain checkpoint): tokens predicted per [MASK] (default: 5)"
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load weights stored as a pickle (model_state.pdparams), which can run code: only from a source you trust",
    )
    return parser


def parse_train_args(argv: list[str], prog: str, description: str, task_cls=None) -> RunConfig:
    """Parse training flags (and the recipe they name) into a validated RunConfig."""
    args = vars(train_parser(prog, description, task_cls).parse_args(argv))
    recipe_path = args.pop("config", None)
    recipe = load_recipe(recipe_path) if recipe_path else {}
    return build_config(
        recipe,
        args,
        source=f"--config {recipe_path}" if recipe_path else "flags",
        task_fields=task_options(task_cls),
        unused_data=unused_data_settings(task_cls),
    )


def evaluate_parser(prog: str) -> Parser:
    p = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Score a checkpoint on a labelled file: the metrics papers report, pictures and a metrics file.",
    )
    p.add_argument("--model", required=True, help="checkpoint directory (a run's OUTPUT or OUTPUT/best)")
    p.add_argument("--input", required=True, help="labelled TSV, CSV or JSONL file (qa: SQuAD-style JSON or JSONL)")
    p.add_argument(
        "--output-dir",
        help="where to write metrics and pictures (default: eval-<input name>/ in the "
        "run's directory; -2, -3, ... when that holds another checkpoint's or "
        "file's evaluation)",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--text-column"), p.add_argument("--text-pair-column"), p.add_argument("--label-column")
    p.add_argument("--allow-new-labels", action="store_true", help="score labels unknown to the model as errors")
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "inference", "dygraph"),
        help="inference: score the model exported by python -m ernie_ft.export with Paddle Inference; "
        "auto (the default): inference when --model holds an export, else dygraph",
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load weights stored as a pickle (model_state.pdparams), which can run code: only from a source you trust",
    )
    return p


def export_parser(prog: str) -> Parser:
    p = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Export a trained model for deployment (a static graph for Paddle Inference).",
    )
    p.add_argument("--model", required=True, help="checkpoint directory (a run's OUTPUT or OUTPUT/best)")
    p.add_argument("--output", required=True, help="directory for the exported model")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load weights stored as a pickle (model_state.pdparams), which can run code: only from a source you trust",
    )
    return p


def vocab_parser(prog: str) -> Parser:
    p = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Vocabulary tools. learn: word pieces from a corpus (jieba words, BPE inside them) "
        "appended to a model's vocabulary, for --vocab-extension.",
    )
    commands = p.add_subparsers(dest="command", required=True, metavar="learn")
    learn = commands.add_parser(
        "learn",
        allow_abbrev=False,
        help="learn a vocabulary extension from a corpus",
        description="Learn up to --size new word pieces from a corpus.",
    )
    learn.add_argument(
        "--corpus", nargs="+", required=True, metavar="FILE", help=".txt (one text per line), TSV, CSV or JSONL files"
    )
    learn.add_argument(
        "--base",
        required=True,
        metavar="MODEL_OR_VOCAB",
        help="a vocab.txt, a checkpoint directory or a PaddleNLP model name",
    )
    learn.add_argument("--size", type=int, required=True, metavar="N", help="new pieces to learn")
    learn.add_argument("--output", required=True, metavar="DIR", help="new directory for the extension")
    learn.add_argument(
        "--min-frequency", type=int, default=2, help="merge a pair only when it occurs this often (default: 2)"
    )
    learn.add_argument("--user-dict", help="jieba user dictionary (use the same one when training)")
    learn.add_argument("--text-column", help="column or JSON key with the text (default: text_a, text, text_b...)")
    learn.add_argument("--num-proc", type=int, default=1, help="processes for the before/after tokenisation")
    learn.add_argument("--top", type=int, default=20, help="how many frequent pieces to show (default: 20)")
    return p


def serve_parser(prog: str) -> Parser:
    from ernie_ft.serving.server import Limits

    p = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Serve a trained checkpoint over HTTP: POST /v1/predict, GET /v1/info, /healthz, "
        "/readyz, a page to try the model at /, the OpenAPI page at /docs.",
    )
    p.add_argument("--model", required=True, help="checkpoint directory (a run's OUTPUT or OUTPUT/best, or an export)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "inference", "dygraph"),
        help="auto: Paddle Inference when the checkpoint holds an export, else dygraph",
    )
    p.add_argument(
        "--export",
        action="store_true",
        help="export the checkpoint for Paddle Inference first (beside it, as DIR-exported)",
    )
    p.add_argument("--device", default="auto", help="cpu, gpu, gpu:N or auto")
    p.add_argument("--workers", type=int, default=1, help="server processes, each with its own model")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load weights stored as a pickle (model_state.pdparams), which can run code: only from a source you trust",
    )
    defaults = Limits()
    for name, help_text in (
        ("max_batch_size", "most windows run together (1: no dynamic batching)"),
        (
            "forward_batch_size",
            "most windows in one forward pass of a dynamic batch, sorted by "
            "length (0: 16 on a CPU, --max-batch-size on a GPU)",
        ),
        ("max_wait_ms", "how long a request waits for others to share its batch"),
        ("max_queue", "most requests waiting for the model; more get 503 + Retry-After"),
        ("max_inputs", "most inputs in one request"),
        ("max_chars", "longest text field in characters"),
        ("max_body_bytes", "largest request body"),
    ):
        value = getattr(defaults, name)
        p.add_argument(
            "--" + name.replace("_", "-"), type=type(value), default=value, help=f"{help_text} (default: {value})"
        )
    return p
