"""``python -m ernie_ft serve``: a checkpoint over HTTP, with dynamic batching and a page to try it."""

from __future__ import annotations

import argparse
import dataclasses

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser, add_field_flags


def build_parser(prog: str) -> Parser:
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.security import MAX_EXPORT_MB

    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Serve a trained checkpoint over HTTP: POST /v1/predict, GET /v1/info, /healthz, "
        "/readyz, a page to try the model at /, the OpenAPI page at /docs. With BASIC_AUTH_USER and "
        "BASIC_AUTH_PASS set, every route but /healthz and /readyz needs them (HTTP Basic authentication).",
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
    flags.add_calibrate(parser, "--export int8")
    flags.add_device(parser)
    flags.add_threshold(parser)
    parser.add_argument("--workers", type=int, default=1, help="server processes, each with its own model")
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    add_field_flags(parser.add_argument_group("limits"), Limits, typed=True)
    label_studio = parser.add_argument_group("training from Label Studio (off unless --label-studio-url is given)")
    label_studio.add_argument(
        "--label-studio-url",
        metavar="URL",
        help="turn on Label Studio's Start training: fetch the project's annotations from this Label Studio only "
        "(http://HOST:PORT or https://HOST), with the access token in LABEL_STUDIO_API_KEY, train a new model and "
        "swap it in (default: LABEL_STUDIO_URL; neither: off)",
    )
    label_studio.add_argument(
        "--label-studio-max-export-mb",
        type=float,
        default=MAX_EXPORT_MB,
        metavar="MB",
        help=f"the largest project export a run reads; a larger one stops the run (default: {MAX_EXPORT_MB})",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    import os

    from ernie_ft.serving import serve
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.security import BasicAuth, LabelStudioAccess

    auth = BasicAuth.from_environ(os.environ)
    label_studio = LabelStudioAccess.from_environ(args.label_studio_url, os.environ, args.label_studio_max_export_mb)

    return serve(
        args.model,
        args.host,
        args.port,
        args.engine,
        args.device,
        Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)}),
        export=args.export,
        calibration=args.calibrate,
        workers=args.workers,
        trust_pickle=args.trust_pickle,
        task=args.task,
        name=args.name,
        threshold=args.threshold,
        label_studio=label_studio,
        auth=auth,
    )
