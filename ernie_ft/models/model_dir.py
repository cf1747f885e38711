"""A model directory read once: ``read_model_dir(path)`` lists it, reads its settings (config.json, ernie_ft.yaml,
labels.json, the tokenizer's files, onnx.json) and says what kind it is, in one ``ModelDir`` that predict, evaluate,
export, serve, distill and fine-tuning pass on instead of opening the directory again.

The kinds: an ernie_ft run (a checkpoint: ``ernie_ft.yaml`` beside PaddleNLP's files; a run's output directory
stands for its ``best/``), a PaddleNLP model, a transformers checkpoint, and the two exports, Paddle Inference
(``inference.json``) and ONNX (``model.onnx`` or ``model.int8.onnx``). An export is a checkpoint too: its
``run`` and ``labels`` are read like a run's.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ernie_ft.errors import UserError
from ernie_ft.models import hf
from ernie_ft.models.weights import PICKLE_WEIGHTS, SAFE_INDEX, SAFE_WEIGHTS
from ernie_ft.text.tokenizer_dir import META_FILE, read_tokenizer_dir
from ernie_ft.text.vocab_files import read_json

RUN_FILE = "ernie_ft.yaml"
BEST, LAST = "best", "last"
LABELS_FILE = "labels.json"
GRAPH_FILES = ("inference.json", "inference.pdmodel")
"""The Paddle Inference graph ``export`` writes (PIR JSON, or the older ProgramDesc), in the order they are tried."""
ONNX_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
ONNX_MANIFEST = "onnx.json"
TOKENIZER_JSONS = ("tokenizer_config.json", META_FILE)


class Kind(enum.Enum):
    """What made a model directory."""

    RUN = "ernie_ft run"
    PADDLENLP = "PaddleNLP"
    TRANSFORMERS = "transformers"
    PADDLE_INFERENCE = "Paddle Inference export"
    ONNX = "ONNX export"


@dataclass(frozen=True)
class ModelDir:
    """Everything ernie_ft reads of a model directory before it loads weights (``read_model_dir``)."""

    path: str
    """The directory the model is in: the path given, or a run's ``best/`` when the run's directory was given."""
    given: str
    """The path as the user gave it (for messages)."""
    kind: Kind
    files: frozenset[str]
    """The names in ``path``: every later "is there a ...?" is answered from them."""
    config: dict = field(default_factory=dict)
    """config.json ({} without one)."""
    hf_config: dict | None = None
    """config.json when it is a transformers checkpoint's (``hf.transformers_config``), else None."""
    run: dict | None = None
    """ernie_ft.yaml: {'task': the task spec, 'run': the run config}; None for a directory without one."""
    labels: list | None = None
    """labels.json, or a transformers config's ``id2label`` in id order; None when neither says."""
    vocab_file: str | None = None
    """vocab.txt or tokenizer.json; None when the directory holds no tokenizer."""
    tokenizer: dict = field(default_factory=dict)
    """``TextPipeline`` keywords of its tokenizer files (``read_tokenizer_dir``): rules, casing, extension."""
    onnx_manifest: dict | None = None
    """onnx.json (the hashes ``export --format onnx`` recorded), None without one."""

    @property
    def task(self) -> str | None:
        """The task spec the run recorded; None for a directory that is not an ernie_ft checkpoint."""
        return self.run["task"] if self.run else None

    @property
    def head(self) -> str | None:
        """A transformers checkpoint's ernie_ft head (``hf.head_of``); None otherwise."""
        return hf.head_of(self.hf_config) if self.hf_config is not None else None

    @property
    def weights(self) -> str | None:
        """How the weights are stored: 'safetensors', 'pickle' (``model_state.pdparams`` only), or None."""
        if self.files & {SAFE_WEIGHTS, SAFE_INDEX}:
            return "safetensors"
        return "pickle" if PICKLE_WEIGHTS in self.files else None

    @property
    def graph(self) -> str | None:
        """The Paddle Inference graph ``export`` wrote here, or None."""
        return next((os.path.join(self.path, n) for n in GRAPH_FILES if n in self.files), None)

    def onnx(self, precision: str = "fp32") -> str | None:
        """The ONNX model of ``precision`` ('fp32' or 'int8') here, or None."""
        return os.path.join(self.path, ONNX_FILES[precision]) if ONNX_FILES[precision] in self.files else None

    @property
    def exported(self) -> bool:
        """Whether it is an export (a Paddle Inference graph or ONNX)."""
        return self.kind in (Kind.PADDLE_INFERENCE, Kind.ONNX)

    def pipeline(self, **changes):
        """The ``TextPipeline`` of its tokenizer, with ``changes`` (constructor keywords) over the saved settings."""
        from ernie_ft.text.pipeline import TextPipeline

        if self.vocab_file is None:  # the error naming what is missing
            read_tokenizer_dir(self.path, None, self.files, {"config.json": self.config})
        return TextPipeline(self.vocab_file, **{**self.tokenizer, **changes})


def read_model_dir(path: str, flag: str = "--model") -> ModelDir:
    """Read the model directory ``path`` once (see the module). A missing directory, a run that stopped before it
    saved ``best/``, or a directory with neither ``ernie_ft.yaml`` nor ``config.json`` is a UserError naming
    ``flag``."""
    if not os.path.isdir(path):
        raise UserError(f"{flag} {path}: directory not found")
    files = frozenset(os.listdir(path))
    config = _json(path, "config.json", files, flag)
    hf_config = hf.transformers_config(config, path, files) if config and RUN_FILE not in files else None
    if RUN_FILE not in files and hf_config is None:
        if BEST in files and os.path.isfile(os.path.join(path, BEST, RUN_FILE)):
            return _read(os.path.join(path, BEST), path, flag)
        if LAST in files and os.path.isdir(os.path.join(path, LAST)):
            raise UserError(
                f"{flag} {path}: this run stopped before it saved a best/ model (it has last/ only); "
                "finish it by running the training command again with --resume"
            )
        if not config and "model_config.json" not in files:
            listing = ", ".join(sorted(files)[:8]) + (", ..." if len(files) > 8 else "") or "nothing"
            raise UserError(
                f"{flag} {path}: not an ernie_ft checkpoint or a model directory (no {RUN_FILE} or config.json; "
                f"found {listing}); pass a training run's output directory or its best/ folder, an export, "
                "or a model saved by PaddleNLP or transformers"
            )
    return _read(path, path, flag, files, config, hf_config)


def _read(path, given, flag, files=None, config=None, hf_config=None) -> ModelDir:
    if files is None:  # a run's best/
        files = frozenset(os.listdir(path))
        config = _json(path, "config.json", files, flag)
    run = labels = None
    if RUN_FILE in files:
        with open(os.path.join(path, RUN_FILE), encoding="utf-8") as f:
            run = yaml.safe_load(f)
        if LABELS_FILE in files:
            with open(os.path.join(path, LABELS_FILE), encoding="utf-8") as f:
                labels = json.load(f)
    elif hf_config is not None:
        labels = hf.labels_of(hf_config)
    jsons = {"config.json": config, **{name: _json(path, name, files, flag) for name in TOKENIZER_JSONS}}
    vocab_file, tokenizer = None, {}
    if files & {"vocab.txt", "tokenizer.json"}:
        vocab_file, tokenizer = read_tokenizer_dir(path, None, files, jsons)
    manifest = None
    if ONNX_MANIFEST in files:
        try:
            with open(os.path.join(path, ONNX_MANIFEST), encoding="utf-8") as f:
                manifest = json.load(f)
        except ValueError:  # refused where the ONNX model is run (``onnx.check_belongs``)
            manifest = None
    return ModelDir(
        path=path,
        given=given,
        kind=_kind(files, run, hf_config),
        files=files,
        config=config,
        hf_config=hf_config,
        run=run,
        labels=labels,
        vocab_file=vocab_file,
        tokenizer=tokenizer,
        onnx_manifest=manifest if isinstance(manifest, dict) else None,
    )


def _kind(files: frozenset, run: Any, hf_config: dict | None) -> Kind:
    if files & set(ONNX_FILES.values()):
        return Kind.ONNX
    if files & set(GRAPH_FILES):
        return Kind.PADDLE_INFERENCE
    if run is not None:
        return Kind.RUN
    return Kind.TRANSFORMERS if hf_config is not None else Kind.PADDLENLP


def _json(path: str, name: str, files: frozenset, flag: str) -> dict:
    """The JSON object in ``path``/``name`` ({} when the directory has none)."""
    if name not in files:
        return {}
    try:
        value = read_json(Path(path) / name)
    except UserError:
        if name == "config.json":  # as before: a config.json that does not parse makes no transformers checkpoint
            return {}
        raise
    return value if isinstance(value, dict) else {}


def as_model_dir(model: str | ModelDir, flag: str = "--model") -> ModelDir:
    """``model`` when it is already read, else ``read_model_dir(model, flag)``."""
    return model if isinstance(model, ModelDir) else read_model_dir(model, flag)


class SavedArrays:
    """A checkpoint's saved weights (its safetensors file) as numpy arrays read by name, each when first asked for
    (``saved.crf_transitions``): what a task that binds its model (``TaskHooks.binds_model``) gets where an engine
    runs the model instead of Paddle."""

    training = False

    def __init__(self, path: str):
        self._file, self._arrays = os.path.join(path, SAFE_WEIGHTS), {}

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._arrays:
            from safetensors import safe_open

            with safe_open(self._file, framework="np") as f:
                stored = set(f.keys())
                if name not in stored:
                    raise AttributeError(f"{self._file} holds no weight {name!r}")
                self._arrays[name] = f.get_tensor(name)
        return self._arrays[name]

    def eval(self):
        return self
