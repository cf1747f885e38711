"""The fused CPU kernels of ``csrc/cpu_kernels.c`` (softmax, GELU, dropout, LayerNorm) and the C library that runs them.

Where a Paddle 3.3 CPU training step of ERNIE spends its time besides the matmuls (nano shape,
batch 32, ``python benchmarks/profile_step.py --profile``), and what replaces it here:

* softmax, GELU, dropout and LayerNorm run as scalar loops, one pass over memory per op, and
  dropout stores a mask drawn element by element: ``csrc/cpu_kernels.c`` fuses softmax with
  the attention dropout, GELU with the activation dropout, and the residual add with the
  hidden dropout and LayerNorm, vectorised and on the math threads; dropout masks come from a
  counter-based hash, so backward regenerates them instead of storing them. Forward + backward
  on a nano batch (``benchmarks/profile_step.py --ops``): softmax + dropout 82 -> 10 ms, GELU
  24 -> 11 ms, residual + dropout + LayerNorm 27 -> 2.3 ms;
* the attention mask and Linear's bias: see ``fast_layers``, which swaps all of these into a model by class.

The C file is compiled at first use by ``kernel_build`` (about 0.4 s, once, into a cache it checks
before loading: loading a library runs its code); plain C functions called through ctypes on tensors'
data (``paddle.utils.cpp_extension`` builds C++ custom operators through setuptools, which does not
fit them). Without a compiler (one warning says so), or with ``ERNIE_FT_C_KERNELS=0``, Python
versions run instead: Paddle's softmax and GELU, dropout masks from numpy, LayerNorm's gradient as
matmuls. Dropout keys and seeds are drawn from Paddle's generator, so ``paddle.seed``, resumed
checkpoints and recompute (which replays Paddle's random state) see the same masks.

Each replacement computes the same function (``tests/test_kernels.py`` compares outputs, losses
and gradients with the unswapped model). Without gradients (evaluation, prediction) the same
forward kernels run. Used on CPU only: on GPU Paddle's kernels are the fast ones. (The other
CPU setting, no strided views, is in ``runtime.select_device``.)
"""

from __future__ import annotations

import ctypes
import os
import warnings

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer
from paddle.utils.dlpack import from_dlpack

from ernie_ft.models import kernel_build

_LEVELS = 1 << 16  # dropout compares 16 random bits with round(p * 65536)
_P, _I64, _U32, _F32, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_int
_DROP = [_U32, _U32, _U32, _F32]  # key (2 words), threshold, scale
_SIGNATURES = {
    "ef_dropout": [_P, _P, _I64, *_DROP, _INT],
    "ef_softmax_dropout_fwd": [_P, _P, _I64, _P, _P, _I64, _I64, *_DROP, _INT],
    "ef_softmax_dropout_bwd": [_P, _P, _P, _I64, _I64, *_DROP, _INT],
    "ef_gelu_dropout_fwd": [_P, _P, _I64, *_DROP, _INT],
    "ef_gelu_dropout_bwd": [_P, _P, _P, _I64, *_DROP, _INT],
    "ef_add_dropout_layernorm_fwd": [_P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _F32, *_DROP, _INT],
    "ef_layernorm_bwd": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _INT],
}
_state = {"lib": None, "tried": False, "threads": 1}


def set_threads(threads: int) -> None:
    """Threads for the C kernels (``runtime.set_threads`` gives them Paddle's math threads)."""
    _state["threads"] = max(1, int(threads))


def _build() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(kernel_build.compile_library()))
    for name, argtypes in _SIGNATURES.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = None
    return lib


class KernelsWarning(RuntimeWarning):
    """The fused kernels could not be built (not a UserWarning: the CLI silences those of libraries)."""


def built_once(state: dict, build, failed: str):
    """``state["lib"]``: the library ``build()`` returns, built at the first call unless ``ERNIE_FT_C_KERNELS=0``;
    where it cannot be built, None and one ``KernelsWarning``, ``failed`` with the error in place of ``{error}``."""
    if not state["tried"]:
        state["tried"] = True
        if os.environ.get("ERNIE_FT_C_KERNELS", "1") != "0":
            try:
                state["lib"] = build()
            except (OSError, RuntimeError) as error:
                warnings.warn(failed.format(error=error), KernelsWarning, stacklevel=3)
    return state["lib"]


def library():
    """The compiled C kernels, built at the first call; None where they cannot be built or are off."""
    return built_once(
        _state,
        _build,
        "ernie_ft: could not build the fused CPU kernels ({error}); training runs about a quarter slower without "
        "them. They need a C compiler (cc or $CC) and a writable cache directory ($ERNIE_FT_CACHE, default "
        "~/.cache/ernie_ft); ERNIE_FT_C_KERNELS=0 silences this.",
    )


def usable(*tensors) -> bool:
    """The C kernels take these: eager fp32 CPU tensors, and the library built."""
    return (
        paddle.in_dynamic_mode()
        and library() is not None
        and all(t.dtype == paddle.float32 and t.place.is_cpu_place() for t in tensors)
    )


def dense(t):
    return t if t.is_contiguous() else t.contiguous()


class DropoutMask:
    """A dropout mask's description: key, threshold and scale (the C kernels regenerate the mask)."""

    def __init__(self, p: float, training: bool):
        if not training or p == 0.0:
            self.args = (0, 0, 0, 1.0)  # threshold 0: every element kept, scale 1
            return
        threshold = round(p * _LEVELS)
        key = paddle.randint(0, 2**31 - 1, [2]).numpy()  # Paddle's generator: recompute replays it
        self.args = (int(key[0]), int(key[1]), threshold, _LEVELS / (_LEVELS - threshold))


def _call(name, *args):
    """Call a C kernel; tensors are passed as their buffers (contiguous, and alive for the call)."""
    args = [a.data_ptr() if isinstance(a, paddle.Tensor) else a for a in args]
    getattr(library(), name)(*args, _state["threads"])


def dropout(x, p: float, training: bool = True):
    """Inverted dropout: zero each element with probability ``p`` and scale the rest by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if usable(x):
        mask = DropoutMask(p, training)
        return _CDropout.apply(x, mask) if needs_grad(x) else _dropout(x, mask)
    if not x.place.is_cpu_place():
        return F.dropout(x, p, training=True)
    return _numpy_dropout(x, p)


def _numpy_dropout(x, p: float):
    """Without the C kernels: a mask from numpy's generator, seeded from Paddle's (Paddle draws its
    masks element by element, 15 % of the step), handed over without a copy."""
    threshold = round(p * _LEVELS)
    seed = int(paddle.randint(0, 2**31 - 1, [1]).item())
    bits = np.random.Generator(np.random.PCG64(seed)).integers(0, _LEVELS, list(x.shape), dtype=np.uint16)
    mask = (bits >= threshold).astype(np.float32)
    mask *= np.float32(_LEVELS / (_LEVELS - threshold))
    mask = from_dlpack(mask)  # shares numpy's buffer: paddle.to_tensor's copy took half the time
    return x * (mask if x.dtype == mask.dtype else mask.astype(x.dtype))


def _elementwise(kernel: str, x, mask: DropoutMask):
    """A C kernel that maps x to an output of its shape: ef_dropout, ef_gelu_dropout_fwd."""
    x = dense(x)
    out = paddle.empty_like(x)
    _call(kernel, x, out, x.size, *mask.args)
    return out


def _dropout(x, mask: DropoutMask):
    return _elementwise("ef_dropout", x, mask)


class _CDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.mask = mask
        return _dropout(x, mask)

    @staticmethod
    def backward(ctx, dy):
        return _dropout(dy, ctx.mask)  # dropout is linear: its gradient is the same mask


def _softmax_dropout(x, mask: DropoutMask, key_mask=None):
    x = dense(x)
    probs = paddle.empty_like(x)
    out = paddle.empty_like(x) if mask.args[2] else probs
    rows = x.size // x.shape[-1]
    key_mask = None if key_mask is None else dense(key_mask)
    _call("ef_softmax_dropout_fwd", x, key_mask, rows // x.shape[0], probs, out, rows, x.shape[-1], *mask.args)
    return probs, out


class _SoftmaxDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask, key_mask):
        probs, out = _softmax_dropout(x, mask, key_mask)
        ctx.save_for_backward(probs)
        ctx.mask, ctx.key_mask = mask, key_mask is not None
        return out

    @staticmethod
    def backward(ctx, dout):
        (probs,) = ctx.saved_tensor()
        dout = dense(dout)
        dx = paddle.empty_like(probs)
        _call("ef_softmax_dropout_bwd", probs, dout, dx, probs.size // probs.shape[-1], probs.shape[-1], *ctx.mask.args)
        return (dx, None) if ctx.key_mask else dx  # a gradient per tensor input: none for the mask


def softmax_dropout(x, p: float, training: bool = True, key_mask=None):
    """dropout(softmax(x + key_mask)) over the last axis, for x [batch, ..., keys] and an additive ``key_mask`` of
    batch x keys values ([batch, 1, 1, keys], which the kernel adds without broadcasting it first), or None. The
    mask gets no gradient."""
    if not usable(x) or not (key_mask is None or (usable(key_mask) and key_mask.size == x.shape[0] * x.shape[-1])):
        return dropout(F.softmax(x if key_mask is None else x + key_mask), p, training)
    mask = DropoutMask(p, training)
    if needs_grad(x):
        return _SoftmaxDropout.apply(x, mask, key_mask)
    return _softmax_dropout(x, mask, key_mask)[1]


class _GeluDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(x)
        ctx.mask = mask
        return _elementwise("ef_gelu_dropout_fwd", x, mask)

    @staticmethod
    def backward(ctx, dout):
        (x,) = ctx.saved_tensor()
        dout = dense(dout)
        dx = paddle.empty_like(x)
        _call("ef_gelu_dropout_bwd", x, dout, dx, x.size, *ctx.mask.args)
        return dx


def gelu_dropout(x, p: float, training: bool = True):
    """dropout(gelu(x)), GELU in its exact (erf) form."""
    if not usable(x):
        return dropout(F.gelu(x), p, training)
    mask = DropoutMask(p, training)
    return _GeluDropout.apply(x, mask) if needs_grad(x) else _elementwise("ef_gelu_dropout_fwd", x, mask)


def c_add_dropout_layernorm(residual, x, weight, bias, epsilon, mask: DropoutMask):
    """(residual + dropout(x), or x alone when residual is None) -> layer norm; returns the sum,
    the output and the rows' mean and 1/std."""
    x = dense(x)
    residual = None if residual is None else dense(residual)
    cols = x.shape[-1]
    rows = x.size // cols
    total = x if residual is None else paddle.empty_like(x)
    y = paddle.empty_like(x)
    mean, rstd = paddle.empty([rows], "float32"), paddle.empty([rows], "float32")
    _call(
        "ef_add_dropout_layernorm_fwd", residual, x, weight, bias, total, y, mean, rstd, rows, cols, epsilon, *mask.args
    )
    return total, y, mean, rstd


def _layernorm_backward(total, weight, mean, rstd, dy):
    dy = dense(dy)
    dtotal = paddle.empty_like(total)
    dweight, dbias = paddle.empty_like(weight), paddle.empty_like(weight)
    partial = paddle.zeros([_state["threads"] * 2 * weight.shape[0]], "float32")  # per-thread sums
    _call(
        "ef_layernorm_bwd",
        total,
        weight,
        mean,
        rstd,
        dy,
        dtotal,
        dweight,
        dbias,
        partial,
        mean.shape[0],
        total.shape[-1],
    )
    return dtotal, dweight, dbias


class CLayerNorm(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias, epsilon):
        total, y, mean, rstd = c_add_dropout_layernorm(None, x, weight, bias, epsilon, DropoutMask(0.0, False))
        ctx.save_for_backward(total, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _layernorm_backward(*ctx.saved_tensor(), dy)


class _AddDropoutLayerNorm(PyLayer):
    @staticmethod
    def forward(ctx, residual, x, weight, bias, epsilon, mask):
        total, y, mean, rstd = c_add_dropout_layernorm(residual, x, weight, bias, epsilon, mask)
        ctx.save_for_backward(total, weight, mean, rstd)
        ctx.mask = mask
        return y

    @staticmethod
    def backward(ctx, dy):
        dtotal, dweight, dbias = _layernorm_backward(*ctx.saved_tensor(), dy)
        return dtotal, _dropout(dtotal, ctx.mask), dweight, dbias


def add_dropout_layernorm(residual, x, norm: paddle.nn.LayerNorm, p: float, training: bool = True):
    """norm(residual + dropout(x)): the post-norm residual of a transformer layer."""
    if (
        len(norm._normalized_shape) != 1
        or norm.weight is None
        or norm.bias is None
        or not usable(residual, x, norm.weight, norm.bias)
        or residual.shape != x.shape
    ):
        return norm(residual + dropout(x, p, training))
    mask = DropoutMask(p, training)
    if needs_grad(residual, x, norm.weight, norm.bias):
        return _AddDropoutLayerNorm.apply(residual, x, norm.weight, norm.bias, norm._epsilon, mask)
    return c_add_dropout_layernorm(residual, x, norm.weight, norm.bias, norm._epsilon, mask)[1]


def needs_grad(*tensors) -> bool:
    return (
        paddle.in_dynamic_mode()
        and paddle.is_grad_enabled()
        and any(t is not None and not t.stop_gradient for t in tensors)
    )
