"""Paddle's bundled MKL and the CPU's vendor: the one switch that helps on AMD and hurts on Intel.

Paddle 3.3's MKL (2019) checks for "GenuineIntel" and takes its generic, slow code path on any other CPU unless
``MKL_DEBUG_CPU_TYPE=5`` is in the environment when its library loads (that is, before ``import paddle``). On an
AMD EPYC that lifts a 2-core fp32 GEMM from 87 to 245 GFLOP/s (a nano training step 1.9x); on an Intel Xeon the same
setting drops it from 350 to 210 GFLOP/s, forcing AVX2 kernels where MKL would pick AVX-512 or AMX
(``benchmarks/gemm_rate.py`` measures both). So it is set on AMD only, only by the processes ernie_ft owns
(``quiet.quiet_process``: the command line, its workers and trials), and never over a value the user set:
``import ernie_ft`` in a user's process leaves the environment as it was. This module imports neither Paddle nor
PaddleNLP.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Optional

VARIABLE = "MKL_DEBUG_CPU_TYPE"
AVX2 = "5"
"""MKL's code for its AVX2 kernels, which it otherwise keeps for Intel CPUs."""
CPUINFO = "/proc/cpuinfo"


def cpu_vendor(cpuinfo: Optional[str] = None) -> Optional[str]:
    """The CPU's vendor string from ``cpuinfo`` (default ``CPUINFO``): "AuthenticAMD", "GenuineIntel"; None where it
    cannot be read (not Linux, an unreadable file, no vendor line)."""
    try:
        with open(cpuinfo or CPUINFO, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return None


def use_avx2_on_amd(environ: Optional[MutableMapping[str, str]] = None, cpuinfo: Optional[str] = None) -> bool:
    """Set ``MKL_DEBUG_CPU_TYPE=5`` in ``environ`` (default: this process's) on an AMD CPU, where Paddle's MKL then
    runs its fast kernels. Leaves it alone on any other CPU, where the user set it, and once Paddle is imported in
    this process (too late: its MKL has read the environment; the processes it starts still inherit the value).
    Returns whether it set the variable."""
    environ = os.environ if environ is None else environ
    if VARIABLE in environ or cpu_vendor(cpuinfo) != "AuthenticAMD":
        return False
    if environ is os.environ and "paddle" in sys.modules:
        return False
    environ[VARIABLE] = AVX2
    return True
