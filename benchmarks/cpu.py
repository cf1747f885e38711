"""The CPU a benchmark ran on, as every row of docs/benchmarks.md names it: its model and the flags that change
which kernels run (avx2, avx512f, avx512_vnni, avx512_bf16, amx).

    python benchmarks/cpu.py        # e.g. "CPU: AMD EPYC (family 26), 2 cores; avx2 avx512f avx512_vnni ..."

Each benchmark program prints ``line()`` first (``import cpu``: the programs run from this folder). Read from
``/proc/cpuinfo`` (Linux); elsewhere the platform's processor name and "flags not read".
"""

from __future__ import annotations

import os
import platform

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
"""The flags a row names, in this order: what ONNX Runtime's, oneDNN's and MKL's int8 and bf16 kernels choose by."""


def read(path: str = "/proc/cpuinfo") -> dict:
    """{'model', 'family', 'cores', 'flags'}: the first processor's model name and CPU family, the processors'
    count, and which of ``FLAGS`` it has (None when ``path`` cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        name = platform.processor() or platform.machine()
        return {"model": name, "family": None, "cores": os.cpu_count(), "flags": None}
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    present = set(fields.get("flags", "").split())
    return {
        "model": fields.get("model name", "unknown"),
        "family": fields.get("cpu family"),
        "cores": text.count("processor\t:") or os.cpu_count(),
        "flags": [flag for flag in FLAGS if flag in present],
    }


def kind(flags: list[str] | None) -> str:
    """The CPU kind a chart groups rows by: 'AMX', 'AVX-512 VNNI', 'AVX-512', 'AVX2' or 'older'."""
    flags = flags or []
    if "amx_int8" in flags:
        return "AMX"
    if "avx512_vnni" in flags:
        return "AVX-512 VNNI"
    if "avx512f" in flags:
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "older"


def line(path: str = "/proc/cpuinfo") -> str:
    """One line: the model, its family, the processors and the flags (and its kind)."""
    cpu = read(path)
    family = f" (family {cpu['family']})" if cpu["family"] else ""
    flags = " ".join(cpu["flags"]) if cpu["flags"] is not None else "flags not read"
    flags = flags or "none of " + " ".join(FLAGS)
    return f"CPU: {cpu['model']}{family}, {cpu['cores']} processors; {flags} [{kind(cpu['flags'])}]"


if __name__ == "__main__":
    print(line())


def paddle_environ(environ=None) -> dict:
    """A copy of ``environ`` (default: none) with what ernie_ft's command line sets for Paddle on this CPU:
    ``MKL_DEBUG_CPU_TYPE=5`` on AMD only, never over a value given (``ernie_ft.training.mkl``). For the Paddle
    baselines, which do not start through the command line."""
    from ernie_ft.training import mkl

    environ = dict(environ or {})
    mkl.use_avx2_on_amd(environ)
    return environ
