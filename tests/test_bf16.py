"""``--amp bf16`` on CPU: oneDNN's bf16 matmuls against fp32, a training run against fp32, and the fp32 fallback
on a CPU without AVX-512 BF16 or AMX."""

import json

import numpy as np
import paddle
import pytest
import yaml
from conftest import DATA, saved_weights

from ernie_ft.cli import task_command
from ernie_ft.models import bf16

main = task_command("classify")

# bf16 keeps 8 significant bits: rounding to nearest errs by at most U relative. A product of two rounded inputs errs
# by at most (2 U + U^2) |a| |b|, and oneDNN accumulates in fp32 (K * 2^-24 relative, K <= 100 here: below 1e-5), so
# each entry of a bf16 matmul is within 2.1 U (|A| @ |B|) of the exact product: an elementwise bound, not a guess.
U = 2.0**-8
BOUND = 2.1 * U


@pytest.fixture
def real_bf16():
    if not bf16.cpu_supports_bf16():
        pytest.skip(f"this CPU has none of {', '.join(bf16.BF16_FLAGS)} (/proc/cpuinfo): --amp bf16 trains in fp32")
    if bf16.library() is None:
        pytest.fail("the CPU has bf16 instructions but the oneDNN matmul did not build (see the warning)")


def tensor(rng, *shape):
    t = paddle.to_tensor(rng.standard_normal(shape).astype("float32"))
    t.stop_gradient = False
    return t


def assert_within_bf16(got, a, b, name):
    """``got`` (a paddle tensor) is a @ b up to ``BOUND`` (numpy float64 operands), and not fp32's exact result:
    the matmul really ran in bf16."""
    exact, scale = a @ b, np.abs(a) @ np.abs(b)
    error = np.abs(got.numpy().astype("float64") - exact)
    assert (error <= BOUND * scale).all(), f"{name}: {(error / scale).max():.2e} of |a| |b| > {BOUND:.2e}"
    assert (error / scale).max() > 1e-4, f"{name}: as exact as fp32 ({(error / scale).max():.1e}): not bf16"


def test_the_bf16_linear_computes_fp32s_output_and_gradients_within_bf16s_rounding(real_bf16):
    rng = np.random.default_rng(0)
    x, weight, bias = tensor(rng, 3, 40, 96), tensor(rng, 96, 80), tensor(rng, 80)
    upstream = rng.standard_normal((3, 40, 80))  # the gradient that reaches y: sum(y * upstream)
    y = bf16.linear(x, weight, bias)
    (y * paddle.to_tensor(upstream.astype("float32"))).sum().backward()
    x2d, w, dy2d = (
        x.numpy().reshape(-1, 96).astype("float64"),
        weight.numpy().astype("float64"),
        upstream.reshape(-1, 80),
    )
    # the bias goes in as one more input column whose product is exact
    assert_within_bf16((y - bias).reshape([-1, 80]), x2d, w, "forward")
    assert_within_bf16(x.grad.reshape([-1, 96]), dy2d, w.T, "dx")
    assert_within_bf16(weight.grad, x2d.T, dy2d, "dweight")
    assert_within_bf16(bias.grad.reshape([1, 80]), np.ones((1, 120)), dy2d, "dbias")


@pytest.mark.parametrize("transpose_b", [True, False], ids=["scores q k^T", "weights v"])
def test_the_batched_bf16_matmul_of_attention_and_its_gradients(real_bf16, transpose_b):
    rng = np.random.default_rng(1)
    a, b = tensor(rng, 2, 3, 20, 16), tensor(rng, 2, 3, 20, 16) if transpose_b else tensor(rng, 2, 3, 16, 24)
    out = bf16.matmul(a, b, transpose_b=transpose_b)
    upstream = rng.standard_normal(out.shape)
    (out * paddle.to_tensor(upstream.astype("float32"))).sum().backward()
    a64, b64 = a.numpy().astype("float64"), b.numpy().astype("float64")
    b_used = b64.swapaxes(-1, -2) if transpose_b else b64  # out = a @ b_used
    assert_within_bf16(out, a64, b_used, "forward")
    assert_within_bf16(a.grad, upstream, b_used.swapaxes(-1, -2), "da")
    if transpose_b:  # b holds b_used^T: its gradient is upstream^T a
        assert_within_bf16(b.grad, upstream.swapaxes(-1, -2), a64, "db")
    else:
        assert_within_bf16(b.grad, a64.swapaxes(-1, -2), upstream, "db")


STEPS = 6 * 16  # 6 epochs of 240 reviews in batches of 16


def train(model, tmp_path, name, *extra, capsys):
    """A classify run of the tiny checkpoint on the sample reviews, evaluated on the training and dev reviews (300:
    half a point is 1.5 reviews): (per-step losses, accuracy, the card's precision, the lines that mention --amp,
    the best checkpoint's weights)."""
    train_file, dev = DATA / "sentiment_train.tsv", tmp_path / "all.tsv"
    if not dev.exists():
        dev.write_text(train_file.read_text() + "".join((DATA / "sentiment_dev.tsv").open().readlines()[1:]))
    args = ["--train", str(train_file), "--dev", str(dev), "--model", model, "--seed", "5", "--threads", "1"]
    args += ["--output", str(tmp_path / name), "--epochs", "6", "--batch-size", "16", "--max-len", "64"]
    capsys.readouterr()
    assert main([*args, "--lr", "2e-3", "--log-steps", "1", *extra]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "--amp" in line]
    log = [json.loads(line) for line in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]
    accuracy = json.loads((tmp_path / name / "metrics.json").read_text())["dev"]["accuracy"]
    card = yaml.safe_load((tmp_path / name / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))
    return [r["loss"] for r in log], accuracy, card["run"]["precision"], said, saved_weights(tmp_path / name / "best")


# The loss curves' tolerance, per step: 2 % of the fp32 loss plus 0.01. Each matmul's products err by at most 2 U
# (0.8 %) of their size, and most of that averages out over a batch. Measured on an Intel Xeon with AMX over 4
# random initialisations: at most 1.3e-3 apart, a tenth of the tolerance. At a learning rate of 5e-3 instead of
# 2e-3 the runs are chaotic: a review that one run gets wrong late in training and the other right moves one step's
# loss by 0.26, whatever the precision.
LOSS_RTOL, LOSS_ATOL = 0.02, 0.01


def test_bf16_training_follows_the_fp32_run_and_the_card_says_bf16(real_bf16, tiny_checkpoint, tmp_path, capsys,
                                                                   monkeypatch):  # fmt: skip
    reference, ref_accuracy, precision, said, _ = train(tiny_checkpoint, tmp_path, "fp32", capsys=capsys)
    assert (precision, said) == ("fp32", [])
    assert ref_accuracy >= 0.9  # the task is learnt: an evaluation that moved would show
    calls = []
    real = bf16._matmul
    monkeypatch.setattr(bf16, "_matmul", lambda *args: calls.append(args[0].shape) or real(*args))
    losses, accuracy, precision, said, weights = train(tiny_checkpoint, tmp_path, "bf16", "--amp", "bf16",
                                                       capsys=capsys)  # fmt: skip
    assert (precision, said) == ("bf16", [])  # real: no warning, and the card says so
    assert len(calls) > STEPS * 2 * 6  # the bf16 matmuls ran: 2 layers x 6 Linear forwards per step, and more
    assert len(losses) == len(reference) == STEPS
    np.testing.assert_allclose(losses, reference, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert abs(accuracy - ref_accuracy) <= 0.005  # within half a point
    assert losses != reference  # not an fp32 run under another name
    assert all(w.dtype == np.float32 for w in weights.values())  # the checkpoint stays fp32


def test_without_bf16_instructions_the_run_warns_once_and_trains_in_fp32(tiny_checkpoint, tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """A CPU with AVX2 only (its cpuinfo flags, as the check reads them): one line, and the fp32 run exactly."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni\n", encoding="ascii")
    monkeypatch.setattr(bf16, "CPUINFO", cpuinfo)
    assert not bf16.cpu_supports_bf16()
    reference = train(tiny_checkpoint, tmp_path, "fp32", capsys=capsys)
    losses, accuracy, precision, said, weights = train(tiny_checkpoint, tmp_path, "bf16", "--amp", "bf16",
                                                       capsys=capsys)  # fmt: skip
    assert precision == "fp32" and len(said) == 1, said
    assert said[0].startswith("warning: --amp bf16 on CPU: ") and "training in fp32" in said[0]
    assert (losses, accuracy) == reference[:2]
    for name, value in reference[4].items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


@pytest.mark.parametrize(
    "flags,expected",
    [("fpu avx2 avx512f avx512_bf16", True), ("fpu avx2 amx_tile amx_bf16 amx_int8", True), ("fpu avx2 fma", False)],
)
def test_the_cpu_check_reads_the_bf16_flags(tmp_path, monkeypatch, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: avx512_bf16 in a name\nflags\t\t: {flags}\n")
    monkeypatch.setattr(bf16, "CPUINFO", cpuinfo)
    assert bf16.cpu_supports_bf16() is expected
    monkeypatch.setattr(bf16, "CPUINFO", tmp_path / "absent")
    assert bf16.cpu_supports_bf16() is False
