"""Threads, mixed precision and recompute (against a plain fp32 reference run)."""

import os
import subprocess
import sys

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from conftest import DATA, saved_weights
from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

from ernie_ft.cli import task_command
from ernie_ft.training.runtime import Precision, enable_recompute

main = task_command("classify")

CONFIG = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=4,
    use_task_id=False,
    num_labels=3,
)  # dropout 0.1 on


def train_steps(amp="off", level="O1", recompute=False, steps=3):
    paddle.seed(1)
    model = ErnieForSequenceClassification(ErnieConfig(**CONFIG))
    if recompute:
        assert enable_recompute(model) == 2
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-2, parameters=model.parameters())
    precision = Precision(amp, level)
    model, optimizer = precision.prepare(model, optimizer)
    x, y = paddle.to_tensor([[1, 5, 6, 2, 0], [1, 7, 8, 9, 2]]), paddle.to_tensor([0, 2])
    model.train()
    losses = []
    for _ in range(steps):
        with precision.autocast():
            loss = F.cross_entropy(model(x).astype("float32"), y)
        precision.backward(loss)
        precision.step(optimizer)
        optimizer.clear_grad()
        losses.append(float(loss))
    return losses, {k: v.astype("float32").numpy() for k, v in model.state_dict().items()}


def assert_same_training(run, reference, atol):
    np.testing.assert_allclose(run[0], reference[0], atol=atol)
    assert run[1].keys() == reference[1].keys()
    for name in reference[1]:
        np.testing.assert_allclose(run[1][name], reference[1][name], atol=atol, err_msg=name)


def test_recompute_gives_the_same_losses_and_weights_with_dropout_on():
    assert_same_training(train_steps(recompute=True), train_steps(), atol=1e-6)


@pytest.mark.parametrize("amp,level", [("fp16", "O1"), ("fp16", "O2"), ("bf16", "O1"), ("bf16", "O2")])
def test_mixed_precision_matches_fp32(amp, level):
    # On CPU Paddle computes these in fp32, so the match is tight; on GPU the tolerance is bf16's.
    atol = 1e-5 if paddle.get_device() == "cpu" else 5e-2
    assert_same_training(train_steps(amp, level), train_steps(), atol=atol)


def test_only_fp16_asks_for_a_loss_scaler():
    assert Precision("fp16").wants_scaler and not Precision("bf16").wants_scaler
    assert not Precision("off").wants_scaler


@pytest.mark.skipif(not paddle.is_compiled_with_cuda(), reason="Paddle enables the loss scaler on GPU only")
def test_fp16_scaler_scales_on_gpu():
    precision = Precision("fp16")
    assert float(precision.scaler.scale(paddle.to_tensor(0.5))) == 0.5 * 2**15


def test_amp_and_recompute_through_the_command_line_match_the_reference(tiny_checkpoint, tmp_path):
    def run(name, *extra):
        args = [
            "--train",
            str(DATA / "sentiment_train.tsv"),
            "--model",
            tiny_checkpoint,
            "--output",
            str(tmp_path / name),
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--max-len",
            "48",
            "--threads",
            "1",
            "--seed",
            "5",
            *extra,
        ]
        assert main(args) == 0
        return saved_weights(tmp_path / name / "best")

    reference = run("ref")
    for name, extra in (("fp16", ("--amp", "fp16", "--recompute")), ("bf16", ("--amp", "bf16", "--amp-level", "O2"))):
        weights = run(name, *extra)
        for key in reference:
            np.testing.assert_allclose(
                weights[key].astype("float32"), reference[key].astype("float32"), atol=1e-5, err_msg=key
            )


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API on this platform")
def test_default_threads_follow_the_cores_the_process_may_use():
    # taskset, a container's cpuset or Slurm can give a process fewer cores than the machine has
    code = (
        "import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from ernie_ft.training import runtime; print(runtime.set_threads(0), runtime.set_threads(0, processes=2), "
        "runtime.set_threads(3))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "3"]
