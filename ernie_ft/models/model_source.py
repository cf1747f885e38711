"""What --model names: a scratch preset (``is_scratch``: its shape), a model directory (``model_dir_of``: read once
into a ``ModelDir``, whose ``Kind`` says what made it, and checked) or a PaddleNLP name (neither: the error when it
does not load). ``check_spec`` refuses an unknown preset or a path to no directory before anything is read.
"""

from __future__ import annotations

import os
import pickle
import re

from ernie_ft.config import ModelConfig
from ernie_ft.errors import UserError
from ernie_ft.models import hf
from ernie_ft.models.model_dir import ModelDir, read_model_dir
from ernie_ft.recipes import suggest

# Randomly initialised shapes for tests, demos and benchmarks (no download needed).
SCRATCH = {
    "tiny": dict(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512, max_position_embeddings=512
    ),
    "nano": dict(
        num_hidden_layers=4,
        hidden_size=312,
        num_attention_heads=12,
        intermediate_size=1248,
        max_position_embeddings=2048,
    ),  # ernie-3.0-nano-zh's shape
    "medium": dict(
        num_hidden_layers=6,
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=2048,
    ),  # ernie-3.0-medium-zh's shape
}
WEIGHT_FILES = ("model.safetensors", "model_state.pdparams")
FILE_ERRORS = (OSError, ValueError, EOFError, pickle.UnpicklingError)
"""What a user's model files (or the hub) cause while a model loads: missing, unreadable or truncated files, JSON or
safetensors that do not parse (ValueError), a network failure (requests' errors are OSErrors). Any other exception
is a bug and keeps its traceback."""


def scratch_shape(layers: int, hidden: int) -> dict:
    """The shape of ``scratch:LxH``: ``layers`` encoder layers of width ``hidden``; hidden // 64 attention heads (at
    least 1, fewer while they do not divide the width), a feed-forward layer 4 x hidden wide, 512 positions."""
    heads = max(1, hidden // 64)
    while hidden % heads:
        heads -= 1
    return dict(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )


def scratch_config(spec: str) -> dict:
    """The shape of a scratch model (``scratch:NAME`` of ``SCRATCH``, or ``scratch:LxH``); another is a UserError."""
    name = spec.split(":", 1)[1]
    shape = re.fullmatch(r"(\d+)x(\d+)", name)
    if shape and 1 <= int(shape[1]) <= 48 and 8 <= int(shape[2]) <= 8192:
        return scratch_shape(int(shape[1]), int(shape[2]))
    if name not in SCRATCH:
        hint = " A shape scratch:LxH takes 1 to 48 layers of width 8 to 8192." if shape else suggest(name, SCRATCH)
        raise UserError(
            f"--model {spec}: unknown scratch preset.{hint} Presets: {', '.join('scratch:' + k for k in SCRATCH)}, "
            "or scratch:LxH for L layers of width H (e.g. scratch:2x128, scratch:1x64)"
        )
    return SCRATCH[name]


def model_dir_of(model: ModelConfig) -> ModelDir | None:
    """--model read once when it is a directory (``read_model_dir``), for ``load_pipeline`` and ``build_model``; None
    for a scratch preset or a PaddleNLP name. A path to no directory is a UserError (``check_spec``)."""
    if is_scratch(model.model):
        return None
    if os.path.isdir(model.model):
        return read_model_dir(model.model)
    check_spec(model.model)  # a path to no directory
    return None


def check_directory(found: ModelDir) -> None:
    """A UserError unless the directory --model names (``found``, as read) holds a model: transformers' weights as
    safetensors (``hf.check_weights``), or an ernie_ft or PaddleNLP config with weights; a run's directory names
    its best/."""
    path, files = found.given, found.files
    if found.hf_config is not None:
        hf.check_weights(path, found.hf_config, files=files)
        return
    if found.path != path:  # a run's directory, which stands for its best/ where a model is loaded to predict
        raise UserError(
            f"--model {path} is a training run's output directory; pass its model: --model {os.path.join(path, 'best')}"
        )
    if not files & {"config.json", "model_config.json"} or not files & set(WEIGHT_FILES):
        raise UserError(
            f"--model {path}: not a model directory (expected config.json and {WEIGHT_FILES[0]}, written by "
            f"ernie_ft, PaddleNLP or Hugging Face transformers; found {', '.join(sorted(files)) or 'nothing'})"
        )


def offline_hint(name: str, reason: str) -> UserError:
    """The error for a model name PaddleNLP could not load: its reason, whole, and how to bring the model over as
    safetensors (PaddleNLP 2.8's ``save_pretrained`` writes a pickle unless told otherwise, which ernie_ft refuses)."""
    cause = " ".join(reason.split())
    return UserError(
        f"--model {name}: could not load it ({cause}). If this machine is offline, download the model where there "
        f'is network access: python -c "from paddlenlp.transformers import AutoModel, AutoTokenizer; '
        f"AutoModel.from_pretrained('{name}').save_pretrained('{name}', safe_serialization=True); "
        f"AutoTokenizer.from_pretrained('{name}').save_pretrained('{name}')\", copy the folder here and pass "
        f"--model ./{name}"
    )


def is_scratch(spec: str) -> bool:
    """--model names a randomly initialised shape: ``scratch:NAME`` of ``SCRATCH``, or ``scratch:LxH``."""
    return spec.startswith("scratch:")


def check_spec(spec: str) -> None:
    """A UserError for a --model that names nothing: an unknown scratch preset, or a path to no directory (anything
    else not a directory is a PaddleNLP name, which only loading can check)."""
    if is_scratch(spec):
        scratch_config(spec)
    elif not os.path.isdir(spec) and (os.sep in spec or spec.startswith(".")):
        raise UserError(f"--model {spec}: directory not found")
