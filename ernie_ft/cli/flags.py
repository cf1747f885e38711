"""The flags several commands share, each defined once: its spelling, choices, default and help.

The training commands' flags come from the run config (``cli.train``); where a flag here means the same
setting (``--device``, ``--trust-pickle``), its help is that field's docstring.
"""

from __future__ import annotations

import argparse

from ernie_ft.config import ModelConfig, TrainConfig
from ernie_ft.inference import ENGINES
from ernie_ft.recipes import field_docs


def add_model(parser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="checkpoint directory: a training run's --output (or its best/), or an export",
    )


def add_input(parser, labelled: bool = False) -> None:
    parser.add_argument(
        "--input",
        required=True,
        metavar="FILE",
        help=("labelled " if labelled else "")
        + "TSV, CSV or JSONL"
        + ("" if labelled else ", a .txt file with one text per line,")
        + " or SQuAD-style JSON (qa): what the checkpoint's task reads",
    )


def add_device(parser) -> None:
    parser.add_argument("--device", default="auto", help=field_docs(TrainConfig)["device"])


def add_engine(parser) -> None:
    parser.add_argument(
        "--engine",
        default="auto",
        choices=ENGINES,
        help="dygraph: Paddle's eager model; inference: the model exported by python -m ernie_ft export, run by "
        "Paddle Inference; onnxruntime: the model.onnx of export --format onnx, run by ONNX Runtime; "
        "onnxruntime-int8: the model.int8.onnx of export --format onnx --quantize int8; auto (the default): the "
        "first of these that --model holds, in the order onnxruntime-int8, onnxruntime, inference, else dygraph",
    )


def add_trust_pickle(parser) -> None:
    parser.add_argument("--trust-pickle", action="store_true", help=field_docs(ModelConfig)["trust_pickle"])


def add_batch_size(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=64, help="inputs per forward pass (default: 64)")


def add_chunk_size(parser, what: str) -> None:
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=512,
        metavar="N",
        help=f"records read, {what} at a time where the file streams; memory follows it, not the file's length "
        "(default: 512)",
    )


def add_text_columns(parser) -> None:
    parser.add_argument(
        "--text-column",
        help="column or JSON key with the text (default: the training run's when the file has it, else text_a, "
        "text, sentence or content)",
    )
    parser.add_argument(
        "--text-pair-column",
        help="column or JSON key with the second text (default: the training run's, else text_b or sentence2)",
    )


def add_task(parser) -> None:
    parser.add_argument(
        "--task",
        metavar="SPEC",
        help="the checkpoint's task as module:Class or path/to/file.py:Class, instead of the one it recorded "
        "(when that file moved, or lies inside the checkpoint: ernie_ft never runs such code unless named here)",
    )


def add_label_config(parser) -> None:
    parser.add_argument(
        "--label-config",
        metavar="FILE",
        help="with --format label-studio: the project's labelling config (the XML of Settings > Labeling Interface "
        "> Code); the tasks take its text fields (both, for a sentence pair) and tag names, and only the labels it "
        "offers (default: Label Studio's template names, data.text and label)",
    )


def add_threshold(parser) -> None:
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="P",
        help="decide with this probability (0 to 1) instead of the model's own threshold (0.5, or the ones "
        "--tune-thresholds chose): for classify --multi-label, ner --nested and relation models",
    )


def add_calibrate(parser, needs: str) -> None:
    """``--calibrate FILE``, the texts static int8 calibrates on; ``needs``: the flag that makes such a model.
    ``--calibration``, its first spelling, is kept as an alias (the same setting, not shown in --help)."""
    parser.add_argument(
        "--calibrate",
        metavar="FILE",
        help=f"with {needs}: the texts static int8 calibrates its activations' ranges on, in any format the task "
        "reads; 256 windows are drawn from it (default: the run's training file)",
    )
    parser.add_argument("--calibration", dest="calibrate", metavar="FILE", help=argparse.SUPPRESS)
