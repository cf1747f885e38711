"""Faults a run survives: a non-finite loss, a failed checkpoint write, a process killed while it swaps a
checkpoint in, and a second run pointed at the same output directory."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from conftest import DATA, saved_weights

from ernie_ft.classify.task import Classification
from ernie_ft.cli import task_command
from ernie_ft.cli.train import parse_train_args
from ernie_ft.task import create_task
from ernie_ft.training import checkpoint, lock
from ernie_ft.training.run import setup
from ernie_ft.training.trainer import NonFiniteLoss, fit

# 240 reviews, batch 32: 8 steps per epoch
COMMON = [
    "--train",
    str(DATA / "sentiment_train.tsv"),
    "--model",
    "scratch:tiny",
    "--max-len",
    "64",
    "--threads",
    "1",
    "--seed",
    "4",
    "--dropout",
    "0",
    "--lr",
    "1e-3",
]


def new_run(out, *extra):
    cfg = parse_train_args([*COMMON, "--output", str(out), *extra], "test", "test", Classification)
    return setup(create_task(Classification, cfg.task, "classify"), cfg)


def command(out, *extra) -> int:
    """``python -m ernie_ft.classify`` in this process: its exit status (its stderr is the test's)."""
    return task_command("classify")([*COMMON, "--output", str(out), *extra])


def cli(out, *extra):
    """``python -m ernie_ft.classify`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "ernie_ft.classify", *COMMON, "--output", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def release_locks():
    """What the death of the process that ran ``fit`` here would do to its lock."""
    for f in lock._held_locks.values():
        f.close()
    lock._held_locks.clear()


def last_weights(out):
    return {k: v.numpy() for k, v in paddle.load(str(out / "last" / "model.pdparams")).items()}


def step_of(out, which="last"):
    return json.loads((out / which / "trainer_state.json").read_text())["step"]


def test_a_nan_loss_stops_the_run_with_its_step_and_keeps_the_last_good_checkpoints(tmp_path):
    out = tmp_path / "run"
    run = new_run(out, "--epochs", "2", "--dev", str(DATA / "sentiment_dev.tsv"), "--eval-steps", "4")
    loss, calls = run.task.loss, []

    def poisoned(logits, batch):  # the 11th step's loss is NaN
        calls.append(1)
        value = loss(logits, batch)
        return value * float("nan") if len(calls) == 11 else value

    run.task.loss = poisoned
    try:
        with pytest.raises(NonFiniteLoss) as info:
            fit(run)
    finally:
        release_locks()
    message = str(info.value)
    assert message.startswith("step 11: the training loss is nan (not finite); stopped without saving this step")
    assert "last/ (step 8, resumable)" in message and "best/ (step" in message and "--lr" in message
    assert step_of(out) == 8  # the end of epoch 1, not overwritten
    best = saved_weights(out / "best")
    assert all(np.isfinite(v).all() for v in best.values())
    assert all(np.isfinite(v).all() for v in last_weights(out).values())
    assert not (out / "metrics.json").exists()


def test_a_diverging_run_ends_in_one_error_line_through_the_command_line(tmp_path, capsys):
    status = command(tmp_path / "run", "--epochs", "1", "--lr", "1e30", "--warmup", "0", "--max-grad-norm", "0")
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert status == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert lines[-1].startswith("error: step ") and "the training loss is" in lines[-1]
    assert "Nothing was saved yet" in lines[-1]


@pytest.mark.parametrize("failing", ["last", "best"])
def test_a_failed_checkpoint_write_keeps_the_previous_one_and_says_what_failed(tmp_path, monkeypatch, failing):
    out = tmp_path / "run"
    run = new_run(out, "--epochs", "2", "--dev", str(DATA / "sentiment_dev.tsv"), "--eval-steps", "8")
    writes = []
    if failing == "last":
        save = paddle.save

        def disk_full(obj, path, *args, **kwargs):  # the second save of last/ (end of epoch 2) fails
            if os.path.basename(path) == "optimizer.pdopt" and ".tmp" in path:
                writes.append(path)
                if len(writes) == 2:
                    raise OSError(errno.ENOSPC, "No space left on device", path)
            return save(obj, path, *args, **kwargs)

        monkeypatch.setattr(paddle, "save", disk_full)
    else:
        save = run.pipeline.save

        def disk_full(path):  # the second save of best/ fails
            writes.append(path)
            if len(writes) == 2:
                raise OSError(errno.ENOSPC, "No space left on device", path)
            return save(path)

        monkeypatch.setattr(run.pipeline, "save", disk_full)
    scores = []
    evaluate = run.task.evaluate

    def improving(*args):  # every evaluation is the best so far, so best/ is saved at steps 8 and 16
        metrics = evaluate(*args)
        scores.append(1)
        return {**metrics, "accuracy": float(len(scores))}

    monkeypatch.setattr(run.task, "evaluate", improving)
    try:
        with pytest.raises(checkpoint.SaveError) as info:
            fit(run)
    finally:
        release_locks()
    assert f"could not write the checkpoint {out / failing}: No space left on device" in str(info.value)
    assert "the previous one is intact" in str(info.value) and "--resume" in str(info.value)
    assert not (out / f"{failing}.tmp").exists()
    assert step_of(out) == 8  # last/ from the end of epoch 1
    assert checkpoint.load_model(str(out / "best")).labels == ["正面", "负面"]  # the previous best/ loads


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "full"
    assert command(out, "--epochs", "3") == 0
    return last_weights(out)


@pytest.mark.parametrize("crash", ["writing", "between-renames", "before-cleanup"])
def test_a_process_killed_while_it_saves_last_leaves_a_state_that_resumes(uninterrupted, tmp_path, crash, capsys):
    out = tmp_path / "run"
    helper = Path(__file__).with_name("helpers") / "crash_run.py"
    proc = subprocess.run(
        [sys.executable, str(helper), crash, "classify", *COMMON, "--output", str(out), "--epochs", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 137, proc.stderr[-2000:]  # died in the second save of last/
    left = {p.name for p in out.iterdir()}
    assert {
        "writing": {"last", "last.tmp"},
        "between-renames": {"last.old", "last.tmp"},
        "before-cleanup": {"last", "last.old"},
    }[crash] <= left, left
    assert command(out, "--epochs", "3", "--resume") == 0  # in this process: a process boundary is not the point
    assert f"resumed at step {16 if crash == 'before-cleanup' else 8}" in capsys.readouterr().err
    assert not (out / "last.old").exists() and not (out / "last.tmp").exists()
    resumed = last_weights(out)
    for name, value in uninterrupted.items():  # one process at a time, the same operations: equal to rounding
        np.testing.assert_allclose(resumed[name], value, rtol=0, atol=1e-6, err_msg=name)


def test_a_second_run_on_the_same_output_is_refused_and_touches_nothing(tmp_path):
    out = tmp_path / "run"
    lock.lock_output(str(out))  # this test process plays the run that is in progress
    try:
        (out / "best").mkdir()
        (out / "best" / "marker").write_text("the first run's file")
        for extra in (["--overwrite"], ["--nproc", "2", "--overwrite"]):
            proc = cli(out, "--epochs", "1", *extra)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
            assert (
                lines[-1] == f"error: --output {out} is in use by another ernie_ft run (pid {os.getpid()}); "
                "wait for it to finish or choose another directory"
            )
            assert (out / "best" / "marker").read_text() == "the first run's file"
    finally:
        release_locks()
    assert command(out, "--epochs", "1", "--overwrite") == 0  # once the first run is gone
    assert not (out / "best" / "marker").exists() and (out / "best" / "model.safetensors").exists()


def test_fp16_steps_the_loss_scaler_skips_are_counted_not_fatal(tmp_path, monkeypatch):
    # Paddle enables the GradScaler on GPU only; here its verdict is played for steps 3 and 5,
    # whose loss is made infinite as an fp16 overflow would make it.
    out = tmp_path / "run"
    run = new_run(out, "--epochs", "1")
    step, loss, calls = run.precision.step, run.task.loss, []

    def overflowing(logits, batch):
        calls.append(1)
        value = loss(logits, batch)
        return value * float("inf") if len(calls) in (3, 5) else value

    monkeypatch.setattr(run.task, "loss", overflowing)
    # the scaler's verdict: skip the update of an overflowed step (its gradients are cleared), else step
    monkeypatch.setattr(run.precision, "step", lambda optimizer: len(calls) in (3, 5) or step(optimizer))
    try:
        fit(run)
    finally:
        release_locks()
    assert json.loads((out / "last" / "trainer_state.json").read_text())["skipped_steps"] == 2
    assert (out / "best" / "model.safetensors").exists()
