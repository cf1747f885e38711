"""Compiling ``csrc/cpu_kernels.c`` for ``kernels`` (and ``csrc/onednn_bf16.c`` for ``bf16``): at first use, with
``cc -O3 -march=native -fopenmp`` linked to the OpenMP runtime of Paddle's MKL (or to its oneDNN), into a cache keyed
by the source, flags and CPU (under ``$ERNIE_FT_CACHE``, default ``~/.cache/ernie_ft``), bounded by
``COMPILE_SECONDS``. A cached library is used only if its bytes match the SHA-256 recorded when it was built and only
this user can write it (``_trusted``): loading it runs its code.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import paddle

from ernie_ft.data.dataset import default_cache_dir

SOURCE = Path(__file__).with_name("csrc") / "cpu_kernels.c"
FLAGS = ["-O3", "-march=native", "-fno-trapping-math", "-fno-math-errno", "-fopenmp", "-fPIC"]
if platform.machine().lower() in ("x86_64", "amd64"):
    # gcc's -march=native tunes Intel's AVX-512 CPUs (Ice Lake to Sapphire Rapids) for 256-bit vectors; the fused
    # kernels ran a fifth faster with 512 (GELU forward and backward on medium's FFN, 1 thread: 39 -> 31 ms).
    # Where the CPU has no AVX-512, the flag changes nothing.
    FLAGS.append("-mprefer-vector-width=512")


def _cpu_id() -> str:
    """What -march=native depends on: the machine and, on Linux, the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return platform.machine() + "".join(sorted({x for x in lines if x.startswith(("model name", "flags"))}))
    except OSError:
        return platform.machine() + platform.processor()


def _openmp_link() -> list[str]:
    """Link to the OpenMP runtime Paddle's MKL already runs (Intel's libiomp5, shipped in the wheel):
    with a second runtime (gcc's libgomp), two thread pools spin for the same cores and the
    matmuls after each fused kernel ran a third slower."""
    libs = Path(paddle.__file__).parent / "libs"
    if (libs / "libiomp5.so").exists():
        return [f"-L{libs}", "-l:libiomp5.so", f"-Wl,-rpath,{libs}"]
    return ["-fopenmp"]


COMPILE_SECONDS = 120  # a compiler that hangs (a network home, a wedged toolchain) must not hang training


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted(target: Path) -> bool:
    """A cached library is loaded only if this user owns it, nobody else may write it, and its bytes
    match the SHA-256 recorded when this code built it: loading a shared library runs its code."""
    record = target.with_name(target.name + ".sha256")
    try:
        st = target.stat()
        recorded = record.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022 and _digest(target) == recorded


def onednn_link() -> list[str]:
    """Link to the oneDNN library Paddle's wheel ships (``csrc/onednn_bf16.c``); RuntimeError where it has none."""
    libs = Path(paddle.__file__).parent / "libs"
    if not (libs / "libdnnl.so.3").exists():
        raise RuntimeError(f"Paddle {paddle.__version__} ships no oneDNN library (libdnnl.so.3 in {libs})")
    return [f"-L{libs}", "-l:libdnnl.so.3", f"-Wl,-rpath,{libs}"]


def compile_library(source: Path = SOURCE, link: list[str] | None = None) -> Path:
    """The path in the cache of ``source`` compiled and linked with ``link`` (default: Paddle's OpenMP runtime),
    built there unless a trusted copy is there already."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (cc) on PATH")
    link = _openmp_link() if link is None else link
    key = hashlib.sha256(source.read_bytes() + " ".join([compiler, *FLAGS, *link, _cpu_id()]).encode())
    target = Path(default_cache_dir()) / "kernels" / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if not _trusted(target):
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        seconds = float(os.environ.get("ERNIE_FT_KERNELS_TIMEOUT", COMPILE_SECONDS))
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # then an atomic rename: several
            obj, lib = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.so")  # processes may build at once
            for command in (
                [compiler, *FLAGS, "-c", str(source), "-o", obj],
                [compiler, "-shared", obj, "-o", lib, *link],
            ):
                try:
                    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"{command[0]} did not finish in {seconds:g} s") from None
                if done.returncode != 0:
                    raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
            os.chmod(lib, 0o755)
            record = Path(tmp) / "k.so.sha256"
            record.write_text(_digest(Path(lib)) + "\n", encoding="ascii")
            os.replace(lib, target)  # a process that dies between the two leaves a mismatch: rebuilt
            os.replace(record, target.with_name(target.name + ".sha256"))
    return target
