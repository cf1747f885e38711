"""``python -m ernie_ft export``: a checkpoint as a static graph for Paddle Inference."""

from __future__ import annotations

import argparse

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser
from ernie_ft.inference import FORMATS


def build_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Export a trained model for deployment: a static graph for Paddle Inference, and with "
        "--format onnx the same graph as ONNX for ONNX Runtime.",
    )
    flags.add_model(parser)
    parser.add_argument("--output", required=True, metavar="DIR", help="directory for the exported model")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument(
        "--format",
        default="paddle",
        choices=FORMATS,
        help="paddle: a static graph for Paddle Inference; onnx: also model.onnx for ONNX Runtime, which predict, "
        "evaluate and serve then prefer (--engine auto) (default: paddle)",
    )
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    return parser


def run(args: argparse.Namespace) -> None:
    from ernie_ft.inference.export import export
    from ernie_ft.training.runtime import quiet_libraries

    quiet_libraries()
    out = export(
        args.model,
        args.output,
        overwrite=args.overwrite,
        trust_pickle=args.trust_pickle,
        task=args.task,
        format=args.format,
    )
    engine = "ONNX Runtime" if args.format == "onnx" else "Paddle Inference"
    print(f"exported to {out}: python -m ernie_ft predict --model {out} --input FILE runs it with {engine}")
