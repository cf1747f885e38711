"""Threads, mixed precision and recompute (against a plain fp32 reference run)."""

import os
import subprocess
import sys

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
import yaml
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


def train_steps(amp="off", level="O1", recompute=False, steps=3, epsilon=1e-8):
    paddle.seed(1)
    model = ErnieForSequenceClassification(ErnieConfig(**CONFIG))
    if recompute:
        assert enable_recompute(model) == 2
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-2, epsilon=epsilon, parameters=model.parameters())
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


# How far mixed precision may move weight updates, relative to their size. A 16-bit float keeps p significant bits
# (bf16 8, fp16 11): each rounding errs by at most u = 2^-p relative. Under autocast a weight's gradient is a
# product of tensors each rounded along its path (inputs of every matmul forward and backward, the weights themselves
# at O2): about 16 roundings through these 2 layers, so gradients err by at most ~16 u relative (fp32 accumulation
# adds nothing comparable). With AdamW's epsilon 1 (above every gradient here, max 0.34) an update is about
# lr * m / (s + 1): smooth in the gradients, at most doubling their relative error, so 3 steps' updates differ by at
# most 32 u of their size: 0.125 for bf16, 0.016 for fp16. With Paddle's default epsilon 1e-8 an update is lr times
# the sign of a near-zero gradient, and rounding flips signs: no bound from precision holds (an emulation on CPU, the
# weights and gradients rounded to bf16 each step, differs by 3.5 % at 1e-8 and 0.18 % at 1; fp16 5.8 % and 0.02 %).
# The negative control: one step fewer changes the updates by 33 %. The former atol 5e-2 was 6.6 times the largest
# move of any weight in these 3 steps (7.5e-3): it could not fail.
SIGNIFICANT_BITS = {"bf16": 8, "fp16": 11}


def update_bound(amp: str) -> float:
    return 32 * 2.0 ** -SIGNIFICANT_BITS[amp]


def update_difference(run: dict, reference: dict, start: dict) -> float:
    """||run - reference|| / ||reference - start|| over all weights: how far ``run``'s updates are from the
    reference's, relative to how far the reference moved."""
    apart = sum(float(((run[k] - reference[k]) ** 2).sum()) for k in reference)
    moved = sum(float(((reference[k] - start[k]) ** 2).sum()) for k in reference)
    return (apart / moved) ** 0.5


def initial_weights() -> dict:
    paddle.seed(1)
    return {k: v.numpy() for k, v in ErnieForSequenceClassification(ErnieConfig(**CONFIG)).state_dict().items()}


@pytest.mark.parametrize("amp,level", [("fp16", "O1"), ("fp16", "O2"), ("bf16", "O1"), ("bf16", "O2")])
def test_mixed_precision_updates_stay_within_the_precision_of_their_dtype(amp, level):
    """On a GPU: 3 AdamW steps under autocast move the weights as fp32 does, up to ``update_bound``. On a CPU Paddle
    leaves autocast and ``decorate`` without effect (it warns so), the runs are equal and this checks only that the
    mixed-precision path trains as fp32 does; what reaches Paddle is test_the_runs_precision_reaches_paddle's."""
    start, reference = initial_weights(), train_steps(epsilon=1.0)
    losses, weights = train_steps(amp, level, epsilon=1.0)
    assert update_difference(weights, reference[1], start) <= update_bound(amp)
    np.testing.assert_allclose(losses, reference[0], rtol=update_bound(amp))
    # the negative control: a run one step short is outside every bound
    assert update_difference(train_steps(steps=2, epsilon=1.0)[1], reference[1], start) > update_bound("bf16")


def test_only_fp16_asks_for_a_loss_scaler():
    assert Precision("fp16").wants_scaler and not Precision("bf16").wants_scaler
    assert not Precision("off").wants_scaler


@pytest.mark.skipif(not paddle.is_compiled_with_cuda(), reason="Paddle enables the loss scaler on GPU only")
def test_fp16_scaler_scales_on_gpu():
    precision = Precision("fp16")
    assert float(precision.scaler.scale(paddle.to_tensor(0.5))) == 0.5 * 2**15


def test_the_runs_precision_reaches_paddle_and_trains_as_fp32_does(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """What a CPU can observe of --amp, --amp-level and --recompute given on the command line: Paddle's autocast,
    decorate and loss scaler are asked for the run's dtype and level, recompute wraps the layers, and the encoder's
    weights move as the fp32 run's do (on a CPU, where Paddle computes in fp32, to float32 rounding; on a GPU within
    ``update_bound``, for which the runs take --adam-epsilon 1)."""
    from ernie_ft.models import bf16
    from ernie_ft.training import runtime

    # A CPU without bf16 instructions, where --amp bf16 is Paddle's too (tests/test_bf16.py: the real bf16).
    monkeypatch.setattr(bf16, "cpu_supports_bf16", lambda: False)
    asked = set()

    def spy(name, real):
        def call(*args, **kwargs):
            if sys._getframe(1).f_globals["__name__"].startswith("ernie_ft."):  # not Paddle's own calls (recompute's)
                keys = ("enable", "level", "dtype", "master_weight")
                asked.add((name, *(f"{k}={kwargs[k]}" for k in keys if k in kwargs)))
            return real(*args, **kwargs)

        return call

    for name in ("auto_cast", "decorate", "GradScaler"):
        monkeypatch.setattr(paddle.amp, name, spy(name, getattr(paddle.amp, name)))
    monkeypatch.setattr(runtime, "enable_recompute", spy("recompute", runtime.enable_recompute))

    def run(name, *extra):
        asked.clear()
        args = ["--train", str(DATA / "sentiment_train.tsv"), "--model", tiny_checkpoint, "--seed", "5", "--threads"]
        args += ["1", "--output", str(tmp_path / name), "--epochs", "1", "--batch-size", "32", "--max-len", "48"]
        capsys.readouterr()
        assert main([*args, "--lr", "1e-3", "--adam-epsilon", "1", *extra]) == 0
        said = [line for line in capsys.readouterr().err.splitlines() if "--amp" in line]
        recorded = yaml.safe_load((tmp_path / name / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))
        return saved_weights(tmp_path / name / "best"), sorted(asked), said, recorded["run"]["precision"]

    on_cpu = paddle.get_device() == "cpu"
    reference, calls, said, precision = run("ref")
    assert calls == [("GradScaler", "enable=False")]
    assert (said, precision) == ([], "fp32")
    start = {"ernie." + k: v for k, v in saved_weights(tiny_checkpoint).items()}  # the encoder (the head is new)
    assert len(start) > 20 and start.keys() <= reference.keys()
    fp16 = [("GradScaler", "enable=True"), ("auto_cast", "enable=True", "level=O1", "dtype=float16"), ("recompute",)]
    bf16 = [
        ("GradScaler", "enable=False"),
        ("auto_cast", "enable=True", "level=O2", "dtype=bfloat16"),
        ("decorate", "level=O2", "dtype=bfloat16", "master_weight=True"),
    ]
    for amp, extra, expected in (("fp16", ["--recompute"], fp16), ("bf16", ["--amp-level", "O2"], bf16)):
        weights, calls, said, precision = run(amp, "--amp", amp, *extra)
        assert calls == sorted(expected)
        # on a CPU, where the dtype has no kernels, one line says so and the checkpoint records fp32; not on a GPU
        assert (len(said), precision) == ((1, "fp32") if on_cpu else (0, amp)), said
        assert not on_cpu or said[0].startswith(f"warning: --amp {amp} on CPU: ") and "training in fp32" in said[0]
        bound = update_bound(amp) if paddle.get_device().startswith("gpu") else 1e-6
        moved = {k: weights[k] for k in start}
        assert update_difference(moved, {k: reference[k] for k in start}, start) <= bound, amp


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


# Paddle's noise: its C++ warning "Got different data type, run type promotion automatically" (the relation loss
# divides by a shape tensor, int64) and the Python warning "No ccache found" at import, which the launcher of
# --nproc printed since it imports Paddle on its own.
NOISE = ("type promotion", "No ccache found")


def test_a_training_command_prints_none_of_paddles_noise(tmp_path):
    from test_relation import duie

    train = tmp_path / "train.jsonl"
    train.write_text(duie(), encoding="utf-8")
    args = ["--train", str(train), "--model", "scratch:1x32", "--max-len", "32", "--epochs", "1", "--batch-size", "6"]
    command = [sys.executable, "-m", "ernie_ft", "relation", *args, "--threads", "1", "--output", str(tmp_path / "run")]
    env = {k: v for k, v in os.environ.items() if k not in ("GLOG_minloglevel", "PYTHONWARNINGS")}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "done: best model in" in proc.stderr and not [n for n in NOISE if n in proc.stderr], proc.stderr


def test_the_processes_a_command_starts_print_none_of_paddles_noise():
    """A process started by a command (as ``--nproc`` starts Paddle's launcher, which imports Paddle itself) inherits
    the quiet set up by the command line's entry; the same child started without it prints both lines."""
    child = (
        "import paddle; x = paddle.ones([2, 3]); "
        "print(float((x.sum() / paddle.shape(x)[0]).numpy()))"  # float32 / int64: a type promotion
    )
    parent = (
        "import subprocess, sys\n"
        "if sys.argv[1] == 'quiet':\n"
        "    from ernie_ft.cli import quiet_imports\n"
        "    quiet_imports()\n"
        f"sys.exit(subprocess.run([sys.executable, '-c', {child!r}]).returncode)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GLOG_minloglevel", "PYTHONWARNINGS")}
    runs = {
        kind: subprocess.run([sys.executable, "-c", parent, kind], capture_output=True, text=True, timeout=300, env=env)
        for kind in ("quiet", "plain")
    }
    assert all(run.returncode == 0 and run.stdout.strip() == "3.0" for run in runs.values()), runs
    assert not [n for n in NOISE if n in runs["quiet"].stderr], runs["quiet"].stderr
    assert all(n in runs["plain"].stderr for n in NOISE), runs["plain"].stderr  # the control: the noise is real
