"""``python -m ernie_ft serve``: a checkpoint over HTTP, with dynamic batching and a page to try it."""

from __future__ import annotations

import argparse
import dataclasses

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser, add_field_flags


def build_parser(prog: str) -> Parser:
    from ernie_ft.serving.limits import Limits

    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Serve a trained checkpoint over HTTP: POST /v1/predict, GET /v1/info, /healthz, "
        "/readyz, a page to try the model at /, the OpenAPI page at /docs.",
    )
    flags.add_model(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to listen on (default: 8000; 0: a free one, named in the 'serving ... on http://HOST:PORT/' line)",
    )
    parser.add_argument(
        "--name",
        help="what /v1/info and the page call the model (default: the --model directory's last part; never a path)",
    )
    flags.add_engine(parser)
    parser.add_argument(
        "--export",
        nargs="?",
        const="paddle",
        choices=("paddle", "onnx", "int8"),
        metavar="FORMAT",
        help="export the checkpoint first, beside it: paddle (the default) for Paddle Inference, as DIR-exported; "
        "onnx for ONNX Runtime, as DIR-onnx; int8 for ONNX Runtime in int8, as DIR-int8",
    )
    flags.add_device(parser)
    flags.add_threshold(parser)
    parser.add_argument("--workers", type=int, default=1, help="server processes, each with its own model")
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    add_field_flags(parser.add_argument_group("limits"), Limits, typed=True)
    return parser


def run(args: argparse.Namespace) -> int:
    from ernie_ft.serving import serve
    from ernie_ft.serving.limits import Limits

    return serve(
        args.model,
        args.host,
        args.port,
        args.engine,
        args.device,
        Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)}),
        export=args.export,
        workers=args.workers,
        trust_pickle=args.trust_pickle,
        task=args.task,
        name=args.name,
        threshold=args.threshold,
    )
