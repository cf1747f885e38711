"""What ``ernie_ft.serve`` held before serving was split into modules of one concern each, for the old
import path (``ernie_ft._compat``) until the next release. New code imports ``serve`` from ``ernie_ft.serving``
and the rest from its module (``limits``, ``model``, ``batcher``, ``schemas``, ``app``)."""

from ernie_ft.serving import WorkerSettings, app_from_env, serve
from ernie_ft.serving.app import BodyLimit, Service, create_app
from ernie_ft.serving.batcher import Batcher, QueueFull, Stats
from ernie_ft.serving.limits import CPU_FORWARD_BATCH as PER_ENGINE
from ernie_ft.serving.limits import Limits
from ernie_ft.serving.model import ServedModel
from ernie_ft.serving.schemas import request_model

CPU_FORWARD_BATCH = PER_ENGINE["inference"]
"""The old name's value, the pass size of the Paddle engines (now one per engine: ``limits.CPU_FORWARD_BATCH``)."""

__all__ = [
    "CPU_FORWARD_BATCH",
    "Batcher",
    "BodyLimit",
    "Limits",
    "QueueFull",
    "Service",
    "ServedModel",
    "Stats",
    "WorkerSettings",
    "app_from_env",
    "create_app",
    "request_model",
    "serve",
]
