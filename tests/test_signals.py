"""Ctrl-C and SIGTERM (a scheduler's preemption, a container stop) during training: the run finishes
its step, saves the resumable state a ``--stop-after-steps`` run at that step saves, and exits 128 + the
signal; on several processes every rank stops after the same step."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest
from conftest import DATA
from helpers.rounding import ADAM_EPSILON, adam_drift

from ernie_ft.cli import run_guarded, task_command

main = task_command("classify")

TRAIN = str(DATA / "sentiment_train.tsv")


def start(args, out):
    """The command in its own process, its output in OUT.txt; returns it once it has trained a step."""
    log = open(f"{out}.txt", "w", encoding="utf-8")
    job = subprocess.Popen([sys.executable, "-m", "ernie_ft.classify", *args], stdout=log, stderr=subprocess.STDOUT)
    steps, deadline = out / "train_log.jsonl", time.monotonic() + 180
    while not (steps.is_file() and steps.read_text(encoding="utf-8").strip()):
        assert job.poll() is None, open(f"{out}.txt", encoding="utf-8").read()[-3000:]
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.1)
    return job


def stop(job, signum, out) -> str:
    os.kill(job.pid, signum)
    try:
        job.wait(timeout=120)  # a rank that never stops fails here
    finally:
        if job.poll() is None:
            job.kill()
    output = open(f"{out}.txt", encoding="utf-8").read()
    assert job.returncode == 128 + signum, output[-3000:]
    return output


def state(out) -> dict:
    last = out / "last"
    return {
        "model": {k: v.numpy() for k, v in paddle.load(str(last / "model.pdparams")).items()},
        "trainer": json.loads((last / "trainer_state.json").read_text(encoding="utf-8")),
    }


def single(model, out, *extra):
    # 100 epochs (1,500 steps): far more than the few the run makes before the signal arrives
    return [
        "--train",
        TRAIN,
        "--model",
        model,
        "--output",
        str(out),
        "--epochs",
        "100",
        "--batch-size",
        "16",
        "--lr",
        "2e-3",
        "--max-len",
        "48",
        "--threads",
        "1",
        "--log-steps",
        "1",
        "--seed",
        "3",
        *extra,
    ]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_saves_the_state_a_stop_at_that_step_saves(tiny_checkpoint, tmp_path, signum):
    out = tmp_path / "signalled"
    output = stop(start(single(tiny_checkpoint, out), out), signum, out)
    assert f"{signal.Signals(signum).name}: stopping after this step" in output
    assert "run the same command with --resume" in output and "Traceback" not in output
    signalled = state(out)
    step = signalled["trainer"]["step"]
    assert 1 <= step < 1500 and not (out / "best").exists()

    reference = tmp_path / "reference"
    assert main(single(tiny_checkpoint, reference, "--stop-after-steps", str(step))) == 0
    expected = state(reference)
    assert signalled["trainer"] == expected["trainer"]
    for name, value in expected["model"].items():
        np.testing.assert_array_equal(signalled["model"][name], value, err_msg=name)
    # nothing is left locked or half-written: the run resumes
    assert main(single(tiny_checkpoint, out, "--resume", "--stop-after-steps", str(step + 1))) == 0
    assert state(out)["trainer"]["step"] == step + 1


def test_sigterm_to_a_two_process_job_stops_every_rank_after_the_same_step(tmp_path):
    common = [
        "--train",
        TRAIN,
        "--model",
        "scratch:tiny",
        "--epochs",
        "200",
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
        "--log-steps",
        "1",
        "--adam-epsilon",
        str(ADAM_EPSILON),
    ]
    out = tmp_path / "signalled"
    job = start([*common, "--output", str(out), "--batch-size", "4", "--lr", "1e-3", "--nproc", "2"], out)
    output = stop(job, signal.SIGTERM, out)
    step = state(out)["trainer"]["step"]
    assert f"stopped at step {step}; a resumable checkpoint is in {out / 'last'}" in output
    assert "the distributed job failed" not in output
    for rank in (0, 1):  # the rank that got the signal a step later still stopped where its peer did
        log = (out / "logs" / f"workerlog.{rank}").read_text(encoding="utf-8")
        assert f"stopped at step {step}/" in log and "stopped by SIGTERM" in log and "Traceback" not in log

    reference = tmp_path / "reference"  # one process (this one), the same global batch 8 at the scaled lr
    args = [*common, "--output", str(reference), "--batch-size", "8", "--lr", "2e-3", "--stop-after-steps", str(step)]
    assert main(args) == 0
    expected, signalled = state(reference), state(out)
    assert signalled["trainer"] == expected["trainer"]
    for name, value in expected["model"].items():
        np.testing.assert_allclose(signalled["model"][name], value, rtol=0, atol=adam_drift(step, 2e-3), err_msg=name)


def peer_stops_at(step: int):
    """``trainer.train_step`` with the stop flag a peer's signal brings through the loss's all-reduce at ``step``."""
    from ernie_ft.training.trainer import train_step

    def stepped(run, group, stop=None):
        *result, _ = train_step(run, group, stop)
        return (*result, run.progress.step + 1 == step)

    return stepped


def test_a_sigterm_after_a_peers_stop_is_not_raised_on_the_way_out(tiny_checkpoint, tmp_path, monkeypatch):
    """A rank stopped by its peer's signal gets its own SIGTERM later (Paddle's launcher signals the workers in
    turn, up to three times each). Once the run stops, no handler may raise it wherever the interpreter then is:
    CI once saw it raised inside a tqdm ``__del__``, printed with a traceback, and it could as well skip a cleanup."""
    from ernie_ft.training import trainer

    def release_after_a_late_sigterm(output):
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs its handler before the next line
        released.append(output)
        release_output(output)

    release_output, released = trainer.release_output, []
    monkeypatch.setattr(trainer, "train_step", peer_stops_at(2))
    monkeypatch.setattr(trainer, "release_output", release_after_a_late_sigterm)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    out = tmp_path / "peer"
    assert main(single(tiny_checkpoint, out)) == 128 + signal.SIGTERM
    assert released == [str(out)] and state(out)["trainer"]["step"] == 2
    assert {s: signal.getsignal(s) for s in before} == before
    monkeypatch.undo()
    assert main(single(tiny_checkpoint, out, "--resume", "--stop-after-steps", "3")) == 0  # nothing left locked


def test_fit_from_python_gives_the_signals_back_after_a_peers_stop(tiny_checkpoint, tmp_path, monkeypatch):
    """Only a command keeps the stop's handlers on its way out; ``fit`` called from Python restores the caller's."""
    from ernie_ft.classify.task import Classification
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.errors import Interrupted
    from ernie_ft.task import create_task
    from ernie_ft.training import trainer

    monkeypatch.setattr(trainer, "train_step", peer_stops_at(1))
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    cfg = parse_train_args(single(tiny_checkpoint, tmp_path / "api"), "test", "test", Classification)
    try:
        with pytest.raises(Interrupted):
            trainer.fit(trainer.setup(create_task(Classification, cfg.task, "classify"), cfg))
    finally:
        trainer.release_output(str(tmp_path / "api"))
    assert {s: signal.getsignal(s) for s in before} == before


def test_sigterm_outside_training_ends_the_command_through_its_cleanups():
    cleaned = []

    def action():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # not reached: the signal interrupts here
        finally:
            cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    assert run_guarded(action) == 128 + signal.SIGTERM and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before
