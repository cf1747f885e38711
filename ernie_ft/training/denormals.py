"""Denormal floats flushed to zero in a process ernie_ft owns: Intel cores slow down on them by an order of magnitude.

An x86 core that meets a denormal operand (a float below 1.2e-38) takes a microcode assist; in MKL's matrix
products that made a padded medium training batch 1.6 to 6 times slower on an Intel Xeon with AMX (8-34 s of CPU a
step against 5.0-5.4 without padding, ``docs/benchmarks.md``, "Training on an Intel Xeon"). The MXCSR register's
flush-to-zero and denormals-are-zero bits make the core treat them as zero, which is what PyTorch's
``torch.set_flush_denormal(True)`` and ONNX Runtime's ``session.set_denormal_as_zero`` do: a value below 1.2e-38
becomes 0, nothing else changes. The bits belong to a thread and a new thread copies its creator's, so they are set
in the main thread before Paddle starts its math threads.

Like ``heap.retain_freed_memory``, a process-wide setting that only a process's owner makes
(``quiet.quiet_process``): a library call leaves a caller's floating point as it was. This module imports neither
Paddle nor PaddleNLP.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

MXCSR_WORD = 7
"""glibc's x86-64 ``fenv_t`` is eight 32-bit words; the last holds MXCSR."""
FLUSH_TO_ZERO, DENORMALS_ARE_ZERO = 0x8000, 0x0040


def flush_denormals() -> bool:
    """Set MXCSR's flush-to-zero and denormals-are-zero bits in this thread (and so in the threads it starts) through
    glibc's ``fegetenv``/``fesetenv``. Returns whether they were set: False off x86-64 Linux with glibc."""
    if (
        platform.system() != "Linux"
        or platform.machine() not in ("x86_64", "AMD64")
        or platform.libc_ver()[0] != "glibc"
    ):
        return False
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    except OSError:
        return False
    env = (ctypes.c_uint32 * 8)()
    if libm.fegetenv(env) != 0:
        return False
    env[MXCSR_WORD] |= FLUSH_TO_ZERO | DENORMALS_ARE_ZERO
    return libm.fesetenv(env) == 0
