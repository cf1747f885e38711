"""Starting several processes: which flags launch, what the children get, and GPU requests refused up front."""

import json
import os
import subprocess
import sys

import paddle
import pytest
from conftest import ROOT

from ernie_ft.config import ParallelConfig
from ernie_ft.errors import UserError
from ernie_ft.training import launch, runtime
from ernie_ft.training.gpus import check_gpus, launcher_devices


@pytest.fixture
def gpus(monkeypatch):
    """Make Paddle report ``n`` GPUs (None: a CPU build) to this process."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def see(n):
        monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: n is not None)
        monkeypatch.setattr(paddle.device.cuda, "device_count", lambda: n or 0)

    return see


def refusal(request: str) -> str:
    with pytest.raises(UserError) as caught:
        check_gpus(request)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"--gpus {request}")
    return message


def test_a_cpu_build_is_refused_with_what_to_install(gpus):
    gpus(None)
    message = refusal("0,1,2,3")
    assert "this Paddle build has no CUDA support (paddlepaddle CPU build)" in message
    assert "install paddlepaddle-gpu" in message and "--nproc N" in message


def test_a_cuda_build_without_devices_says_so(gpus, monkeypatch):
    gpus(0)
    assert "Paddle sees no GPU;" in refusal("0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "Paddle sees no GPU with CUDA_VISIBLE_DEVICES=''" in refusal("0")


def test_more_gpus_than_paddle_sees_are_refused(gpus):
    gpus(2)
    message = refusal("0,1,2,3")
    assert "asks for 4 GPUs but Paddle sees 2 GPUs (ids 0-1)" in message
    assert "CUDA_VISIBLE_DEVICES" in message and "--nproc N" in message


def test_an_id_that_does_not_exist_is_refused(gpus):
    gpus(2)
    assert "there is no GPU 7: Paddle sees 2 GPUs (ids 0-1)" in refusal("0,7")
    gpus(1)
    assert "there is no GPU 1: Paddle sees 1 GPU (id 0)" in refusal("1")


def test_ids_number_the_visible_gpus(gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    gpus(2)
    assert check_gpus("0,1") == [0, 1]
    message = refusal("3,5")
    assert "there is no GPU 3: Paddle sees 2 GPUs (ids 0-1) with CUDA_VISIBLE_DEVICES='3,5'" in message
    # paddle.distributed.launch names GPUs as CUDA_VISIBLE_DEVICES lists them
    assert launcher_devices([1, 0]) == "5,3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert launcher_devices([1, 0]) == "1,0"


def test_a_gpu_listed_twice_is_refused(gpus):
    gpus(4)
    assert "GPU 1 is listed twice" in refusal("1,1")


def test_a_valid_request_passes(gpus):
    gpus(4)
    assert check_gpus("0,1,2,3") == [0, 1, 2, 3]
    assert check_gpus("2") == [2]


def test_launch_checks_before_starting_anything(gpus, monkeypatch, tmp_path):
    gpus(2)
    monkeypatch.setattr(launch, "run_launcher", lambda *a, **k: pytest.fail("the launcher was started"))
    with pytest.raises(UserError, match="asks for 4 GPUs"):
        launch.launch(["classify", "--gpus", "0,1,2,3"], ParallelConfig(gpus="0,1,2,3"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_launch_passes_the_visible_gpus_and_the_command_without_launch_flags(gpus, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gpus(4)
    started = {}
    monkeypatch.setattr(
        launch, "run_launcher", lambda command, env, meet=None: started.update(command=command, env=env) or (0, None)
    )
    argv = ["classify", "--train", "t.tsv", "--gpus", "2,3", "--epochs", "1"]
    assert launch.launch(argv, ParallelConfig(gpus="2,3"), str(tmp_path)) == 0
    command = started["command"]
    assert command[command.index("--devices") + 1] == "6,7"
    assert json.loads(started["env"]["ERNIE_FT_WORKER_ARGV"]) == [
        "ernie_ft",
        "classify",
        "--train",
        "t.tsv",
        "--epochs",
        "1",
    ]


def test_the_single_gpu_path_refuses_a_cpu_build_in_one_line(gpus):
    gpus(None)
    with pytest.raises(UserError) as caught:
        runtime.select_device(runtime.device_for("auto", "0", processes=1))
    message = str(caught.value)
    assert "\n" not in message and "gpu:0 (--device or --gpus)" in message
    assert "no CUDA support" in message and "--device cpu, without --gpus" in message


def test_needs_launch(monkeypatch):
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    assert not launch.needs_launch(ParallelConfig())
    assert not launch.needs_launch(ParallelConfig(gpus="0"))  # one GPU: runs in this process
    assert launch.needs_launch(ParallelConfig(gpus="0,1"))
    assert launch.needs_launch(ParallelConfig(nproc=2))
    assert launch.needs_launch(ParallelConfig(ips="10.0.0.1,10.0.0.2"))
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")  # already a launched child
    assert not launch.needs_launch(ParallelConfig(nproc=2))


def test_child_argv_drops_the_launch_flags_in_both_spellings():
    argv = ["classify", "--train", "t.tsv", "--gpus", "0,1", "--nproc=2", "--ips", "a,b", "--epochs", "1", "--gpus=2,3"]
    assert launch.child_argv(argv) == ["classify", "--train", "t.tsv", "--epochs", "1"]


def paddle_sees_a_gpu() -> bool:
    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


@pytest.mark.skipif(paddle_sees_a_gpu(), reason="the command would train: this checks a machine without GPUs")
@pytest.mark.parametrize("request_", ["0,1,2,3", "0"])
def test_the_command_line_refuses_gpus_on_this_machine_in_one_line(request_, tmp_path):
    """Refused up front: before any data is read (the --train file does not exist, yet the error is about the GPUs),
    any model is built or any process is launched."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ernie_ft.classify",
            "--train",
            str(tmp_path / "never-read.tsv"),
            "--model",
            "scratch:tiny",
            "--output",
            str(out),
            "--gpus",
            request_,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "no CUDA support" in lines[0] or "Paddle sees no GPU" in lines[0]
    for launcher_noise in ("LAUNCH INFO", "Traceback", "launching"):
        assert launcher_noise not in proc.stderr + proc.stdout
    assert proc.stdout == ""
    assert not out.exists()


def test_the_launchers_ports_lie_below_the_ephemeral_range(monkeypatch):
    """Paddle's launcher releases a port its workers bind seconds later: an outgoing connection's ephemeral port must
    never be able to take it (a worker aborted in libuv when one did)."""
    from ernie_ft.training.launch import launcher_env, port_range

    low, high = map(int, port_range().split(":"))
    if os.path.isfile("/proc/sys/net/ipv4/ip_local_port_range"):
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            assert high < int(f.read().split()[0])
    assert 1024 <= low < high
    monkeypatch.delenv("PORT_RANGE", raising=False)
    assert launcher_env([], "out", ParallelConfig(nproc=2))["PORT_RANGE"] == port_range()
    monkeypatch.setenv("PORT_RANGE", "40000:41000")  # the user's own choice stays
    assert launcher_env([], "out", ParallelConfig(nproc=2))["PORT_RANGE"] == "40000:41000"
