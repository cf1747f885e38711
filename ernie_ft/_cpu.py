"""The CPU's flags as Linux lists them, for the code that picks kernels by instruction set: int8's target
(``inference.int8``) and the bf16 matmuls (``models.bf16``). Imports nothing of Paddle, so the runtime has it."""

from __future__ import annotations


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """This machine's CPU flags (Linux), None where they cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None
