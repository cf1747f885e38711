"""``python -m ernie_ft select``: the texts of a pool to label next, with the model's pre-annotations."""

from __future__ import annotations

import argparse

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser


def build_parser(prog: str) -> Parser:
    from ernie_ft.data.pre_annotations import FORMATS
    from ernie_ft.inference.selection import STRATEGIES

    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Choose the texts of a pool to label next (those the model is least sure of) and write them with "
        "the model's predictions as a Label Studio or doccano import.",
    )
    flags.add_model(parser)
    flags.add_input(parser)
    parser.add_argument("--output", required=True, metavar="FILE", help="the import file to write")
    parser.add_argument("--size", type=int, required=True, help="how many texts to choose")
    parser.add_argument(
        "--strategy",
        default="entropy",
        choices=STRATEGIES,
        help="entropy, margin or least-confidence of the model's probabilities (of the predicted spans or triples "
        "for NER and relations), or random (default: entropy)",
    )
    parser.add_argument("--diverse", action="store_true", help="skip texts that nearly repeat a chosen one")
    parser.add_argument("--format", default="label-studio", choices=FORMATS, help="the tool (default: label-studio)")
    flags.add_label_config(parser)
    parser.add_argument("--seed", type=int, default=0, help="the shuffle of --strategy random (default: 0)")
    flags.add_batch_size(parser)
    flags.add_text_columns(parser)
    flags.add_device(parser)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="math threads on CPU; 0 shares the cores this process may use (default: 0)",
    )
    flags.add_engine(parser)
    flags.add_threshold(parser)
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    return parser


def run(args: argparse.Namespace) -> None:
    import dataclasses

    from ernie_ft.errors import UserError
    from ernie_ft.inference.selection import SelectOptions, select

    if args.size < 1:
        raise UserError(f"--size {args.size}: choose at least one text")
    if args.threads < 0:
        raise UserError(f"--threads {args.threads}: give 1 or more, or 0 to share the cores")
    select(SelectOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SelectOptions)}))
