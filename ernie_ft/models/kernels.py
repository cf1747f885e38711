"""Cheaper CPU kernels swapped into a model by class, keeping its parameters and their names.

Where a Paddle 3.3 CPU training step of ERNIE spends its time besides the matmuls (nano shape,
batch 32, ``python benchmarks/profile_step.py --profile``), and what replaces it here:

* softmax, GELU, dropout and LayerNorm run as scalar loops, one pass over memory per op, and
  dropout stores a mask drawn element by element: ``csrc/cpu_kernels.c`` fuses softmax with
  the attention dropout, GELU with the activation dropout, and the residual add with the
  hidden dropout and LayerNorm, vectorised and on the math threads; dropout masks come from a
  counter-based hash, so backward regenerates them instead of storing them. Forward + backward
  on a nano batch (``benchmarks/profile_step.py --ops``): softmax + dropout 82 -> 10 ms, GELU
  24 -> 11 ms, residual + dropout + LayerNorm 27 -> 2.3 ms;
* the attention mask is added by a broadcasting kernel that costs more than the query-key
  matmul: the mask goes inside that matmul (each query gets a component 1, each key its mask
  value), and the gradient is two plain matmuls;
* Linear's bias is added by a broadcast add after the matmul (a quarter of the matmul's time
  on medium's FFN): ``addmm`` adds it inside the GEMM; its gradient, a slow column reduction,
  is a matmul with a row of ones.

The C file is compiled at first use (``cc -O3 -march=native -fopenmp``, linked to the OpenMP
runtime of Paddle's MKL) into a cache keyed by the source, flags and CPU (under
``$ERNIE_FT_CACHE``, default ``~/.cache/ernie_ft``): about 0.4 s, once, bounded by
``COMPILE_SECONDS``. A cached library is loaded only if its bytes match the SHA-256 recorded
when it was built and only this user can write it (``_trusted``): loading it runs its code.
(``paddle.utils.cpp_extension`` builds Paddle custom operators in C++ through setuptools; these
are plain C functions called through ctypes on tensors' data, so it does not fit them.) Without a compiler
(one warning says so), or with ``ERNIE_FT_C_KERNELS=0``, Python versions run instead: Paddle's
softmax and GELU, dropout masks from numpy, LayerNorm's gradient as matmuls. Dropout keys and
seeds are drawn from Paddle's generator, so ``paddle.seed``, resumed checkpoints and recompute
(which replays Paddle's random state) see the same masks.

Each replacement computes the same function (``tests/test_kernels.py`` compares outputs, losses
and gradients with the unswapped model). Without gradients (evaluation, prediction) the same
forward kernels run. Used on CPU only: on GPU Paddle's kernels are the fast ones. (The other
CPU setting, no strided views, is in ``runtime.select_device``.)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer
from paddle.nn.layer.transformer import _convert_attention_mask
from paddle.utils.dlpack import from_dlpack

from ernie_ft.data.dataset import default_cache_dir

SOURCE = Path(__file__).with_name("csrc") / "cpu_kernels.c"
FLAGS = ["-O3", "-march=native", "-fno-trapping-math", "-fno-math-errno", "-fopenmp", "-fPIC"]
_LEVELS = 1 << 16  # dropout compares 16 random bits with round(p * 65536)
_P, _I64, _U32, _F32, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_int
_DROP = [_U32, _U32, _U32, _F32]  # key (2 words), threshold, scale
_SIGNATURES = {
    "ef_dropout": [_P, _P, _I64, *_DROP, _INT],
    "ef_softmax_dropout_fwd": [_P, _P, _P, _I64, _I64, *_DROP, _INT],
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


def _cpu_id() -> str:
    """What -march=native depends on: the machine and, on Linux, the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return platform.machine() + "".join(sorted({x for x in lines if x.startswith(("model name", "flags"))}))
    except OSError:
        return platform.machine() + platform.processor()


def _openmp_link() -> list[str]:
    """Link to the OpenMP runtime Paddle's MKL already runs (Intel's libiomp5, shipped in the wheel):
    with a second runtime (gcc's libgomp), two thread pools spin for the same cores and the
    matmuls after each fused kernel ran a third slower."""
    libs = Path(paddle.__file__).parent / "libs"
    if (libs / "libiomp5.so").exists():
        return [f"-L{libs}", "-l:libiomp5.so", f"-Wl,-rpath,{libs}"]
    return ["-fopenmp"]


COMPILE_SECONDS = 120  # a compiler that hangs (a network home, a wedged toolchain) must not hang training


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted(target: Path) -> bool:
    """A cached library is loaded only if this user owns it, nobody else may write it, and its bytes
    match the SHA-256 recorded when this code built it: loading a shared library runs its code."""
    record = target.with_name(target.name + ".sha256")
    try:
        st = target.stat()
        recorded = record.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022 and _digest(target) == recorded


def _build() -> ctypes.CDLL:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (cc) on PATH")
    link = _openmp_link()
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join([compiler, *FLAGS, *link, _cpu_id()]).encode())
    target = Path(default_cache_dir()) / "kernels" / f"cpu_kernels-{key.hexdigest()[:16]}.so"
    if not _trusted(target):
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        seconds = float(os.environ.get("ERNIE_FT_KERNELS_TIMEOUT", COMPILE_SECONDS))
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # then an atomic rename: several
            obj, lib = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.so")  # processes may build at once
            for command in (
                [compiler, *FLAGS, "-c", str(SOURCE), "-o", obj],
                [compiler, "-shared", obj, "-o", lib, *link],
            ):
                try:
                    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"{command[0]} did not finish in {seconds:g} s") from None
                if done.returncode != 0:
                    raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
            os.chmod(lib, 0o755)
            record = Path(tmp) / "k.so.sha256"
            record.write_text(_digest(Path(lib)) + "\n", encoding="ascii")
            os.replace(lib, target)  # a process that dies between the two leaves a mismatch: rebuilt
            os.replace(record, target.with_name(target.name + ".sha256"))
    lib = ctypes.CDLL(str(target))
    for name, argtypes in _SIGNATURES.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = None
    return lib


class KernelsWarning(RuntimeWarning):
    """The fused kernels could not be built (not a UserWarning: the CLI silences those of libraries)."""


def library():
    """The compiled C kernels, built at the first call; None where they cannot be built or are off."""
    if not _state["tried"]:
        _state["tried"] = True
        if os.environ.get("ERNIE_FT_C_KERNELS", "1") != "0":
            try:
                _state["lib"] = _build()
            except (OSError, RuntimeError) as error:
                warnings.warn(
                    f"ernie_ft: could not build the fused CPU kernels ({error}); training runs "
                    "about a quarter slower without them. They need a C compiler (cc or $CC) and a "
                    "writable cache directory ($ERNIE_FT_CACHE, default ~/.cache/ernie_ft); "
                    "ERNIE_FT_C_KERNELS=0 silences this.",
                    KernelsWarning,
                    stacklevel=2,
                )
    return _state["lib"]


def _usable(*tensors) -> bool:
    """The C kernels take these: eager fp32 CPU tensors, and the library built."""
    return (
        paddle.in_dynamic_mode()
        and library() is not None
        and all(t.dtype == paddle.float32 and t.place.is_cpu_place() for t in tensors)
    )


def _dense(t):
    return t if t.is_contiguous() else t.contiguous()


class _Dropout:
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
    if _usable(x):
        mask = _Dropout(p, training)
        return _CDropout.apply(x, mask) if _needs_grad(x) else _dropout(x, mask)
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


def _elementwise(kernel: str, x, mask: _Dropout):
    """A C kernel that maps x to an output of its shape: ef_dropout, ef_gelu_dropout_fwd."""
    x = _dense(x)
    out = paddle.empty_like(x)
    _call(kernel, x, out, x.size, *mask.args)
    return out


def _dropout(x, mask: _Dropout):
    return _elementwise("ef_dropout", x, mask)


class _CDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.mask = mask
        return _dropout(x, mask)

    @staticmethod
    def backward(ctx, dy):
        return _dropout(dy, ctx.mask)  # dropout is linear: its gradient is the same mask


def _softmax_dropout(x, mask: _Dropout):
    x = _dense(x)
    probs = paddle.empty_like(x)
    out = paddle.empty_like(x) if mask.args[2] else probs
    _call("ef_softmax_dropout_fwd", x, probs, out, x.size // x.shape[-1], x.shape[-1], *mask.args)
    return probs, out


class _SoftmaxDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask):
        probs, out = _softmax_dropout(x, mask)
        ctx.save_for_backward(probs)
        ctx.mask = mask
        return out

    @staticmethod
    def backward(ctx, dout):
        (probs,) = ctx.saved_tensor()
        dout = _dense(dout)
        dx = paddle.empty_like(probs)
        _call("ef_softmax_dropout_bwd", probs, dout, dx, probs.size // probs.shape[-1], probs.shape[-1], *ctx.mask.args)
        return dx


def softmax_dropout(x, p: float, training: bool = True):
    """dropout(softmax(x)) over the last axis."""
    if not _usable(x):
        return dropout(F.softmax(x), p, training)
    mask = _Dropout(p, training)
    return _SoftmaxDropout.apply(x, mask) if _needs_grad(x) else _softmax_dropout(x, mask)[1]


class _GeluDropout(PyLayer):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(x)
        ctx.mask = mask
        return _elementwise("ef_gelu_dropout_fwd", x, mask)

    @staticmethod
    def backward(ctx, dout):
        (x,) = ctx.saved_tensor()
        dout = _dense(dout)
        dx = paddle.empty_like(x)
        _call("ef_gelu_dropout_bwd", x, dout, dx, x.size, *ctx.mask.args)
        return dx


def gelu_dropout(x, p: float, training: bool = True):
    """dropout(gelu(x)), GELU in its exact (erf) form."""
    if not _usable(x):
        return dropout(F.gelu(x), p, training)
    mask = _Dropout(p, training)
    return _GeluDropout.apply(x, mask) if _needs_grad(x) else _elementwise("ef_gelu_dropout_fwd", x, mask)


def _add_dropout_layernorm(residual, x, weight, bias, epsilon, mask: _Dropout):
    """(residual + dropout(x), or x alone when residual is None) -> layer norm; returns the sum,
    the output and the rows' mean and 1/std."""
    x = _dense(x)
    residual = None if residual is None else _dense(residual)
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
    dy = _dense(dy)
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


class _CLayerNorm(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias, epsilon):
        total, y, mean, rstd = _add_dropout_layernorm(None, x, weight, bias, epsilon, _Dropout(0.0, False))
        ctx.save_for_backward(total, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _layernorm_backward(*ctx.saved_tensor(), dy)


class _AddDropoutLayerNorm(PyLayer):
    @staticmethod
    def forward(ctx, residual, x, weight, bias, epsilon, mask):
        total, y, mean, rstd = _add_dropout_layernorm(residual, x, weight, bias, epsilon, mask)
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
        or not _usable(residual, x, norm.weight, norm.bias)
        or residual.shape != x.shape
    ):
        return norm(residual + dropout(x, p, training))
    mask = _Dropout(p, training)
    if _needs_grad(residual, x, norm.weight, norm.bias):
        return _AddDropoutLayerNorm.apply(residual, x, norm.weight, norm.bias, norm._epsilon, mask)
    return _add_dropout_layernorm(residual, x, norm.weight, norm.bias, norm._epsilon, mask)[1]


def _column_sums(x2d):
    """Sum over the rows of a [rows, columns] tensor, as a matmul (Paddle's reduction is slower)."""
    return paddle.matmul(paddle.ones([1, x2d.shape[0]], x2d.dtype), x2d).reshape([x2d.shape[1]])


def _needs_grad(*tensors) -> bool:
    return (
        paddle.in_dynamic_mode()
        and paddle.is_grad_enabled()
        and any(t is not None and not t.stop_gradient for t in tensors)
    )


def _affine(x, weight, bias):
    """x @ weight + bias with the bias added inside the GEMM (addmm): the separate broadcast add
    cost a quarter of a [3584, 768] x [768, 3072] matmul."""
    out = paddle.addmm(bias, x.reshape([-1, x.shape[-1]]), weight)
    return out.reshape(list(x.shape[:-1]) + [weight.shape[1]])


class _Linear(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return _affine(x, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensor()
        dy2d = dy.reshape([-1, weight.shape[1]])
        dx = paddle.matmul(dy, weight, transpose_y=True)
        dweight = paddle.matmul(x.reshape([-1, weight.shape[0]]), dy2d, transpose_x=True)
        return dx, dweight, _column_sums(dy2d)


class FastLinear(paddle.nn.Linear):
    def forward(self, x):
        if self.bias is None or not paddle.in_dynamic_mode():
            return super().forward(x)
        affine = _Linear.apply if _needs_grad(x, self.weight, self.bias) else _affine
        return affine(x, self.weight, self.bias)


def _row_means(x2d):
    """Mean over the columns of a [rows, columns] tensor, as a [rows, 1] matmul."""
    return paddle.matmul(x2d, paddle.full([x2d.shape[1], 1], 1.0 / x2d.shape[1], x2d.dtype))


class _MatmulLayerNorm(PyLayer):
    """Without the C kernels: Paddle's forward, and a gradient written with matmuls for the row
    means and column sums (Paddle's gradient kernel takes 40 times its forward)."""

    @staticmethod
    def forward(ctx, x, weight, bias, epsilon):
        ctx.save_for_backward(x, weight)
        ctx.epsilon = epsilon
        return F.layer_norm(x, x.shape[-1], weight, bias, epsilon)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensor()
        x2d = x.reshape([-1, x.shape[-1]])
        dy2d = dy.reshape(x2d.shape)
        centred = x2d - _row_means(x2d)
        inv_std = paddle.rsqrt(_row_means(centred * centred) + ctx.epsilon)
        normed = centred * inv_std
        dnormed = dy2d * weight
        dx = (dnormed - _row_means(dnormed) - normed * _row_means(dnormed * normed)) * inv_std
        return dx.reshape(x.shape), _column_sums(dy2d * normed), _column_sums(dy2d)


class FastLayerNorm(paddle.nn.LayerNorm):
    def forward(self, x):
        if len(self._normalized_shape) != 1 or self.weight is None or self.bias is None or not paddle.in_dynamic_mode():
            return super().forward(x)
        grad = _needs_grad(x, self.weight, self.bias)
        if _usable(x, self.weight, self.bias):
            if grad:
                return _CLayerNorm.apply(x, self.weight, self.bias, self._epsilon)
            return _add_dropout_layernorm(None, x, self.weight, self.bias, self._epsilon, _Dropout(0.0, False))[1]
        return _MatmulLayerNorm.apply(x, self.weight, self.bias, self._epsilon) if grad else super().forward(x)


def _masked_scores(q, k, mask):
    """q k^T + mask for q, k [batch, heads, length, dim] and a key mask [batch, 1, 1, length]."""
    ones = paddle.full_like(q[:, :, :, :1], 1.0)
    keys = mask.transpose([0, 1, 3, 2]).expand([-1, q.shape[1], -1, -1])  # [batch, heads, length, 1]
    return paddle.matmul(paddle.concat([q, ones], axis=-1), paddle.concat([k, keys], axis=-1), transpose_y=True)


class _MaskedScores(PyLayer):
    """``_masked_scores`` with the gradient of q k^T (the concat's gradient is a slow strided split)."""

    @staticmethod
    def forward(ctx, q, k, mask):
        ctx.save_for_backward(q, k)
        return _masked_scores(q, k, mask)

    @staticmethod
    def backward(ctx, dscores):
        q, k = ctx.saved_tensor()
        return paddle.matmul(dscores, k), paddle.matmul(dscores, q, transpose_x=True), None


class FastDropout(paddle.nn.Dropout):
    def forward(self, x):
        if self.mode != "upscale_in_train" or self.axis is not None:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class FastAttention(paddle.nn.MultiHeadAttention):
    """Paddle's MultiHeadAttention (self-attention, no cache) with softmax and dropout fused and a
    key-padding mask (what ERNIE builds from the pad ids) added inside the q.k matmul."""

    def forward(self, query, key=None, value=None, attn_mask=None, cache=None):
        if (
            cache is not None
            or self.need_weights
            or not (key is None or key is query)
            or not (value is None or value is query)
        ):
            return super().forward(query, key, value, attn_mask, cache)

        def heads(x):  # [batch, length, hidden] -> [batch, heads, length, head_dim]
            return x.reshape([0, 0, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])

        q = heads(self.q_proj(query) * (self.head_dim**-0.5))
        k, v = heads(self.k_proj(query)), heads(self.v_proj(query))
        mask = None if attn_mask is None else _convert_attention_mask(attn_mask, q.dtype)
        if mask is not None and mask.ndim == 4 and mask.shape[1] == mask.shape[2] == 1:  # a key mask
            if _needs_grad(q, k):  # contiguous copies: under recompute, Paddle 3.3 hands a PyLayer
                # wrong values for a strided view it saved (the recompute test in tests/test_kernels.py)
                product = _MaskedScores.apply(_dense(q), _dense(k), mask)
            else:
                product = _masked_scores(q, k, mask)
        else:
            product = paddle.matmul(q, k, transpose_y=True)
            if mask is not None:
                product = product + mask
        weights = softmax_dropout(product, self.dropout, self.training)
        out = paddle.matmul(weights, v).transpose([0, 2, 1, 3])
        return self.out_proj(out.reshape([0, 0, self.embed_dim]))


class FastEncoderLayer(paddle.nn.TransformerEncoderLayer):
    """Paddle's post-norm TransformerEncoderLayer with GELU (ERNIE's), its residual adds, dropouts
    and LayerNorms fused: norm(x + dropout(attention(x))), then the same around
    linear2(dropout(gelu(linear1(.))))."""

    def forward(self, src, src_mask=None, cache=None, output_attentions=False):
        if (
            output_attentions
            or cache is not None
            or self.normalize_before
            or self.activation is not F.gelu
            or any(
                d.mode != "upscale_in_train" or d.axis is not None for d in (self.dropout, self.dropout1, self.dropout2)
            )
        ):
            extra = (output_attentions,) if output_attentions else ()  # PaddleNLP's patched signature
            return super().forward(src, src_mask, cache, *extra)
        attention = self.self_attn(src, src, src, _convert_attention_mask(src_mask, src.dtype))
        src = add_dropout_layernorm(src, attention, self.norm1, self.dropout1.p, self.training)
        hidden = gelu_dropout(self.linear1(src), self.dropout.p, self.training)
        return add_dropout_layernorm(src, self.linear2(hidden), self.norm2, self.dropout2.p, self.training)


SWAPS = {
    paddle.nn.Dropout: FastDropout,
    paddle.nn.MultiHeadAttention: FastAttention,
    paddle.nn.LayerNorm: FastLayerNorm,
    paddle.nn.Linear: FastLinear,
    paddle.nn.TransformerEncoderLayer: FastEncoderLayer,
}


def enable_fast_kernels(model) -> int:
    """On CPU, swap every plain Dropout, MultiHeadAttention, LayerNorm, Linear and
    TransformerEncoderLayer of ``model`` for the versions above; return the number of layers
    swapped (0 on other devices)."""
    if not paddle.get_device().startswith("cpu"):
        return 0
    library()  # build now, not inside the first step
    layers = [layer for layer in model.sublayers() if type(layer) in SWAPS]
    for layer in layers:
        layer.__class__ = SWAPS[type(layer)]
    return len(layers)
