"""What a ``serve --workers`` process is started with: ``WorkerSettings``, passed to uvicorn's worker processes as
JSON in the environment. ``serve`` writes it and each worker's ``app_from_env`` reads it. The workers never train from
Label Studio (each would swap its own model: ``serve`` refuses ``--label-studio-url`` with them); their basic
authentication is the one ``serve`` read, from the same environment (``security.BasicAuth``), never written here."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import ClassVar, Optional

from ernie_ft.serving.limits import Limits

EXPORTS = {"paddle": "-exported", "onnx": "-onnx", "int8": "-int8"}
"""``serve --export`` formats and the suffix of the directory each is written to: Paddle Inference, ONNX, int8
ONNX."""


@dataclass(frozen=True)
class WorkerSettings:
    """What each ``--workers`` process needs to load its own model: ``serve`` passes it to uvicorn's worker
    processes as JSON in the environment variable ``ENV`` (uvicorn's factory takes no arguments)."""

    model_dir: str
    engine: str
    """Already resolved (one of ``inference.ENGINES`` but 'auto'): every worker runs the engine the first load chose."""
    device: str
    limits: Limits
    trust_pickle: bool = False
    task: Optional[str] = None
    """A task spec (``file.py:Class``) for a checkpoint whose task is not found where it was trained."""
    name: Optional[str] = None
    """What ``/v1/info`` calls the model."""
    threshold: Optional[float] = None
    """``serve --threshold``: the probability the model decides with instead of its own."""

    ENV: ClassVar[str] = "ERNIE_FT_SERVE"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSettings:
        settings = json.loads(text)
        return cls(**{**settings, "limits": Limits(**settings["limits"])})
