"""Data and tensor parallelism on CPU processes (gloo) against single-process reference runs."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest
from conftest import DATA, ROOT, saved_weights
from helpers.rounding import ADAM_EPSILON, adam_drift, assert_same_gradients

from ernie_ft.cli import task_command
from ernie_ft.config import ParallelConfig

main = task_command("classify")

TRAIN, DEV = str(DATA / "sentiment_train.tsv"), str(DATA / "sentiment_dev.tsv")
DP_STEP = ("classify", TRAIN, 8, 48, 7)  # dp_step.py's task, file, global batch (4 per replica), max length, seed
COMMON = [
    "--train",
    TRAIN,
    "--dev",
    DEV,
    "--model",
    "scratch:tiny",
    "--epochs",
    "1",
    "--max-len",
    "48",
    "--dropout",
    "0",
    "--threads",
    "1",
    "--seed",
    "7",
    "--warmup",
    "0",
    "--eval-steps",
    "3",
    "--adam-epsilon",
    str(ADAM_EPSILON),
]


def train(out, *extra):
    """A single-process run, in this process (a fresh interpreter would only add Paddle's start-up)."""
    assert main([*COMMON, "--output", str(out), *extra]) == 0


def run(out, *extra, check=True):
    """A run through ``python -m ernie_ft.classify`` in its own process (which launches ``--nproc`` workers)."""
    args = [sys.executable, "-m", "ernie_ft.classify", *COMMON, "--output", str(out), *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if check:
        logs = (
            "".join(p.read_text()[-2000:] for p in sorted((out / "logs").glob("workerlog.*")))
            if (out / "logs").is_dir()
            else ""
        )
        assert proc.returncode == 0, proc.stderr[-3000:] + logs
    return proc


def weights(out, which="last/model.pdparams"):
    if which == "best":
        return saved_weights(out / "best")
    return {k: v.numpy() for k, v in paddle.load(str(out / which)).items()}


def assert_same_weights(a, b, atol):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process, global batch 8 at lr 2e-3: 6 steps, evaluated every 3, the loss logged every step."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(out, "--batch-size", "8", "--lr", "2e-3", "--stop-after-steps", "6", "--log-steps", "1")
    return out


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory):
    """The reference run on 2 processes of batch 4 at --lr 1e-3 (scaled linearly to 2e-3)."""
    out = tmp_path_factory.mktemp("data-parallel") / "run"
    run(out, "--batch-size", "4", "--lr", "1e-3", "--nproc", "2", "--stop-after-steps", "6", "--log-steps", "1")
    return out


@pytest.fixture(scope="module")
def halfway(tmp_path_factory):
    """The reference run stopped after 3 steps, to resume with other numbers of processes."""
    out = tmp_path_factory.mktemp("halfway") / "run"
    train(out, "--batch-size", "8", "--lr", "2e-3", "--stop-after-steps", "3")
    return out


@pytest.fixture(scope="module")
def launched_steps(tmp_path_factory):
    """{"tp": tp_step.py's step on 2 tensor-parallel processes, "dp": dp_step.py's ``DP_STEP`` on 2 data-parallel
    replicas}, their .npz files, from one launched job (helpers/parallel_steps.py)."""
    out = tmp_path_factory.mktemp("steps")
    script = str(ROOT / "tests" / "helpers" / "parallel_steps.py")
    launch = ["-m", "paddle.distributed.launch", "--log_dir", str(out / "logs"), "--nproc_per_node", "2", script]
    proc = subprocess.run([sys.executable, *launch, str(out), *map(str, DP_STEP)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:] + "".join(
        p.read_text()[-2000:] for p in sorted((out / "logs").glob("workerlog.*"))
    )
    return {kind: np.load(out / f"{kind}.npz") for kind in ("tp", "dp")}


def test_data_parallel_step_equals_one_process_on_the_same_global_batch(launched_steps, tmp_path):
    from helpers import dp_step

    np.savez(tmp_path / "one.npz", **dp_step.step(*DP_STEP)[0])  # one process: this one
    assert_same_gradients(np.load(tmp_path / "one.npz"), launched_steps["dp"])


def test_two_processes_equal_one_process_with_the_same_global_batch(reference, data_parallel, tmp_path):
    drift = adam_drift(6, 2e-3)
    assert_same_weights(weights(reference), weights(data_parallel), atol=drift)
    train(tmp_path / "unscaled", "--batch-size", "8", "--lr", "1e-3", "--stop-after-steps", "6")
    unscaled = weights(tmp_path / "unscaled")  # the comparison can fail: lr 1e-3 unscaled differs
    assert sum(not np.allclose(unscaled[n], v, rtol=0, atol=drift) for n, v in weights(reference).items()) > 30
    logs = data_parallel / "logs"
    assert (logs / "workerlog.0").is_file() and (logs / "workerlog.1").is_file()
    assert "lr 0.002 (--lr 0.001 scaled linear)" in (logs / "workerlog.0").read_text()
    assert "lr 0.002" not in (logs / "workerlog.1").read_text()  # only rank 0 reports and writes
    dev = [json.loads(line) for line in (data_parallel / "evaluations.jsonl").read_text().splitlines()]
    ref = [json.loads(line) for line in (reference / "evaluations.jsonl").read_text().splitlines()]
    assert [d["accuracy"] for d in dev] == [r["accuracy"] for r in ref]  # every dev example scored once


def test_logged_loss_is_the_mean_over_replicas(reference, data_parallel):
    losses = [
        [json.loads(line)["loss"] for line in (d / "train_log.jsonl").read_text().splitlines()]
        for d in (reference, data_parallel)
    ]
    assert len(losses[0]) == 6
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)


def test_tensor_parallel_step_equals_the_unsharded_model(launched_steps, tmp_path):
    from helpers import tp_step

    np.savez(tmp_path / "one.npz", **tp_step.step(1)[0])  # the unsharded model, in this process
    one, tp = np.load(tmp_path / "one.npz"), launched_steps["tp"]
    # q/k/v/linear1 weights and biases, out_proj/linear2 weights: 10 per layer, 2 layers
    assert len(tp["sharded"]) == 20
    for key in one.files:
        if key != "sharded":
            np.testing.assert_allclose(tp[key], one[key], rtol=0, atol=1e-6, err_msg=key)


def test_tensor_parallel_training_saves_a_checkpoint_that_predicts_single_process(reference, tmp_path):
    out = tmp_path / "tp"
    run(out, "--batch-size", "8", "--lr", "2e-3", "--nproc", "2", "--tensor-parallel", "2", "--stop-after-steps", "6")
    assert "mesh 1 data-parallel x 2 tensor-parallel" in (out / "logs" / "workerlog.0").read_text()
    assert_same_weights(weights(reference), weights(out), atol=adam_drift(6, 2e-3))
    assert_same_weights(weights(reference, "best"), weights(out, "best"), atol=adam_drift(6, 2e-3))
    predictions = []
    for model in (reference, out):  # both best checkpoints, loaded in one plain process: this one
        pred = tmp_path / f"{model.parent.name}.jsonl"
        assert main(["predict", "--model", str(model), "--input", DEV, "--output", str(pred), "--device", "cpu"]) == 0
        predictions.append([json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines()])
    assert [r["label"] for r in predictions[0]] == [r["label"] for r in predictions[1]]
    for a, b in zip(*predictions):
        assert b["probs"] == pytest.approx(a["probs"], abs=1e-4)


def test_resume_with_two_data_parallel_processes(reference, halfway, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(halfway, out)
    run(out, "--batch-size", "4", "--lr", "1e-3", "--nproc", "2", "--stop-after-steps", "6", "--resume")
    assert "resumed at step 3" in (out / "logs" / "workerlog.0").read_text()
    assert_same_weights(weights(reference), weights(out), atol=adam_drift(3, 2e-3))  # steps 1-3 were one process's


def test_a_two_by_two_mesh_resumes_and_saves(reference, halfway, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(halfway, out)
    run(
        out,
        "--batch-size",
        "4",
        "--lr",
        "1e-3",
        "--nproc",
        "4",
        "--tensor-parallel",
        "2",
        "--stop-after-steps",
        "6",
        "--resume",
    )
    log = (out / "logs" / "workerlog.0").read_text()
    assert "mesh 2 data-parallel x 2 tensor-parallel" in log and "resumed at step 3" in log
    assert_same_weights(weights(reference), weights(out), atol=adam_drift(3, 2e-3))  # steps 1-3 were one process's


def test_resume_refuses_a_different_global_batch(halfway, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(halfway, out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # several processes: refused before any starts (no rank's log), the saved state untouched
    proc = run(out, "--batch-size", "8", "--nproc", "2", "--stop-after-steps", "6", "--resume", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --resume: the run used a global batch of 8, this one has 16 (--batch-size 8 x 2 replicas); "
        "pass --batch-size 4"
    )
    assert not list(out.rglob("workerlog.*"))
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # one process (as each rank checks too, where its node has no copy of the state)
    assert main([*COMMON, "--output", str(out), "--batch-size", "16", "--stop-after-steps", "6", "--resume"]) == 2
    assert "global batch of 8, this one has 16 (--batch-size 16 x 1 replicas); pass --batch-size 8" in (
        capsys.readouterr().err
    )


def _rank_pid(rank: int, output) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"PADDLE_TRAINER_ID={rank}".encode() in env and any(
            e.startswith(b"ERNIE_FT_WORKER_ARGV=") and str(output).encode() in e for e in env
        ):
            return int(pid)
    return None


def test_a_killed_rank_stops_the_whole_job_quickly(tmp_path):
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "ernie_ft.classify",
        *COMMON,
        "--epochs",
        "500",
        "--eval-steps",
        "0",
        "--log-steps",
        "1",
        "--output",
        str(out),
        "--nproc",
        "2",
    ]
    job = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, deadline = out / "logs" / "workerlog.0", time.monotonic() + 120
        while not (log.is_file() and "step 5/" in log.read_text()):  # wait until both ranks are training
            assert job.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        pid = _rank_pid(1, out)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = job.communicate(timeout=60)  # a hang fails here
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert time.monotonic() - killed < 30
    # the launcher shows the log of a failed rank (the killed one, or its peer that lost the connection)
    assert "Container rank" in output and "the distributed job failed" in output, output[-3000:]


@pytest.mark.parametrize(
    "rule,replicas,accum,with_accum,factor",
    [
        ("linear", 4, 1, False, 4.0),
        ("linear", 4, 2, True, 8.0),
        ("linear", 4, 2, False, 4.0),
        ("sqrt", 4, 1, False, 2.0),
        ("sqrt", 2, 2, True, 2.0),
        ("none", 8, 4, True, 1.0),
    ],
)
def test_learning_rate_scaling_rules(rule, replicas, accum, with_accum, factor):
    config = ParallelConfig(lr_scaling=rule, scale_lr_with_accum=with_accum)
    assert config.lr_factor(replicas, accum) == pytest.approx(factor)


def test_tensor_parallel_without_enough_processes_is_a_clear_error(tmp_path, capsys):
    status = main([*COMMON, "--output", str(tmp_path / "run"), "--tensor-parallel", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "--tensor-parallel 2 must divide the number of processes (1)" in err
    assert "Traceback" not in err
