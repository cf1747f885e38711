"""The layers that take a model's layers' places, holding their parameters under their names: the CPU layers of
``enable_fast_kernels`` (Dropout, MultiHeadAttention, LayerNorm and TransformerEncoderLayer on the fused kernels of
``kernels``, and two rewrites with plain matmuls, below) and the encoder layers ``--recompute`` recomputes
(``Recomputed``, given Paddle's recompute by ``training.runtime``, so models import nothing distributed).

Each replacement is a new object of a subclass of the layer's class (``built_from``) put in the layer's place in
its parent (``replace_layers``): a model's sublayers are of the classes that run, and the parameters, buffers,
sublayers, settings and hooks are the same objects under the same names, so state dicts, checkpoints, optimizers
and hooks see no change. The two rewrites:

* the attention mask is added by a broadcasting kernel that costs more than the query-key
  matmul: the mask goes inside that matmul (each query gets a component 1, each key its mask
  value), and the gradient is two plain matmuls;
* Linear's bias is added by a broadcast add after the matmul (a quarter of the matmul's time
  on medium's FFN): ``addmm`` adds it inside the GEMM; its gradient, a slow column reduction,
  is a matmul with a row of ones.

Each replacement computes the same function (``tests/test_kernels.py`` compares outputs, losses and gradients with the
unswapped model).
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from ernie_ft.models import bf16
from ernie_ft.models.kernels import (
    CLayerNorm,
    DropoutMask,
    add_dropout_layernorm,
    c_add_dropout_layernorm,
    dense,
    dropout,
    gelu_dropout,
    library,
    needs_grad,
    softmax_dropout,
    usable,
)


def additive_mask(mask, dtype):
    """``mask`` as the float tensor of ``dtype`` added to attention scores, as Paddle's ``MultiHeadAttention``
    documents masks: a bool or int mask (True or 1 where a key is attended to) becomes 0 there and -1e9 elsewhere;
    a float mask is already additive and is only cast. None stays None."""
    if mask is None or mask.dtype == dtype:
        return mask
    if paddle.is_floating_point(mask):
        return mask.astype(dtype)
    return (mask.astype(dtype) - 1.0) * 1e9


def _column_sums(x2d):
    """Sum over the rows of a [rows, columns] tensor, as a matmul (Paddle's reduction is slower)."""
    return paddle.matmul(paddle.ones([1, x2d.shape[0]], x2d.dtype), x2d).reshape([x2d.shape[1]])


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


class FastLinear(bf16.Matmuls, paddle.nn.Linear):
    def forward(self, x):
        if self.bias is None or not paddle.in_dynamic_mode():
            return super().forward(x)
        if self.bf16 and bf16.usable(x, self.weight, self.bias):
            return bf16.linear(x, self.weight, self.bias)
        affine = _Linear.apply if needs_grad(x, self.weight, self.bias) else _affine
        return affine(x, self.weight, self.bias)


def _matmul(a, b, transpose_b=False):
    return paddle.matmul(a, b, transpose_y=transpose_b)


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
        grad = needs_grad(x, self.weight, self.bias)
        if usable(x, self.weight, self.bias):
            if grad:
                return CLayerNorm.apply(x, self.weight, self.bias, self._epsilon)
            return c_add_dropout_layernorm(None, x, self.weight, self.bias, self._epsilon, DropoutMask(0.0, False))[1]
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


def _is_key_mask(mask, q) -> bool:
    """``mask`` is one additive row of keys per sequence, [batch, 1, 1, keys], for queries q [batch, heads, ...]."""
    return mask is not None and mask.ndim == 4 and mask.shape[1] == mask.shape[2] == 1 and mask.shape[0] == q.shape[0]


class FastDropout(paddle.nn.Dropout):
    def forward(self, x):
        if self.mode != "upscale_in_train" or self.axis is not None:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class FastAttention(bf16.Matmuls, paddle.nn.MultiHeadAttention):
    """Paddle's MultiHeadAttention (self-attention, no cache) with softmax and dropout fused and a
    key-padding mask (what ERNIE builds from the pad ids) added by the fused softmax (without the C kernels:
    inside the q.k matmul)."""

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
        mask, key_mask = additive_mask(attn_mask, q.dtype), None
        matmul = bf16.matmul if self.bf16 and bf16.usable(q, k, v) else _matmul
        if _is_key_mask(mask, q) and usable(q, mask):  # the fused softmax adds it: no broadcast, no 65th column
            product, key_mask = matmul(q, k, transpose_b=True), mask
        elif _is_key_mask(mask, q):
            if needs_grad(q, k):  # contiguous copies: under recompute, Paddle 3.3 hands a PyLayer
                # wrong values for a strided view it saved (the recompute test in tests/test_kernels.py)
                product = _MaskedScores.apply(dense(q), dense(k), mask)
            else:
                product = _masked_scores(q, k, mask)
        else:
            product = paddle.matmul(q, k, transpose_y=True)
            if mask is not None:
                product = product + mask
        weights = softmax_dropout(product, self.dropout, self.training, key_mask)
        out = matmul(weights, v).transpose([0, 2, 1, 3])
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
        attention = self.self_attn(src, src, src, additive_mask(src_mask, src.dtype))
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
"""Paddle's classes (exactly: not their subclasses) and the fast class that takes each one's place."""


def built_from(cls: type, layer: paddle.nn.Layer) -> paddle.nn.Layer:
    """A new ``cls``, a subclass of ``layer``'s class that changes only how it computes, holding ``layer``'s state:
    its parameters, buffers, sublayers, settings and hooks, the same objects under the same names. Paddle's
    constructor is not run again: it would create new weights (and draw them from the random generator)."""
    if not issubclass(cls, type(layer)):
        raise TypeError(f"{cls.__name__} is not a subclass of {type(layer).__name__}")
    new = cls.__new__(cls)
    vars(new).update(vars(layer))
    return new


def replace_layers(model: paddle.nn.Layer, replacement) -> int:
    """Put ``replacement(layer)`` in the place of each sublayer of ``model`` (under the same name in its parent,
    lists included) for which it returns a layer rather than None, from the top down (a replacement's sublayers are
    then looked at); a layer held in two places is replaced by one new layer in both. Returns how many layers were
    replaced."""
    seen: dict[int, tuple] = {}  # id of a layer looked at: (it, the layer in its place), both kept alive
    count = 0

    def visit(parent):
        nonlocal count
        for name, child in list(parent.named_children()):
            if id(child) not in seen:
                new = replacement(child)
                count += new is not None
                seen[id(child)] = (child, child if new is None else new)
                visit(seen[id(child)][1])
            if seen[id(child)][1] is not child:
                setattr(parent, name, seen[id(child)][1])

    visit(model)
    return count


def enable_fast_kernels(model) -> int:
    """On CPU, put in the place of every Dropout, MultiHeadAttention, LayerNorm, Linear and TransformerEncoderLayer
    of ``model`` (of exactly Paddle's class) the fast version above; return the number of layers replaced (0 on other
    devices)."""
    if not paddle.get_device().startswith("cpu"):
        return 0
    library()  # build now, not inside the first step
    return replace_layers(model, lambda layer: built_from(SWAPS[type(layer)], layer) if type(layer) in SWAPS else None)


class Recomputed:
    """Mixed into an encoder layer's class before it: in training, its forward runs under ``recompute`` (a function
    called as ``recompute(forward, *args, **kwargs)`` that keeps no activations and computes them again in the
    backward pass), given when the layer is built (``recomputing``)."""

    recompute = None

    def forward(self, *args, **kwargs):
        if self.training and self.recompute is not None and kwargs.get("cache") is None:
            kwargs.pop("cache", None)
            return self.recompute(super().forward, *args, **kwargs)
        return super().forward(*args, **kwargs)


class RecomputedEncoderLayer(Recomputed, paddle.nn.TransformerEncoderLayer):
    """Paddle's encoder layer, recomputed."""


class RecomputedFastEncoderLayer(Recomputed, FastEncoderLayer):
    """``FastEncoderLayer``, recomputed."""


def recomputing(layer: paddle.nn.Layer, recompute) -> paddle.nn.Layer | None:
    """A ``Recomputed`` layer in ``layer``'s place, running ``recompute``: of the class declared for ``layer``'s
    exact class (``RecomputedEncoderLayer``, ``RecomputedFastEncoderLayer``, ``first_token.RecomputedFirstTokenLayer``:
    the subclasses of ``Recomputed`` whose next base is that class); None for a layer already recomputed or of a
    class without one."""
    if isinstance(layer, Recomputed):
        return None
    for cls in Recomputed.__subclasses__():
        if cls.__bases__[1:] == (type(layer),):
            new = built_from(cls, layer)
            new.recompute = recompute
            return new
    return None
