"""A process ernie_ft owns flushes denormal floats to zero (``training.denormals``); a library import does not."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc", reason="MXCSR through glibc's fenv"
)

PROBE = """
import sys, threading
if sys.argv[1] == "owner":
    from ernie_ft.training.quiet import quiet_process
    quiet_process()
else:
    import ernie_ft.training.denormals, ernie_ft.training.quiet  # imported, not called: a library user's process
tiny = 1e-310  # a denormal double (as 1e-39 is a denormal float)
seen = []
thread = threading.Thread(target=lambda: seen.append(tiny * 1.0))  # a thread started afterwards, as Paddle's are
thread.start()
thread.join()
print(tiny * 1.0, seen[0])
"""


def products(who: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", PROBE, who], capture_output=True, text=True, check=True).stdout
    return [float(x) for x in out.split()[-2:]]


def test_an_owned_process_and_its_later_threads_flush_denormals_and_a_library_import_leaves_them():
    assert products("owner") == [0.0, 0.0]
    assert products("library") == [1e-310, 1e-310]
