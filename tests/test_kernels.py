"""The fast CPU kernels: each computes the same function and gradients as Paddle's, and so does a swapped model."""

import os
import shutil
import sys

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

from ernie_ft.models import kernels
from ernie_ft.models.fast_layers import (
    SWAPS,
    FastAttention,
    FastLayerNorm,
    FastLinear,
    built_from,
    enable_fast_kernels,
)
from ernie_ft.models.kernels import add_dropout_layernorm, dropout, gelu_dropout, softmax_dropout


@pytest.fixture(params=["c", "paddle"])
def c_kernels(request, monkeypatch):
    """Run a test with the compiled kernels and again with Paddle's own (no compiler)."""
    if request.param == "paddle":
        monkeypatch.setattr(kernels, "_state", {"lib": None, "tried": True, "threads": 1})
    elif kernels.library() is None:
        if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
            pytest.skip("no C compiler: the C kernels cannot be built here")
        pytest.fail("a C compiler is on PATH but the C kernels did not build (see the warning)")
    return request.param


def test_dropout_zeroes_the_given_share_and_keeps_the_expectation(c_kernels):
    paddle.seed(0)
    x = paddle.ones([400, 2500])
    y = dropout(x, 0.1).numpy()
    assert abs((y == 0).mean() - 0.1) < 0.002
    assert abs(y.mean() - 1.0) < 0.005
    np.testing.assert_allclose(np.unique(y), [0.0, 65536 / (65536 - 6554)], rtol=1e-6)  # 16-bit thresholds
    paddle.seed(0)
    np.testing.assert_array_equal(dropout(x, 0.1).numpy(), y)  # reproducible from Paddle's state
    np.testing.assert_array_equal(dropout(x, 0.1, training=False).numpy(), x.numpy())


def test_gradient_flows_through_the_kept_elements_only(c_kernels):
    paddle.seed(1)
    x = paddle.rand([8, 50])
    x.stop_gradient = False
    y = dropout(x, 0.3)
    y.sum().backward()
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.7, rtol=1e-3)


def _model(dropout_prob):
    paddle.seed(5)
    config = ErnieConfig(
        vocab_size=60,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=4,
        use_task_id=False,
        num_labels=3,
        hidden_dropout_prob=dropout_prob,
        attention_probs_dropout_prob=dropout_prob,
    )
    return ErnieForSequenceClassification(config)


@pytest.mark.parametrize("train_mode,dropout_prob", [(True, 0.0), (False, 0.1)])
def test_swapped_model_computes_the_same_loss_and_gradients(train_mode, dropout_prob, c_kernels):
    ids = np.random.default_rng(0).integers(5, 60, (4, 11))
    for row, length in enumerate((11, 8, 3, 6)):
        ids[row, length:] = 0  # padding, masked in attention
    ids = paddle.to_tensor(ids)
    results = []
    for fast in (False, True):
        model = _model(dropout_prob)
        if fast:
            assert enable_fast_kernels(model) > 0
            assert {type(m) for m in model.sublayers()} >= set(SWAPS.values())
            assert not any(type(m) in SWAPS for m in model.sublayers())
        model.train(train_mode)
        loss = paddle.nn.functional.cross_entropy(
            model(input_ids=ids, token_type_ids=paddle.zeros_like(ids)), paddle.to_tensor([0, 1, 2, 1])
        )
        loss.backward()
        results.append((float(loss), {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}))
    assert results[1][0] == pytest.approx(results[0][0], abs=1e-6)
    assert results[1][1].keys() == results[0][1].keys()
    for name, grad in results[0][1].items():
        np.testing.assert_allclose(results[1][1][name], grad, atol=1e-6, err_msg=name)


def _gradients(layer, x, dy):
    x = paddle.to_tensor(x, stop_gradient=False)
    y = layer(x)
    y.backward(paddle.to_tensor(dy))
    return [y.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]


@pytest.mark.parametrize(
    "make,fast,shape",
    [
        (lambda: paddle.nn.LayerNorm(24, epsilon=1e-12), FastLayerNorm, (3, 7, 24)),
        (lambda: paddle.nn.LayerNorm(5), FastLayerNorm, (9, 5)),
        (lambda: paddle.nn.Linear(24, 40), FastLinear, (3, 7, 24)),
        (lambda: paddle.nn.Linear(6, 2), FastLinear, (5, 6)),
    ],
)
def test_layer_computes_the_same_output_and_gradients(make, fast, shape, c_kernels):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=shape) * 3 + 1).astype("float32")
    paddle.seed(2)
    plain = make()
    for p in plain.parameters():  # not the initial ones and zeros, so that a swapped term would show
        p.set_value(paddle.to_tensor(rng.normal(size=p.shape).astype("float32")))
    dy = rng.normal(size=plain(paddle.to_tensor(x)).shape).astype("float32")
    expected = _gradients(plain, x, dy)
    plain.clear_gradients()
    plain = built_from(fast, plain)
    for got, want in zip(_gradients(plain, x, dy), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with paddle.no_grad():  # prediction's path
        np.testing.assert_allclose(plain(paddle.to_tensor(x)).numpy(), expected[0], rtol=1e-5, atol=1e-5)


def test_attention_mask_inside_the_matmul_equals_adding_it(c_kernels):
    paddle.seed(4)
    attention = paddle.nn.MultiHeadAttention(16, 4)
    attention.train()
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 6, 16)).astype("float32")
    mask = np.zeros((3, 1, 1, 6), "float32")
    mask[1, ..., 4:] = -1e4
    mask[2, ..., 1:] = -1e4  # a row that sees only its first token
    dy = rng.normal(size=(3, 6, 16)).astype("float32")
    results = []
    for cls in (paddle.nn.MultiHeadAttention, FastAttention):
        attention.__class__ = cls
        attention.clear_gradients()
        xt = paddle.to_tensor(x, stop_gradient=False)
        y = attention(xt, attn_mask=paddle.to_tensor(mask))
        y.backward(paddle.to_tensor(dy))
        results.append([y.numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in attention.parameters()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    attention.eval()
    with paddle.no_grad():  # prediction: the mask goes inside the matmul without the custom gradient
        outputs = [
            cls.forward(attention, paddle.to_tensor(x), attn_mask=paddle.to_tensor(mask)).numpy()
            for cls in (paddle.nn.MultiHeadAttention, FastAttention)
        ]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)


def test_training_trajectory_matches_paddles_defaults(c_kernels):
    """Six AdamW steps, dropout off: Paddle's defaults and plain layers against no strided views
    and the swapped layers give the same losses and weights."""
    rng = np.random.default_rng(7)
    batches = []
    for length in (11, 7, 9, 5, 11, 8):
        ids = rng.integers(5, 60, (4, length))
        for row in range(4):
            ids[row, rng.integers(2, length + 1) :] = 0
        batches.append((paddle.to_tensor(ids), paddle.to_tensor(rng.integers(0, 3, 4))))
    runs = []
    default = paddle.get_flags("FLAGS_use_stride_kernel")["FLAGS_use_stride_kernel"]
    try:
        for fast in (False, True):
            paddle.set_flags({"FLAGS_use_stride_kernel": not fast})
            model = _model(0.0)
            if fast:
                enable_fast_kernels(model)
            model.train()
            # Adam's epsilon above rounding noise: with 1e-8, a gradient that is exactly zero (k_proj's
            # bias: softmax ignores a shift shared by all keys) or about 1e-7 (a rare token's
            # embedding) is normalised to steps of up to lr, so last-digit differences become 1e-4
            # in the weights of either run; the trajectory is Adam's for every larger gradient.
            optimizer = paddle.optimizer.AdamW(1e-2, parameters=model.parameters(), weight_decay=0.01, epsilon=1e-5)
            losses = []
            for ids, labels in batches:
                loss = paddle.nn.functional.cross_entropy(
                    model(input_ids=ids, token_type_ids=paddle.zeros_like(ids)), labels
                )
                loss.backward()
                optimizer.step()
                optimizer.clear_grad()
                losses.append(float(loss))
            runs.append((losses, {n: p.numpy() for n, p in model.named_parameters()}))
    finally:
        paddle.set_flags({"FLAGS_use_stride_kernel": default})
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    assert runs[0][0][-1] != pytest.approx(runs[0][0][0], rel=1e-3)  # the weights did move
    for name, weight in runs[0][1].items():
        np.testing.assert_allclose(runs[1][1][name], weight, rtol=1e-4, atol=1e-5, err_msg=name)


def _run(fn, inputs, dy):
    """fn's output and the gradients of (output * dy).sum() for each input."""
    tensors = [paddle.to_tensor(x, stop_gradient=False) for x in inputs]
    y = fn(*tensors)
    y.backward(paddle.to_tensor(dy))
    return [y.numpy()] + [t.grad.numpy() for t in tensors]


def _assert_same(got, want, **tolerance):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **tolerance)


def _mask(shape, p, seed):
    """The mask a fused op draws after paddle.seed(seed): the same key gives the same mask."""
    paddle.seed(seed)
    return dropout(paddle.ones(shape), p)


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_fused_softmax_dropout_equals_paddles_ops(p, c_kernels):
    rng = np.random.default_rng(11)
    x = (rng.normal(size=(3, 2, 5, 37)) * 4).astype("float32")
    x[0, 0, :, 20:] -= 1e4  # padded keys, as ERNIE's mask leaves them
    x[1, 1, 2, 1:] = -1e4  # a row that sees one key
    dy = rng.normal(size=x.shape).astype("float32")
    mask = _mask(x.shape, p, 6)
    paddle.seed(6)
    got = _run(lambda t: softmax_dropout(t, p), [x], dy)
    want = _run(lambda t: F.softmax(t) * mask, [x], dy)
    _assert_same(got, want, rtol=1e-5, atol=1e-7)
    if c_kernels == "c":  # masked keys get exactly 0 (Paddle's softmax clamps at exp(-64): 1e-28)
        assert (got[0][0, 0, :, 20:] == 0).all()
    with paddle.no_grad():
        paddle.seed(6)
        np.testing.assert_allclose(softmax_dropout(paddle.to_tensor(x), p).numpy(), want[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_fused_softmax_adds_a_key_mask_as_paddles_broadcast_add_does(p, c_kernels):
    """Attention's key-padding mask, one row per sequence, added inside the fused softmax: each sequence's own row
    for all of its heads and queries, and no gradient for the mask."""
    rng = np.random.default_rng(12)
    x = (rng.normal(size=(3, 2, 5, 37)) * 4).astype("float32")
    key_mask = np.zeros((3, 1, 1, 37), "float32")
    key_mask[0, ..., 20:] = -1e9  # padded keys
    key_mask[2, ..., 1:] = -1e9  # a sequence of one token
    key_mask[1, ..., :3] = rng.normal(size=3)  # a float mask is added as it is
    dy = rng.normal(size=x.shape).astype("float32")
    mask = _mask(x.shape, p, 9)
    paddle.seed(9)
    added = paddle.to_tensor(key_mask)  # stop_gradient, as attention's mask
    got = _run(lambda t: softmax_dropout(t, p, key_mask=added), [x], dy)
    want = _run(lambda t: F.softmax(t + added) * mask, [x], dy)
    _assert_same(got, want, rtol=1e-5, atol=1e-7)
    if c_kernels == "c":
        assert (got[0][2, :, :, 1:] == 0).all() and (got[0][0, :, :, 20:] == 0).all()
    with paddle.no_grad():
        paddle.seed(9)
        out = softmax_dropout(paddle.to_tensor(x), p, key_mask=paddle.to_tensor(key_mask))
        np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_fused_gelu_dropout_equals_paddles_ops(p, c_kernels):
    rng = np.random.default_rng(12)
    x = np.concatenate([np.linspace(-12, 12, 2001), rng.normal(size=999) * 2]).astype("float32").reshape(6, 500)
    dy = rng.normal(size=x.shape).astype("float32")
    mask = _mask(x.shape, p, 7)
    paddle.seed(7)
    got = _run(lambda t: gelu_dropout(t, p), [x], dy)
    want = _run(lambda t: F.gelu(t) * mask, [x], dy)
    _assert_same(got, want, rtol=1e-5, atol=2e-6)  # erf to 1.5e-7 (Abramowitz & Stegun 7.1.26), times |x| <= 12


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_fused_residual_dropout_layernorm_equals_paddles_ops(p, c_kernels):
    rng = np.random.default_rng(13)
    residual = (rng.normal(size=(2, 9, 48)) * 3 + 1).astype("float32")
    x = rng.normal(size=(2, 9, 48)).astype("float32")
    dy = rng.normal(size=x.shape).astype("float32")
    norm = paddle.nn.LayerNorm(48, epsilon=1e-12)
    for param in norm.parameters():
        param.set_value(paddle.to_tensor(rng.normal(size=param.shape).astype("float32")))
    mask = _mask(x.shape, p, 8)

    def run(fn):
        norm.clear_gradients()
        return _run(fn, [residual, x], dy) + [norm.weight.grad.numpy(), norm.bias.grad.numpy()]

    want = run(lambda r, t: F.layer_norm(r + t * mask, 48, norm.weight, norm.bias, 1e-12))
    try:
        for threads in (1, 2, 3):  # the weight and bias gradients are summed per thread, then added
            kernels.set_threads(threads)
            paddle.seed(8)
            got = run(lambda r, t: add_dropout_layernorm(r, t, norm, p))
            _assert_same(got, want, rtol=1e-5, atol=1e-5)
    finally:
        kernels.set_threads(1)


def test_dropout_mask_is_uncorrelated_and_independent_of_threads():
    paddle.seed(9)
    x = paddle.ones([256, 4096])
    masks = []
    try:
        for threads in (1, 2):
            kernels.set_threads(threads)
            paddle.seed(9)
            masks.append(dropout(x, 0.5).numpy() > 0)
    finally:
        kernels.set_threads(1)
    np.testing.assert_array_equal(masks[0], masks[1])
    bits = masks[0].astype("float64")
    flat = bits.ravel()
    for lag in (1, 2, 4, 16, 4096):  # neighbours, the hash's word boundaries, the next row
        assert abs(np.corrcoef(flat[:-lag], flat[lag:])[0, 1]) < 0.01, lag
    assert abs(bits.mean() - 0.5) < 0.003
    assert (dropout(x, 0.5).numpy() > 0).mean() == pytest.approx(0.5, abs=0.003)
    assert not np.array_equal(dropout(x, 0.5).numpy() > 0, masks[0])  # the next call draws a new key


def test_recompute_with_the_fused_kernels_replays_the_same_dropout():
    from ernie_ft.training.runtime import enable_recompute

    ids = paddle.to_tensor(np.random.default_rng(1).integers(5, 60, (4, 9)))
    runs = []
    for recompute in (False, True):
        model = _model(0.1)
        enable_fast_kernels(model)
        if recompute:
            assert enable_recompute(model) == 2
        model.train()
        paddle.seed(3)
        logits = model(input_ids=ids, token_type_ids=paddle.zeros_like(ids))
        loss = F.cross_entropy(logits, paddle.to_tensor([0, 1, 2, 1]))
        loss.backward()
        runs.append((float(loss), {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}))
    assert runs[1][0] == runs[0][0]
    for name, grad in runs[0][1].items():
        np.testing.assert_allclose(runs[1][1][name], grad, atol=1e-7, err_msg=name)


def test_without_a_compiler_paddles_kernels_run_and_one_warning_says_why(monkeypatch):
    monkeypatch.setattr(kernels, "_state", {"lib": None, "tried": False, "threads": 1})
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.warns(kernels.KernelsWarning, match="could not build the fused CPU kernels"):
        assert kernels.library() is None
    x = paddle.rand([4, 6])
    np.testing.assert_allclose(softmax_dropout(x, 0.0).numpy(), F.softmax(x).numpy(), rtol=1e-6)


def test_the_command_line_shows_the_warning_and_trains_without_a_compiler(monkeypatch, tiny_checkpoint, tmp_path):
    from conftest import DATA

    from ernie_ft.cli import task_command

    main = task_command("classify")

    monkeypatch.setattr(kernels, "_state", {"lib": None, "tried": False, "threads": 1})
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.warns(kernels.KernelsWarning, match="C compiler"):  # through the CLI's warning filters
        assert (
            main(
                [
                    "--train",
                    str(DATA / "sentiment_train.tsv"),
                    "--model",
                    tiny_checkpoint,
                    "--output",
                    str(tmp_path / "run"),
                    "--epochs",
                    "1",
                    "--max-len",
                    "32",
                    "--threads",
                    "1",
                ]
            )
            == 0
        )
    assert (tmp_path / "run" / "best" / "model.safetensors").exists()


def _fresh_build(monkeypatch, cache):
    monkeypatch.setenv("ERNIE_FT_CACHE", str(cache))
    monkeypatch.setattr(kernels, "_state", {"lib": None, "tried": False, "threads": 1})
    return kernels.library()


def test_a_cached_library_that_is_not_the_one_built_here_is_never_loaded(monkeypatch, tmp_path):
    if not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    assert _fresh_build(monkeypatch, tmp_path) is not None
    (target,) = (tmp_path / "kernels").glob("*.so")
    built = target.read_bytes()
    assert (tmp_path / "kernels").stat().st_mode & 0o077 == 0  # the cache directory is the user's alone
    # A planted library: its constructor would create a marker file when loaded.
    planted = tmp_path / "planted.c"
    planted.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void f(void) "
        f'{{ fclose(fopen("{tmp_path / "pwned"}", "w")); }}\n'
    )
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    import subprocess

    subprocess.run([cc, "-shared", "-fPIC", str(planted), "-o", str(target)], check=True)
    loaded = subprocess.run(
        [sys.executable, "-c", "from ernie_ft.models import kernels; print(kernels.library() is not None)"],
        env={**os.environ, "ERNIE_FT_CACHE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # a new process: nothing is loaded in it yet
    assert loaded.stdout.strip() == "True", loaded.stderr[-2000:]
    assert not (tmp_path / "pwned").exists() and target.read_bytes() == built  # rebuilt, never loaded
    os.chmod(target, 0o777)  # writable by anyone: not trusted either, rebuilt with safe permissions
    assert _fresh_build(monkeypatch, tmp_path) is not None
    assert target.stat().st_mode & 0o022 == 0


def test_a_compiler_that_hangs_is_stopped_and_paddles_kernels_run(monkeypatch, tmp_path):
    hanging = tmp_path / "cc"
    hanging.write_text("#!/bin/sh\nexec sleep 600\n")  # stands for a wedged toolchain, never finishes
    hanging.chmod(0o755)
    monkeypatch.setenv("CC", str(hanging))
    monkeypatch.setenv("ERNIE_FT_KERNELS_TIMEOUT", "1")
    with pytest.warns(kernels.KernelsWarning, match="did not finish in 1 s"):
        assert _fresh_build(monkeypatch, tmp_path / "cache") is None


def test_replaced_layers_are_new_layers_of_the_declared_classes_holding_the_same_parameters():
    """``enable_fast_kernels`` then ``enable_recompute``: no layer changed class after it was built (each layer of
    the model is either one that was there, of its class, or a new one of a class ``fast_layers`` declares), the
    parameters are the same objects under the same names, and a hook registered before still fires."""
    from ernie_ft.models.fast_layers import RecomputedFastEncoderLayer
    from ernie_ft.training.runtime import enable_recompute

    model = _model(0.1)
    parameters = [(name, id(p)) for name, p in model.named_parameters()]
    keys = list(model.state_dict())
    built = {id(layer): (layer, type(layer)) for layer in model.sublayers(include_self=True)}  # kept alive: ids hold
    fired = []
    model.ernie.encoder.layers[0].linear1.register_forward_post_hook(lambda *_: fired.append(1))
    assert enable_fast_kernels(model) > 0
    assert enable_recompute(model) == 2
    new = []
    for layer in model.sublayers(include_self=True):
        if id(layer) in built and built[id(layer)][0] is layer:
            assert type(layer) is built[id(layer)][1], f"a {built[id(layer)][1].__name__} became a {type(layer)}"
        else:
            new.append(type(layer))
    assert new and set(new) <= set(SWAPS.values()) | {RecomputedFastEncoderLayer}
    assert [type(layer) for layer in model.ernie.encoder.layers] == [RecomputedFastEncoderLayer] * 2
    assert [(name, id(p)) for name, p in model.named_parameters()] == parameters
    assert list(model.state_dict()) == keys
    model.eval()
    with paddle.no_grad():
        model(input_ids=paddle.to_tensor([[1, 5, 6, 2]]))
    assert fired == [1]


def test_no_layer_class_is_assigned_and_no_private_paddle_function_is_used():
    """The library builds the layers that run (no ``__class__`` assignment) and uses no private function of Paddle's
    transformer module (``_convert_attention_mask``: ``fast_layers.additive_mask`` instead)."""
    import re
    from pathlib import Path

    package = Path(kernels.__file__).parents[1]
    found = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"__class__\s*=(?!=)|_convert_attention_mask", line)
    ]
    assert not found
