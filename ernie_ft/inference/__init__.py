"""Prediction, evaluation and export of trained checkpoints, and the engines that run them."""

ENGINES = ("auto", "onnxruntime", "inference", "dygraph")
"""How a checkpoint runs: 'dygraph' (Paddle's eager model), 'inference' (the model exported by
``python -m ernie_ft export``, run by Paddle Inference), 'onnxruntime' (``export --format onnx``'s model.onnx,
run by ONNX Runtime), or 'auto': onnxruntime where the checkpoint holds model.onnx, else inference where it
holds an export, else dygraph."""

FORMATS = ("paddle", "onnx")
"""What ``export`` writes: 'paddle', the static graph for Paddle Inference; 'onnx', that graph converted to ONNX
as well (``inference.onnx``)."""
