"""``python -m ernie_ft evaluate``: score a checkpoint on a labelled file (metrics, tables and pictures)."""

from __future__ import annotations

import argparse

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser


def build_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Score a checkpoint on a labelled file: the metrics papers report, pictures and a metrics file.",
    )
    flags.add_model(parser)
    flags.add_input(parser, labelled=True)
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="where to write metrics and pictures (default: eval-<input name>/ beside the input; -2, -3, ... when "
        "that holds another checkpoint's evaluation); never inside the model directory",
    )
    parser.add_argument("--output-dir", dest="output", help=argparse.SUPPRESS)  # its earlier name, still taken
    flags.add_batch_size(parser)
    flags.add_chunk_size(parser, "run and scored")
    flags.add_text_columns(parser)
    parser.add_argument("--label-column", help="column or JSON key with the label (default: the training run's)")
    parser.add_argument("--allow-new-labels", action="store_true", help="score labels unknown to the model as errors")
    flags.add_device(parser)
    flags.add_engine(parser)
    flags.add_threshold(parser)
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    return parser


def run(args: argparse.Namespace) -> None:
    from ernie_ft.inference.evaluate import EvaluateOptions, evaluate

    evaluate(
        EvaluateOptions(
            model=args.model,
            input=args.input,
            output_dir=args.output,
            batch_size=args.batch_size,
            text_column=args.text_column,
            text_pair_column=args.text_pair_column,
            label_column=args.label_column,
            allow_new_labels=args.allow_new_labels,
            device=args.device,
            engine=args.engine,
            threshold=args.threshold,
            trust_pickle=args.trust_pickle,
            task=args.task,
            chunk_size=args.chunk_size,
        )
    )
