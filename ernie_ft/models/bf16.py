"""``--amp bf16`` on CPU: the matmuls of Linear layers and attention with bf16 products and fp32 accumulation.

Paddle 3.3's dygraph has no CPU bf16 matmul. The oneDNN library its wheel ships has one: ``csrc/onednn_bf16.c`` runs
oneDNN's matmul on fp32 tensors with the bf16 fpmath mode (oneDNN converts blocks to bf16 as it packs them and
multiplies them on AMX or AVX512-BF16, accumulating in fp32; torch's ``fp32_precision = "bf16"``). Everything else
stays fp32, as under torch's CPU autocast: weights (the optimizer's masters, the checkpoints), gradients,
activations, softmax, layer norm. On medium's Linear shapes (3,200 x 768 -> 768 / 3,072 and back, forward, dX, dW)
it ran 2-3.5x Paddle's fp32 matmul on an Intel Xeon with AMX (load 4, 2 threads).

Only on CPUs that have AVX-512 BF16 or AMX (``cpu_supports_bf16``, from /proc/cpuinfo's flags): elsewhere oneDNN
would emulate bf16 more slowly than fp32. ``enable`` switches a model's ``fast_layers`` Linear and attention layers
(``Matmuls``) over; ``runtime.Precision`` calls it for ``--amp bf16`` on CPU and records the precision in the card.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import paddle
from paddle.autograd import PyLayer

from ernie_ft._cpu import cpu_flags
from ernie_ft.models import kernel_build
from ernie_ft.models.kernels import built_once, dense, needs_grad

SOURCE = Path(__file__).with_name("csrc") / "onednn_bf16.c"
CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_I64, _P = ctypes.c_int64, ctypes.c_void_p
_state = {"lib": None, "tried": False}


def cpu_supports_bf16() -> bool:
    """Whether the CPU multiplies bf16 in hardware: AVX-512 BF16 or AMX among the flags of ``CPUINFO``."""
    return any(flag in (cpu_flags(str(CPUINFO)) or ()) for flag in BF16_FLAGS)


def _build() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(kernel_build.compile_library(SOURCE, kernel_build.onednn_link())))
    lib.ef_bf16_matmul.argtypes = [_I64] * 4 + [_P, _I64, _I64, _I64] * 2 + [_P, _P]
    lib.ef_bf16_matmul.restype = ctypes.c_int
    return lib


def library():
    """The compiled oneDNN matmul, built at the first call; None (with one warning) where it cannot be built."""
    return built_once(
        _state,
        _build,
        "ernie_ft: could not build the bf16 CPU matmul ({error}); --amp bf16 trains in fp32. It needs a C compiler "
        "(cc or $CC), the oneDNN library of Paddle's wheel and a writable cache directory ($ERNIE_FT_CACHE, default "
        "~/.cache/ernie_ft).",
    )


def available() -> bool:
    """bf16 matmuls can run here: the CPU has the instructions and the library is built."""
    return cpu_supports_bf16() and library() is not None


def usable(*tensors) -> bool:
    return paddle.in_dynamic_mode() and all(t.dtype == paddle.float32 and t.place.is_cpu_place() for t in tensors)


def _matmul(a, b, transpose_a: bool, transpose_b: bool, bias=None):
    """a @ b (either transposed: the last two axes), batched over their equal leading axes, plus ``bias`` [n]."""
    a, b = dense(a), dense(b)
    rows, cols = a.shape[-2], a.shape[-1]
    m, k = (cols, rows) if transpose_a else (rows, cols)
    n = b.shape[-2] if transpose_b else b.shape[-1]
    batch = a.size // (m * k)
    a_strides = (m * k, 1, m) if transpose_a else (m * k, k, 1)  # a transpose is a stride swap: no copy
    b_strides = (k * n, 1, k) if transpose_b else (k * n, n, 1)
    out = paddle.empty(list(a.shape[:-2]) + [m, n], "float32")
    status = library().ef_bf16_matmul(
        batch, m, k, n, a.data_ptr(), *a_strides, b.data_ptr(), *b_strides,
        None if bias is None else dense(bias).data_ptr(), out.data_ptr(),
    )  # fmt: skip
    if status:
        raise RuntimeError(f"oneDNN matmul {list(a.shape)} x {list(b.shape)} failed with status {status}")
    return out


class _Matmul(PyLayer):
    @staticmethod
    def forward(ctx, a, b, transpose_b):
        ctx.save_for_backward(a, b)
        ctx.transpose_b, ctx.wanted = transpose_b, (not a.stop_gradient, not b.stop_gradient)
        return _matmul(a, b, False, transpose_b)

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensor()
        if ctx.transpose_b:  # c = a b^T: da = dc b, db = dc^T a
            grads = (lambda: _matmul(dc, b, False, False), lambda: _matmul(dc, a, True, False))
        else:  # da = dc b^T, db = a^T dc
            grads = (lambda: _matmul(dc, b, False, True), lambda: _matmul(a, dc, True, False))
        return tuple(grad() if wanted else None for grad, wanted in zip(grads, ctx.wanted))


def matmul(a, b, transpose_b: bool = False):
    """a @ b (or a @ b^T) over the last two axes, batched over the leading ones (equal in a and b), in bf16."""
    return _Matmul.apply(a, b, transpose_b) if needs_grad(a, b) else _matmul(a, b, False, transpose_b)


class _Linear(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2d = x.reshape([-1, x.shape[-1]])
        ctx.save_for_backward(x2d, weight)
        ctx.shape, ctx.wanted = x.shape, [not t.stop_gradient for t in (x, weight, bias)]
        return _matmul(x2d, weight, False, False, bias).reshape(list(x.shape[:-1]) + [weight.shape[1]])

    @staticmethod
    def backward(ctx, dy):
        x2d, weight = ctx.saved_tensor()
        dy2d = dy.reshape([-1, weight.shape[1]])
        ones = paddle.ones([1, dy2d.shape[0]], "float32")  # the bias gradient, a column sum, as a matmul
        grads = (
            lambda: _matmul(dy2d, weight, False, True).reshape(ctx.shape),
            lambda: _matmul(x2d, dy2d, True, False),
            lambda: _matmul(ones, dy2d, False, False).reshape([weight.shape[1]]),
        )
        return tuple(grad() if wanted else None for grad, wanted in zip(grads, ctx.wanted))


def linear(x, weight, bias):
    """x @ weight + bias (weight [in, out], Paddle's layout) in bf16, the bias added inside the matmul."""
    if needs_grad(x, weight, bias):
        return _Linear.apply(x, weight, bias)
    x2d = x.reshape([-1, x.shape[-1]])
    return _matmul(x2d, weight, False, False, bias).reshape(list(x.shape[:-1]) + [weight.shape[1]])


class Matmuls:
    """Mixed into a layer class whose matmuls can run in bf16 (``fast_layers``' Linear and attention): they do once
    ``enable`` set ``bf16`` on the layer."""

    bf16 = False


def enable(model: paddle.nn.Layer) -> int:
    """Run the matmuls of ``model``'s ``Matmuls`` layers in bf16 from now on, where ``available``; returns how many
    layers were switched (0 where bf16 is not available)."""
    if not available():
        return 0
    layers = [layer for layer in model.sublayers() if isinstance(layer, Matmuls)]
    for layer in layers:
        layer.bf16 = True
    return len(layers)
