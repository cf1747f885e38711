"""The model behind the server: a loaded checkpoint that turns request inputs into ``predict``'s records."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Optional

from ernie_ft.inference import runtime_and_precision
from ernie_ft.inference.outputs import model_name
from ernie_ft.inference.predictor import Predictor
from ernie_ft.serving.limits import Limits

WARM_UP_TEXT = "你好，世界。"


class ServedModel(Predictor):
    """A ``Predictor`` (``prepare``, ``logits``, ``answer``) with what the server adds: the task's input fields,
    the warm-up input and what ``GET /v1/info`` tells. ``prepare`` runs on any thread, ``logits`` on the model's
    one thread; the inputs reach the task as records in memory (``read_records``), a bad field named where it is
    (``inputs[2].text``). ``name``: what ``/v1/info`` calls the model (default: ``model_name``); ``threshold``: the
    probability it decides with instead of its own (``serve --threshold``; a request may give its own)."""

    def __init__(
        self,
        model_dir: str,
        engine: str = "auto",
        device: str = "auto",
        trust_pickle: bool = False,
        task: Optional[str] = None,
        name: Optional[str] = None,
        threshold: Optional[float] = None,
    ):
        from ernie_ft.thresholds import REQUEST_LOWEST

        super().__init__(model_dir, engine, device, trust_pickle, task, threshold=threshold)
        self.device, self.trust_pickle, self.task_spec, self.threshold = device, trust_pickle, task, threshold
        if self.task.decides_by_threshold:  # a request may decide lower than the model: keep those scores
            self.task.keep_scores_above(REQUEST_LOWEST)
        self.name = name or model_name(model_dir)
        paddle = sys.modules.get("paddle")  # an ONNX export runs on the CPU, without it
        self.on_gpu = paddle is not None and paddle.device.get_device().startswith("gpu")
        self.required, self.optional = self.task.input_fields
        self.trained_with = self.loaded.run.get("inputs")
        """The input fields the training examples used (``trainer.trained_inputs``), None for a checkpoint that does
        not record them: the page shows these, while the API takes every field of the task."""

    def like(self, model_dir: str, name: str) -> ServedModel:
        """The checkpoint or export ``model_dir``, called ``name``, loaded as this one was: its engine, device,
        ``--task``, ``--trust-pickle`` and ``--threshold`` (what a swap keeps)."""
        return ServedModel(model_dir, self.engine, self.device, self.trust_pickle, self.task_spec, name, self.threshold)

    def example_input(self) -> dict:
        """The input the model warms up with: the task's ``example_input``, else a greeting in each required field."""
        return self.task.example_input or dict.fromkeys(self.required, WARM_UP_TEXT)

    def threshold_info(self) -> dict | None:
        """For a task that decides by a threshold, the range a request's ``parameters.threshold`` may take; else
        None."""
        from ernie_ft.thresholds import REQUEST_LOWEST

        return {"request_range": [REQUEST_LOWEST, 1.0]} if self.task.decides_by_threshold else None

    def quantization(self) -> dict | None:
        """How the int8 model was quantized (its onnx.json: method, target CPU, bits, attention), else None."""
        from ernie_ft.inference.onnx import quantization

        return quantization(self.loaded.directory, self.loaded.source) if self.engine == "onnxruntime-int8" else None

    def info(self, limits: Limits) -> dict:
        """What ``GET /v1/info`` tells about the model (the app adds readiness)."""
        return {
            "task": self.task.name,
            "head": self.task.head,
            "labels": self.labels,
            "threshold": self.threshold_info(),
            "model": self.name,
            "engine": runtime_and_precision(self.engine)[0],
            "precision": runtime_and_precision(self.engine)[1],
            "quantization": self.quantization(),
            "inputs": {
                "required": list(self.required),
                "optional": list(self.optional),
                "trained_with": list(self.trained_with or (*self.required, *self.optional)),
            },
            "limits": asdict(limits),
        }
