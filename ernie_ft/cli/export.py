"""``python -m ernie_ft export``: a checkpoint as a static graph for Paddle Inference."""

from __future__ import annotations

import argparse
import os

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser
from ernie_ft.inference import FORMATS
from ernie_ft.inference.int8 import DEFAULT_METHOD, METHODS, TARGETS
from ernie_ft.inference.libraries import LOG


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
        "evaluate and serve then prefer (--engine auto); hf: a Hugging Face transformers directory (config.json, "
        "model.safetensors, tokenizer, model card) (default: paddle)",
    )
    parser.add_argument(
        "--quantize",
        metavar="METHOD[:TARGET]",
        help=f"write model.int8.onnx instead of the fp32 models (needs --format onnx): int8 weights, activations "
        f"with ranges calibrated on training texts (int8-static: a text's answer is the same in any batch) or "
        f"quantized per batch (int8-dynamic: it depends on the texts beside it); int8 is {DEFAULT_METHOD}. "
        f"METHOD: {', '.join(METHODS)}. TARGET, the CPU that will run it: "
        f"{', '.join(f'{name} ({cpus})' for name, cpus in TARGETS.items())}; default: this machine's",
    )
    flags.add_calibrate(parser, "--quantize int8")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show what Paddle, paddle2onnx and ONNX Runtime print while they trace, convert and fuse the graph "
        "(default: written to export.log in the output)",
    )
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    return parser


def run(args: argparse.Namespace) -> None:
    from ernie_ft.inference.export import export

    out = export(
        args.model,
        args.output,
        overwrite=args.overwrite,
        trust_pickle=args.trust_pickle,
        task=args.task,
        format=args.format,
        quantize=args.quantize,
        calibration=args.calibrate,
        verbose=args.verbose,
    )
    if args.format == "hf":
        print(
            f"exported to {out}: transformers' AutoModelFor...from_pretrained('{out}') loads it; "
            f"python -m ernie_ft predict --model {out} --input FILE runs it here"
        )
        return
    engine = "ONNX Runtime" if args.format == "onnx" else "Paddle Inference"
    engine += " in int8" if args.quantize else ""
    print(f"exported to {out}: python -m ernie_ft predict --model {out} --input FILE runs it with {engine}")
    log = os.path.join(out, LOG)
    if os.path.isfile(log) and os.path.getsize(log):
        print(f"what Paddle, paddle2onnx and ONNX Runtime printed: {log} (--verbose shows it here)")
