"""The heap of a process ernie_ft owns keeps freed tensors (``training.heap``), and a library import leaves it alone."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

FAULTS = """
import ctypes, resource, sys
if sys.argv[1] == "owner":
    from ernie_ft.training.quiet import quiet_process
    quiet_process()
else:
    import ernie_ft.training.heap, ernie_ft.training.quiet  # imported, not called: a library user's process
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20  # a medium model's FFN activations are 44 MB, its embedding gradient 123 MB
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def second_allocation_faults(who: str) -> int:
    """Minor page faults of writing a 64 MB block allocated again after freeing one, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", FAULTS, who], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1])


def test_an_owned_process_reuses_a_freed_block_and_a_library_import_leaves_glibc_as_it_was():
    pages = (64 << 20) // 4096
    assert second_allocation_faults("owner") < pages // 10  # the block came back from the heap, already mapped
    assert second_allocation_faults("library") > pages // 2  # glibc's default: a fresh mmap, every page faulted in
