"""Prediction and evaluation with a saved checkpoint (dygraph)."""

from __future__ import annotations

import dataclasses
import json
import sys

from ernie_ft.config import DataConfig
from ernie_ft.data.dataset import featurize
from ernie_ft.data.readers import TrainedColumn
from ernie_ft.errors import UserError
from ernie_ft.models import kernels
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.task import unused_data_settings
from ernie_ft.training import checkpoint, runtime


def resolve_engine(model_dir: str, engine: str) -> str:
    """``engine`` with 'auto' made concrete: 'inference' when ``model_dir`` holds an export
    (``python -m ernie_ft.export``), else 'dygraph'."""
    from ernie_ft.inference.export import graph_file

    if engine == "auto":
        return "inference" if graph_file(checkpoint.resolve_model_dir(model_dir)) else "dygraph"
    return engine


def load_for_inference(
    model_dir: str, device: str, overrides: dict, engine: str = "dygraph", trust_pickle: bool = False
):
    """(Loaded checkpoint, DataConfig for its inputs: see ``inference_data``).

    ``engine`` 'inference' runs the model exported by ``python -m ernie_ft.export`` with Paddle Inference;
    'auto' does where ``model_dir`` holds one (``resolve_engine``).
    ``trust_pickle`` allows weights stored as a pickle (``weights.weights_format``).
    """
    runtime.quiet_libraries()
    device = runtime.select_device(device)
    runtime.set_threads(0)
    engine = resolve_engine(model_dir, engine)
    loaded = checkpoint.load_model(model_dir, weights=engine == "dygraph", trust_pickle=trust_pickle)
    if engine == "inference":
        from ernie_ft.inference.export import InferenceModel

        loaded.model = InferenceModel(checkpoint.resolve_model_dir(model_dir), device)
    elif engine != "dygraph":
        raise UserError(f"--engine must be dygraph or inference, not {engine!r}")
    else:
        kernels.enable_fast_kernels(loaded.model)
    return loaded, inference_data(loaded.run["data"], overrides, loaded.task)


def inference_data(trained: dict, overrides: dict, task=None) -> DataConfig:
    """The DataConfig for prediction or evaluation inputs: the training run's data settings
    (``trained``), then the non-None ``overrides`` (flags given now), without the training files.
    A flag for a setting the checkpoint's ``task`` never reads is an error, not ignored.

    The training file's column names describe that file, so they become ``TrainedColumn``s: an
    input is read with them only where they fit it (a .txt is one text per line), while a column
    flag given now must be found.
    """
    unused = unused_data_settings(task)
    for key, value in overrides.items():
        if value is not None and key in unused:
            raise UserError(f"--{key.replace('_', '-')} does not apply to a {task.name} model ({unused[key]})")
    settings = dict(trained)
    for key in ("text_column", "text_pair_column", "label_column"):
        if settings.get(key) is not None:
            settings[key] = TrainedColumn(settings[key])
    settings.update({k: v for k, v in overrides.items() if v is not None})
    settings.update(train=None, dev=None, test=None)
    return DataConfig(**settings)


def run_inference(loaded, data: DataConfig, path: str, flag: str, labelled: bool, batch_size: int):
    """(examples, features, logits) for every record of ``path``."""
    examples = loaded.task.read(path, data, flag, labelled=labelled)
    if labelled:
        loaded.task.check_labels(examples, loaded.labels, data, flag)
    split = featurize(loaded.task, flag.lstrip("-"), examples, loaded.pipeline, loaded.labels, data)
    logits = compute_logits(
        loaded.model,
        split.features,
        loaded.pipeline.pad_id,
        batch_size,
        head=loaded.task.head,  # the run's seed: evaluation draws the masks its dev scores had
        **task_batching(loaded.task, loaded.pipeline, loaded.run.get("train", {}).get("seed", 0)),
    )
    return examples, split.features, logits


def predict(args) -> None:
    """``python -m ernie_ft.<task> predict``: one JSON line per input record."""
    loaded, data = load_for_inference(
        args.model,
        args.device,
        {"text_column": args.text_column, "text_pair_column": args.text_pair_column},
        args.engine,
        args.trust_pickle,
    )
    if getattr(args, "fill_mask", None) and loaded.task.head != "mlm":
        raise UserError(
            f"--model {args.model}: a {loaded.task.name} checkpoint has no masked-language-model head; "
            "fill-mask needs a model trained by python -m ernie_ft.pretrain"
        )
    if getattr(args, "top_k", None) is not None:
        if not hasattr(loaded.task, "top_k"):
            raise UserError(
                f"--top-k is for fill-mask (a pretrain checkpoint); --model {args.model} is a "
                f"{loaded.task.name} checkpoint"
            )
        loaded.task = dataclasses.replace(loaded.task, top_k=args.top_k)  # checked as the task checks its options
    examples, features, logits = run_inference(loaded, data, args.input, "--input", False, args.batch_size)
    records = loaded.task.predict(logits, features, examples, loaded.labels, data)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            out.close()
            print(f"wrote {len(records)} predictions to {args.output}", file=sys.stderr)
