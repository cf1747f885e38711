"""Prediction and evaluation with a saved checkpoint (dygraph)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.config import DataConfig
from ernie_ft.data.dataset import featurize
from ernie_ft.data.readers import TrainedColumn
from ernie_ft.errors import UserError
from ernie_ft.inference import ENGINES, PRECISION, check_installed, outputs, progress, runtime_and_precision
from ernie_ft.inference.stream import device_name, input_chunks, predict_stream
from ernie_ft.models.model_dir import ModelDir
from ernie_ft.models.modeling import compute_logits, task_batching
from ernie_ft.task import task_options, unused_data_settings
from ernie_ft.training import checkpoint

ANSWERS = {"answers": True}
"""A ``PredictOptions`` field's metadata when its value changes an answer: ``--resume`` and ``merge`` refuse an
output written with another value (``PredictOptions.answer_settings``); every other field says ``SAME``."""
SAME = {"answers": False}


@dataclass(frozen=True)
class PredictOptions:
    """What ``predict`` runs: the command line's flags as values. Each field's metadata says whether its value
    changes an answer (``ANSWERS``) or not (``SAME``)."""

    model: str = field(metadata=SAME)
    """Checkpoint directory: a run's output directory or its best/, or an export."""
    input: str = field(metadata=SAME)
    """File of inputs, in any format the checkpoint's task reads."""
    output: Optional[str] = field(default=None, metadata=SAME)
    """JSONL file to write; None: standard output."""
    batch_size: int = field(default=64, metadata=SAME)
    """Inputs per forward pass."""
    text_column: Optional[str] = field(default=None, metadata=ANSWERS)
    """Column or key with the text; None: as in training."""
    text_pair_column: Optional[str] = field(default=None, metadata=ANSWERS)
    """Column or key with the second text; None: as in training."""
    device: str = field(default="auto", metadata=SAME)
    """cpu, gpu, gpu:N or auto."""
    engine: str = field(default="auto", metadata=ANSWERS)
    """One of ``ENGINES``."""
    threshold: Optional[float] = field(default=None, metadata=ANSWERS)
    """A probability to decide with instead of the model's threshold (``TaskHooks.use_threshold``); None: its own."""
    top_k: Optional[int] = field(default=None, metadata=ANSWERS)
    """Tokens predicted per [MASK], for a task with a ``top_k`` option (fill-mask); None: the task's own."""
    trust_pickle: bool = field(default=False, metadata=SAME)
    """Allow weights stored as a pickle (``weights.weights_format``)."""
    task: Optional[str] = field(default=None, metadata=ANSWERS)
    """A task spec that replaces the one the checkpoint recorded (``checkpoint.checkpoint_task``)."""
    fill_mask: bool = field(default=False, metadata=SAME)
    """Only a masked-language-model checkpoint fits (``python -m ernie_ft pretrain predict``)."""
    chunk_size: int = field(default=512, metadata=SAME)
    """Records read, tokenised and answered at a time (``inference.stream``): memory follows it, not the input."""
    resume: bool = field(default=False, metadata=SAME)
    """Continue ``output`` after its last complete answer, when its progress file says this model, input and flags
    wrote it (``inference.outputs``)."""
    nproc: int = field(default=1, metadata=SAME)
    """Engine processes on this machine, each answering chunks of the input (``inference.pool``); the cores are shared
    between them."""
    gpus: Optional[str] = field(default=None, metadata=SAME)
    """GPU ids ("0,1"): one engine process per GPU (``inference.pool``); None: ``device`` and ``nproc``."""
    format: str = field(default="answers", metadata=ANSWERS)
    """What to write (``outputs.FORMATS``): the answers, or a Label Studio or doccano import with them as
    pre-annotations."""
    shard: Optional[str] = field(default=None, metadata=ANSWERS)
    """"K/N": answer only the K-th of N contiguous parts of the input, K from 1 (``inference.shards``); None: all."""
    label_config: Optional[str] = field(default=None, metadata=ANSWERS)
    """With ``format`` label-studio: a file of the project's labelling config, whose names the tasks take
    (``inference.tool_imports``)."""

    def answer_settings(self) -> dict:
        """The fields whose value changes an answer (``ANSWERS``), by name: what an output's progress file records."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["answers"]}


def resolve_engine(model_dir: str | ModelDir, engine: str) -> str:
    """``engine`` with 'auto' made concrete for ``model_dir`` (a checkpoint or a run's directory, or one already
    read): the first that it holds of int8 ONNX, ONNX (``export --format onnx [--quantize int8]``), Paddle Inference
    (``export``), else 'dygraph'."""
    return _engine(model_dir if isinstance(model_dir, ModelDir) else checkpoint.checkpoint_dir(model_dir), engine)


def _engine(source: ModelDir | str, engine: str) -> str:
    """``resolve_engine`` for a directory already read, or (a path) looked at now."""
    if engine not in ENGINES:
        raise UserError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine != "auto":
        return engine
    if isinstance(source, str):
        from ernie_ft.inference.onnx import onnx_file
        from ernie_ft.inference.static_graph import graph_file

        onnx, graph = lambda precision="fp32": onnx_file(source, precision), graph_file(source)
    else:
        onnx, graph = source.onnx, source.graph
    if onnx("int8"):
        return "onnxruntime-int8"
    return "onnxruntime" if onnx() else "inference" if graph else "dygraph"


def load_for_inference(
    model_dir: str | ModelDir,
    device: str,
    overrides: dict,
    engine: str = "dygraph",
    trust_pickle: bool = False,
    task: Optional[str] = None,
    threshold: Optional[float] = None,
    threads: int = 0,
    weights: bool = True,
):
    """(Loaded checkpoint, DataConfig for its inputs: see ``inference_data``).

    ``model_dir``: a checkpoint or a run's directory, read here once (``read_model_dir``; ``loaded.directory``,
    ``loaded.source``), or a ``ModelDir`` already read (nothing of it is read again but the weights). ``engine``
    'inference' runs the model exported by ``python -m ernie_ft export`` with Paddle Inference; 'auto' does where
    ``model_dir`` holds one. ``trust_pickle`` allows weights stored as a pickle (``weights.weights_format``).
    ``task``: a task spec that replaces the one the checkpoint recorded. ``threshold``: a probability the task decides
    with instead of its own (``--threshold``). ``threads``: the engine's CPU threads (0: the available cores).
    ``weights=False``: the task, labels and text pipeline only, no engine (``predict --nproc``'s parent).
    """
    source = model_dir if isinstance(model_dir, ModelDir) else checkpoint.checkpoint_dir(model_dir)
    engine = _engine(source, engine)
    check_installed(source, engine)
    if not (engine.startswith("onnxruntime") and device in ("auto", "cpu")):  # ONNX Runtime on the CPU: no Paddle
        from ernie_ft.training import runtime

        device = runtime.select_device(device)
        runtime.set_threads(threads)
    dygraph = weights and engine == "dygraph"
    loaded = checkpoint.load_model(source, weights=dygraph, trust_pickle=trust_pickle, task=task)
    if threshold is not None:
        loaded.task.use_threshold(threshold)
    if not weights:
        pass
    elif engine == "inference":
        from ernie_ft.inference.static_graph import InferenceModel

        loaded.model = InferenceModel(loaded.directory, device, threads)
    elif engine.startswith("onnxruntime"):
        from ernie_ft.inference.onnx import OnnxModel

        loaded.model = OnnxModel(loaded.directory, PRECISION.get(engine, "fp32"), threads, source=source)
    else:
        from ernie_ft.models.fast_layers import enable_fast_kernels

        enable_fast_kernels(loaded.model)
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
    settings.update(train=None, dev=None, test=None, header=None, sheet=None)  # they describe the training files
    return DataConfig(**settings)


def run_inference(loaded, data: DataConfig, path: str, flag: str, labelled: bool, batch_size: int):
    """(examples, features, logits) for every record of ``path``, tokenised as a streamed input is, without the
    cache: its Arrow files (pyarrow) are training's, and running an export imports nothing of training."""
    examples = loaded.task.read(path, data, flag, labelled=labelled)
    if labelled:
        loaded.task.check_labels(examples, loaded.labels, data, flag)
    split = featurize(loaded.task, flag.lstrip("-"), examples, loaded.pipeline, loaded.labels, data, cache=False)
    logits = compute_logits(
        loaded.model,
        split.features,
        loaded.pipeline.pad_id,
        batch_size,
        head=loaded.task.head,  # the run's seed: evaluation draws the masks its dev scores had
        **task_batching(loaded.task, loaded.pipeline, loaded.run.get("train", {}).get("seed", 0)),
    )
    return examples, split.features, logits


def engine_line(engine: str) -> str:
    """How ``predict`` and ``evaluate`` say what ran the model: 'engine onnxruntime, int8'."""
    return "engine {}, {}".format(*runtime_and_precision(engine))


def predict(options: PredictOptions) -> None:
    """``python -m ernie_ft predict``: one answer per input record, JSON Lines (Parquet for an output ending in
    .parquet), written as made when the input streams (``inference.chunks``), else once the file is read whole; on
    standard error the engine and device, the progress, and how many were written. ``nproc`` or ``gpus``: the
    chunks answered by several engine processes (``inference.pool``); ``shard``: only this part of the input."""
    from ernie_ft.inference import pool, shards

    if options.resume and not options.output:
        raise UserError("--resume continues an --output file; give the --output of the run to continue")
    if options.chunk_size < 1:
        raise UserError(f"--chunk-size must be 1 or more, not {options.chunk_size}")
    if options.format not in outputs.FORMATS:
        raise UserError(f"--format must be one of {', '.join(outputs.FORMATS)}, not {options.format!r}")
    shard = shards.parse_shard(options.shard) if options.shard is not None else None
    if shard and options.format == "label-studio":
        raise UserError(
            "--shard with --format label-studio: the parts of one JSON array cannot be joined; write --format "
            "doccano or the answers in parts, or give Label Studio one import file per part"
        )
    devices = pool.worker_devices(options.nproc, options.gpus, options.device)
    source = checkpoint.checkpoint_dir(options.model)  # the directory's one reading
    engine = _engine(source, options.engine)
    device = "cpu" if options.gpus else options.device  # --gpus: the parent runs no model
    loaded, data = load_checked(source, options, engine, device, weights=devices is None)
    print(f"predict: {engine_line(engine)} on {pool.describe(devices) or device_name()}", file=sys.stderr)
    chunks, why = input_chunks(loaded, data, options)
    if chunks is None:
        if devices or shard:
            flag = "--shard" if shard else "--gpus" if options.gpus else "--nproc"
            raise UserError(f"{flag}: --input {options.input} is read whole ({why}), so it cannot be split; "
                            "give JSON Lines, a table with a header line, plain text or Parquet")  # fmt: skip
        count = predict_whole(loaded, data, options, why)
    else:
        if shard:
            chunks = shards.shard_chunks(chunks, *shard)
        workers = None
        if devices:
            load = functools.partial(load_checked, source, options, engine)
            workers = pool.Pool(load, devices, pool.threads_each(devices), options.input, options.batch_size)
        try:
            count = predict_stream(loaded, data, options, chunks, source.path, engine, workers)
        except BaseException:
            if workers is not None:
                workers.close(abort=True)
            raise
        if workers is not None:
            workers.close()
    if count is not None:
        where = f" to {options.output}" if options.output else ""
        print(f"wrote {count} predictions{where} ({engine_line(engine)})", file=sys.stderr)


def load_checked(source: ModelDir, options: PredictOptions, engine: str, device: str, threads: int = 0, weights=True):
    """``load_for_inference`` of ``source`` with ``options``' task, flags and the checks ``predict`` makes of them
    (fill-mask, --top-k), in ``predict``'s process or in each of its workers (``inference.pool``)."""
    loaded, data = load_for_inference(
        source,
        device,
        {"text_column": options.text_column, "text_pair_column": options.text_pair_column},
        engine,
        options.trust_pickle,
        options.task,
        options.threshold,
        threads,
        weights,
    )
    if options.fill_mask and loaded.task.head != "mlm":
        raise UserError(
            f"--model {options.model}: a {loaded.task.name} checkpoint has no masked-language-model head; "
            "fill-mask needs a model trained by python -m ernie_ft.pretrain"
        )
    if options.top_k is not None:
        if "top_k" not in {f.name for f in task_options(type(loaded.task))}:
            raise UserError(
                f"--top-k is for fill-mask (a pretrain checkpoint); --model {options.model} is a "
                f"{loaded.task.name} checkpoint"
            )
        loaded.task = dataclasses.replace(loaded.task, top_k=options.top_k)  # checked as the task checks its options
    return loaded, data


def predict_whole(loaded, data: DataConfig, options: PredictOptions, why: str) -> int:
    """The answers to an input read whole (``why`` it is not streamed), written once all are made."""
    if options.input.lower().endswith(".parquet"):
        raise UserError(f"--input {options.input}: Parquet is read in chunks, and {why}; give JSON Lines")
    if options.resume:
        raise UserError(f"--resume: {options.input} is read whole ({why}), so there is nothing to continue")
    print(f"note: --input {options.input} is read whole: {why}", file=sys.stderr)
    examples, features, logits = run_inference(loaded, data, options.input, "--input", False, options.batch_size)
    records = loaded.task.predict(logits, features, examples, loaded.labels, data)
    convert = outputs.tool_import(options.format, loaded, options.label_config)
    with progress.held(options.output) if options.output else contextlib.nullcontext():
        if options.output:
            progress.start_over(options.output)  # no progress file: what a later --resume finds is not this output's
        out = outputs.writer(options.output, False, options.format, convert)
        try:
            out.write(records)
        finally:
            out.close()
    return len(records)
