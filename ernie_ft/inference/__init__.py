"""Prediction, evaluation and export of trained checkpoints, and the engines that run them."""
