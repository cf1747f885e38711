"""MKL_DEBUG_CPU_TYPE is set on AMD CPUs only, by the processes ernie_ft owns, never over the user's value."""

import os
import subprocess
import sys

import pytest

from ernie_ft.training import mkl

INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: avx2 avx512f amx_int8\n"
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: avx2 avx512f\n"


@pytest.fixture
def cpuinfo(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        return str(path)

    return write


def test_amd_sets_the_switch(cpuinfo):
    environ = {}
    assert mkl.use_avx2_on_amd(environ, cpuinfo(AMD))
    assert environ == {"MKL_DEBUG_CPU_TYPE": "5"}


@pytest.mark.parametrize("text", [INTEL, "processor\t: 0\n", ""], ids=["intel", "no-vendor", "empty"])
def test_other_cpus_leave_it_unset(cpuinfo, text):
    environ = {}
    assert not mkl.use_avx2_on_amd(environ, cpuinfo(text))
    assert environ == {}


def test_an_unreadable_cpuinfo_leaves_it_unset(tmp_path):
    environ = {}
    assert mkl.cpu_vendor(str(tmp_path / "missing")) is None
    assert not mkl.use_avx2_on_amd(environ, str(tmp_path / "missing"))
    assert environ == {}


def test_the_users_value_is_kept(cpuinfo):
    environ = {"MKL_DEBUG_CPU_TYPE": "0"}
    assert not mkl.use_avx2_on_amd(environ, cpuinfo(AMD))
    assert environ == {"MKL_DEBUG_CPU_TYPE": "0"}


def run_python(code: str, *args: str, **extra: str) -> str:
    """What ``code`` prints in a fresh interpreter started without MKL_DEBUG_CPU_TYPE (unless ``extra`` sets it)."""
    environ = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    command = [sys.executable, "-c", code, *args]
    result = subprocess.run(command, env={**environ, **extra}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


OWNER = (  # the command line's entry (and each process ernie_ft starts) calls quiet_process before Paddle loads
    "import os, sys; from ernie_ft.training import mkl; mkl.CPUINFO = sys.argv[1]; "
    "from ernie_ft import cli; cli.quiet_imports(); print(os.environ.get('MKL_DEBUG_CPU_TYPE'))"
)


def test_import_ernie_ft_leaves_the_environment_as_it_was():
    code = "import os; before = dict(os.environ); import ernie_ft; ernie_ft.Task; print(dict(os.environ) == before)"
    assert run_python(code) == "True"


@pytest.mark.parametrize("text, expected", [(AMD, "5"), (INTEL, "None")], ids=["amd", "intel"])
def test_the_command_line_sets_it_on_amd_only(cpuinfo, text, expected):
    assert run_python(OWNER, cpuinfo(text)) == expected


def test_the_command_line_keeps_a_users_value(cpuinfo):
    assert run_python(OWNER, cpuinfo(AMD), MKL_DEBUG_CPU_TYPE="4") == "4"
