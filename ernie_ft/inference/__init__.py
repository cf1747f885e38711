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
