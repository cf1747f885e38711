"""Prediction, evaluation and export of trained checkpoints, and the engines that run them."""

ENGINES = ("auto", "onnxruntime-int8", "onnxruntime", "inference", "dygraph")
"""How a checkpoint runs: 'dygraph' (Paddle's eager model), 'inference' (the model exported by
``python -m ernie_ft export``, run by Paddle Inference), 'onnxruntime' (``export --format onnx``'s model.onnx,
run by ONNX Runtime), 'onnxruntime-int8' (``export --format onnx --quantize int8``'s model.int8.onnx), or 'auto':
the first of these that the checkpoint holds, in the order int8 ONNX, ONNX, Paddle Inference, dygraph."""

PRECISION = {"onnxruntime-int8": "int8"}
"""The weights' precision per engine, where it is not fp32."""

FORMATS = ("paddle", "onnx", "hf")
"""What ``export`` writes: 'paddle', the static graph for Paddle Inference; 'onnx', that graph converted to ONNX
as well (``inference.onnx``)."""


def runtime_and_precision(engine: str) -> tuple[str, str]:
    """(what runs the model, its weights' precision) for a concrete engine, as ``/v1/info``, the page, ``predict`` and
    ``evaluate`` name them: ('onnxruntime', 'int8') for 'onnxruntime-int8', ('inference', 'fp32') for 'inference'."""
    return engine.split("-")[0], PRECISION.get(engine, "fp32")


def check_installed(source, engine: str) -> None:
    """A UserError when ``engine`` (concrete) runs on Paddle and this install has none (the runtime's, which runs
    exports): what ``source`` (a ``ModelDir``) holds, and what runs it here or how to export it."""
    import importlib.util

    from ernie_ft.errors import TRAIN_INSTALL, UserError

    if engine.startswith("onnxruntime") or importlib.util.find_spec("paddle") is not None:
        return
    model = source.given
    if source.onnx("int8") or source.onnx():
        raise UserError(
            f"--engine {engine} runs on Paddle, which this install lacks: drop --engine (auto runs --model {model}'s "
            f"ONNX model with ONNX Runtime), or {TRAIN_INSTALL}"
        )
    what = "a Paddle Inference export" if engine == "inference" else "a checkpoint, not an ONNX export"
    raise UserError(
        f"--model {model} is {what}, which runs on Paddle; this install runs ONNX exports: export it with the "
        f"training install ({TRAIN_INSTALL}): python -m ernie_ft export --model {model} --output DIR --format onnx "
        "--quantize int8, and give --model DIR"
    )
