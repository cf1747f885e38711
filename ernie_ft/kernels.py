"""Cheaper CPU kernels swapped into a model by class, keeping its parameters and their names.

Where a Paddle 3.3 CPU training step of ERNIE spends its time besides the matmuls (nano shape,
batch 32, ``python scripts/profile_step.py --profile``), and what replaces it here:

* dropout draws its mask element by element (about 15 % of the step): masks come from numpy's
  generator instead (16-bit integers against a threshold, so the keep probability is exact to
  1/65536), seeded from Paddle's generator, so ``paddle.seed``, resumable checkpoints and
  recompute (which replays Paddle's random state) see the same masks;
* the attention mask is added by a broadcasting kernel that costs more than the query-key
  matmul: the mask goes inside that matmul (each query gets a component 1, each key its mask
  value), and the gradient is two plain matmuls;
* LayerNorm's gradient kernel takes about 40 times its forward: the gradient is written with
  matmuls for the row means and column sums;
* Linear's bias is added by a broadcast add after the matmul (a quarter of the matmul's time
  on medium's FFN): ``addmm`` adds it inside the GEMM; its gradient, a slow column reduction,
  is a matmul with a row of ones.

Each replacement computes the same function (``tests/test_kernels.py`` compares outputs, losses
and gradients with the unswapped model). Without gradients (evaluation, prediction) the attention mask and
the bias stay inside their matmuls; the rest is Paddle's own. Used on CPU only: on GPU
Paddle's kernels are the fast ones. (The other CPU setting, no strided views, is in
``runtime.select_device``.)
"""
from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import _C_ops
from paddle.autograd import PyLayer
from paddle.nn.layer.transformer import _convert_attention_mask
from paddle.utils.dlpack import from_dlpack

_LEVELS = 1 << 16


def dropout(x, p: float, training: bool = True):
    """Inverted dropout: zero each element with probability ``p`` and scale the rest by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if not x.place.is_cpu_place():
        return F.dropout(x, p, training=True)
    threshold = round(p * _LEVELS)
    shape = list(x.shape)
    seed = int(paddle.randint(0, 2 ** 31 - 1, [1]).item())  # from Paddle's generator: recompute replays it
    bits = np.random.Generator(np.random.PCG64(seed)).integers(0, _LEVELS, shape, dtype=np.uint16)
    mask = (bits >= threshold).astype(np.float32)
    mask *= np.float32(_LEVELS / (_LEVELS - threshold))
    mask = from_dlpack(mask)  # shares numpy's buffer: paddle.to_tensor's copy took half the time
    return x * (mask if x.dtype == mask.dtype else mask.astype(x.dtype))


def _column_sums(x2d):
    """Sum over the rows of a [rows, columns] tensor, as a matmul (Paddle's reduction is slower)."""
    return paddle.matmul(paddle.ones([1, x2d.shape[0]], x2d.dtype), x2d).reshape([x2d.shape[1]])


def _row_means(x2d):
    """Mean over the columns of a [rows, columns] tensor, as a [rows, 1] matmul."""
    return paddle.matmul(x2d, paddle.full([x2d.shape[1], 1], 1.0 / x2d.shape[1], x2d.dtype))


def _needs_grad(*tensors) -> bool:
    return (paddle.in_dynamic_mode() and paddle.is_grad_enabled()
            and any(t is not None and not t.stop_gradient for t in tensors))


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


class _LayerNorm(PyLayer):
    """Layer norm over the last axis; the statistics are recomputed in backward (cheap as matmuls)."""

    @staticmethod
    def forward(ctx, x, weight, bias, epsilon):
        ctx.save_for_backward(x, weight)
        ctx.epsilon = epsilon
        return _C_ops.layer_norm(x, weight, bias, epsilon, x.ndim - 1)

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
        if len(self._normalized_shape) != 1 or self.weight is None or self.bias is None \
                or not _needs_grad(x, self.weight, self.bias):
            return super().forward(x)
        return _LayerNorm.apply(x, self.weight, self.bias, self._epsilon)


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
    """Paddle's MultiHeadAttention (self-attention, no cache) with the fast dropout on its weights
    and a key-padding mask (what ERNIE builds from the pad ids) added inside the q.k matmul."""

    def forward(self, query, key=None, value=None, attn_mask=None, cache=None):
        if cache is not None or self.need_weights or not (key is None or key is query) \
                or not (value is None or value is query):
            return super().forward(query, key, value, attn_mask, cache)

        def heads(x):  # [batch, length, hidden] -> [batch, heads, length, head_dim]
            return x.reshape([0, 0, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])

        q = heads(self.q_proj(query) * (self.head_dim ** -0.5))
        k, v = heads(self.k_proj(query)), heads(self.v_proj(query))
        mask = None if attn_mask is None else _convert_attention_mask(attn_mask, q.dtype)
        if mask is not None and mask.ndim == 4 and mask.shape[1] == mask.shape[2] == 1:  # a key mask
            product = _MaskedScores.apply(q, k, mask) if _needs_grad(q, k) else _masked_scores(q, k, mask)
        else:
            product = paddle.matmul(q, k, transpose_y=True)
            if mask is not None:
                product = product + mask
        weights = dropout(F.softmax(product), self.dropout, self.training)
        out = paddle.matmul(weights, v).transpose([0, 2, 1, 3])
        return self.out_proj(out.reshape([0, 0, self.embed_dim]))


SWAPS = {paddle.nn.Dropout: FastDropout, paddle.nn.MultiHeadAttention: FastAttention,
         paddle.nn.LayerNorm: FastLayerNorm, paddle.nn.Linear: FastLinear}


def enable_fast_kernels(model) -> int:
    """On CPU, swap every plain Dropout, MultiHeadAttention, LayerNorm and Linear of ``model`` for
    the versions above; return the number of layers swapped (0 on other devices)."""
    if not paddle.get_device().startswith("cpu"):
        return 0
    layers = [layer for layer in model.sublayers() if type(layer) in SWAPS]
    for layer in layers:
        layer.__class__ = SWAPS[type(layer)]
    return len(layers)

