"""How many cores this process may use: asked by the training runtime and by every engine, Paddle's or not."""

from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's or Slurm's cpuset),
    which can be fewer than the machine's ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS, Windows)
        return os.cpu_count() or 1
