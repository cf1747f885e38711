"""``python -m ernie_ft merge``: the parts written by ``predict --shard K/N`` joined in input order."""

from __future__ import annotations

import argparse

from ernie_ft.cli.parsers import Parser


def build_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Join the outputs of predict --shard 1/N to N/N into the answers of the whole input, in input "
        "order; refuses a missing or unfinished part, or parts of another input, model or flags, naming it.",
    )
    parser.add_argument("parts", nargs="+", metavar="PART", help="the --output of each predict --shard K/N, any order")
    parser.add_argument(
        "--output",
        required=True,
        metavar="FILE",
        help="file to write: JSON Lines, or Parquet when it ends in .parquet (the parts' format)",
    )
    return parser


def run(args: argparse.Namespace) -> None:
    from ernie_ft.inference.shards import merge_parts

    merge_parts(args.output, args.parts)
