"""glibc's heap in a process ernie_ft owns: freed tensors stay in it for the next step instead of going back to the
kernel.

Paddle allocates every CPU tensor with ``malloc`` and frees it when the last reference goes. glibc serves a block of
32 MB or more (at most; the threshold adapts from 128 KB) with a fresh ``mmap`` and unmaps it on ``free``, and gives
the top of its heap back once 128 KB are free there; so each training step page-faults its large activations and
gradients in again, and the kernel zeroes every page (a medium step: 2.0 million minor faults in 9 steps, 3.3 s of
system time, measured with ``benchmarks/profile_step.py --threads 1`` on an Intel Xeon). With both thresholds at
``RETAIN`` the freed blocks are reused: 0.9 million faults, 1.6 s, 3-8 % more tokens per CPU-second. The process's
resident memory stays at its peak, which a training step reaches again at once anyway.

Like ``mkl.use_avx2_on_amd``, this is a process-wide setting that only a process's owner makes
(``quiet.quiet_process``): a library call leaves a caller's heap as it was. It cannot be read back or undone. This
module imports neither Paddle nor PaddleNLP.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""``mallopt``'s parameters (malloc.h)."""
RETAIN = 1 << 30
"""Blocks below 1 GiB come from the heap, and up to 1 GiB free at its top stays there."""


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to ``RETAIN`` in this process. Returns whether both were set: False on
    a C library without ``mallopt`` (macOS, musl) or where glibc refuses a value."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, RETAIN)) and bool(mallopt(M_TRIM_THRESHOLD, RETAIN))
