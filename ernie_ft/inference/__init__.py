"""Prediction, evaluation and export of trained checkpoints, and the engines that run them."""

ENGINES = ("auto", "inference", "dygraph")
"""How a checkpoint runs: 'dygraph' (Paddle's eager model), 'inference' (the model exported by
``python -m ernie_ft export``, run by Paddle Inference), or 'auto': inference where the checkpoint holds an
export, else dygraph."""
