"""``python -m ernie_ft predict``: predict with any checkpoint, one JSON object per input."""

from __future__ import annotations

import argparse
from typing import Optional

from ernie_ft.cli import flags
from ernie_ft.cli.parsers import Parser


def build_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Predict with a trained checkpoint; writes one answer per input record, in input order, as made "
        "(a record without a text: its fields, no prediction), each with the record's other columns (an id).",
    )
    flags.add_model(parser)
    flags.add_input(parser)
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="file to write: JSON Lines, or Parquet when it ends in .parquet (default: JSON Lines on standard output)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue --output after its last complete answer (refused when the model, input or flags that wrote it "
        "differ); without it an existing --output is written again. One process at a time writes an --output",
    )
    flags.add_batch_size(parser)
    flags.add_chunk_size(parser, "tokenised and answered")
    flags.add_text_columns(parser)
    flags.add_device(parser)
    parser.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="engine processes on this machine, each answering chunks of the input, the cores shared between them; "
        "answers are written in input order (default: 1)",
    )
    parser.add_argument(
        "--gpus",
        metavar="IDS",
        help="one engine process per GPU, e.g. 0,1 (ids number the GPUs Paddle sees, after CUDA_VISIBLE_DEVICES)",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="answer only part K of N contiguous parts of --input, K from 1 (a Slurm array task, a Kubernetes indexed "
        "job's pod); join the parts with python -m ernie_ft merge --output ALL PART...",
    )
    parser.add_argument(
        "--format",
        default="answers",
        choices=("answers", "label-studio", "doccano"),
        help="answers: the model's answers (JSON Lines, or Parquet); label-studio: a JSON array of Label Studio tasks "
        "with the answers as predictions, to import; doccano: doccano's JSON Lines with the answers as labels "
        "(default: answers)",
    )
    flags.add_label_config(parser)
    flags.add_engine(parser)
    flags.add_threshold(parser)
    parser.add_argument(
        "--top-k", type=int, help="fill-mask (a pretrain checkpoint): tokens predicted per [MASK] (default: 5)"
    )
    flags.add_trust_pickle(parser)
    flags.add_task(parser)
    return parser


def run(args: argparse.Namespace, fill_mask: bool = False, task: Optional[str] = None) -> None:
    """Predict as the parsed ``args`` say. ``fill_mask``: only a masked-language-model checkpoint fits
    (``pretrain predict``); ``task``: the command's own task spec, used unless ``--task`` names another."""
    from ernie_ft.inference.predict import PredictOptions, predict

    predict(
        PredictOptions(
            model=args.model,
            input=args.input,
            output=args.output,
            format=args.format,
            label_config=args.label_config,
            batch_size=args.batch_size,
            text_column=args.text_column,
            text_pair_column=args.text_pair_column,
            device=args.device,
            engine=args.engine,
            threshold=args.threshold,
            top_k=args.top_k,
            trust_pickle=args.trust_pickle,
            task=args.task or task,
            fill_mask=fill_mask,
            chunk_size=args.chunk_size,
            resume=args.resume,
            nproc=args.nproc,
            gpus=args.gpus,
            shard=args.shard,
        )
    )
