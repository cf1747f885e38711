"""Hyperparameter search over any task's training flags (``python -m ernie_ft tune``), on Optuna."""
