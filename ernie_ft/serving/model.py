"""The model behind the server: a loaded checkpoint that turns request inputs into ``predict``'s records."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.serving.limits import Limits
from ernie_ft.serving.schemas import INPUTS

WARM_UP_TEXT = "你好，世界。"


class ServedModel:
    """A loaded checkpoint that answers request inputs in three steps: ``prepare`` (read and featurize, any
    thread), ``logits`` (the model; one thread at a time) and ``answer``.

    The inputs reach the task as records in memory (``read_records``): the examples ``predict`` reads from a
    JSON Lines file of them, with any bad field named where it is (``inputs[2].text``).
    """

    def __init__(
        self,
        model_dir: str,
        engine: str = "auto",
        device: str = "auto",
        trust_pickle: bool = False,
        task: Optional[str] = None,
    ):
        import paddle

        from ernie_ft.inference.predict import load_for_inference, resolve_engine

        self.model_dir, self.engine = model_dir, resolve_engine(model_dir, engine)
        spec = {} if task is None else {"task": task}  # a task spec (file.py:Class) where the checkpoint's is not found
        self.loaded, self.data = load_for_inference(model_dir, device, {}, self.engine, trust_pickle, **spec)
        self.task, self.labels = self.loaded.task, self.loaded.labels
        self.on_gpu = paddle.device.get_device().startswith("gpu")
        self.required, self.optional = self.task.input_fields

    def example_input(self) -> dict:
        """The input the model warms up with: the task's ``example_input``, else a greeting in each required field."""
        return self.task.example_input or dict.fromkeys(self.required, WARM_UP_TEXT)

    def prepare(self, inputs: list[dict]) -> tuple[list, list[dict]]:
        """(examples, features) for the inputs, as ``predict`` makes them from a JSONL file (without its
        tokenisation cache); a UserError names the input's field (``inputs[2].text``)."""
        examples = self.task.read_records(inputs, self.data, INPUTS)
        encodings = self.loaded.pipeline.encode_many(self.task.texts(examples))
        features = self.task.featurize(examples, encodings, self.loaded.pipeline, self.labels, self.data)
        if not features:
            raise UserError("inputs: no model input could be built from the request")
        return examples, features

    def logits(self, features: list[dict], batch_size: int):
        """The model's outputs for ``features``, in forward passes of at most ``batch_size`` windows."""
        from ernie_ft.models.modeling import compute_logits, task_batching

        return compute_logits(
            self.loaded.model,
            features,
            self.loaded.pipeline.pad_id,
            batch_size,
            head=self.task.head,
            **task_batching(self.task, self.loaded.pipeline),
        )

    def answer(self, examples: list, features: list[dict], logits) -> list[dict]:
        """One ``predict`` record per example."""
        return self.task.predict(logits, features, examples, self.labels, self.data)

    def info(self, limits: Limits) -> dict:
        """What ``GET /v1/info`` tells about the model (the app adds readiness)."""
        return {
            "task": self.task.name,
            "head": self.task.head,
            "labels": self.labels,
            "model": os.path.abspath(self.model_dir),
            "engine": self.engine,
            "inputs": {"required": list(self.required), "optional": list(self.optional)},
            "limits": asdict(limits),
        }
