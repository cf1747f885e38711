"""Cheaper CPU kernels swapped into a model by class, keeping its parameters and their names.

Paddle 3.3 draws CPU dropout masks element by element: about 15 % of an ERNIE-nano training
step, most of it in the dropout of the attention probabilities ([batch, heads, length, length]).
``enable_fast_dropout`` makes every dropout of the model draw its mask from numpy's generator
(16-bit integers against a threshold, so the keep probability is exact to 1/65536) and multiply,
which is what Paddle's ``upscale_in_train`` dropout computes. Each mask's seed is drawn from
Paddle's generator, so ``paddle.seed``, resumable checkpoints and recompute (which replays Paddle's
random state) see the same masks. On GPU Paddle's own dropout runs.
"""
from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.nn.layer.transformer import _convert_attention_mask

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
    mask = (bits >= threshold).astype(np.float32) * np.float32(_LEVELS / (_LEVELS - threshold))
    return x * paddle.to_tensor(mask, dtype=x.dtype)


class FastDropout(paddle.nn.Dropout):
    def forward(self, x):
        if self.mode != "upscale_in_train" or self.axis is not None:
            return super().forward(x)
        return dropout(x, self.p, self.training)


class FastAttention(paddle.nn.MultiHeadAttention):
    """Paddle's MultiHeadAttention (self-attention, no cache) with the fast dropout on its weights."""

    def forward(self, query, key=None, value=None, attn_mask=None, cache=None):
        if cache is not None or self.need_weights or not (key is None or key is query) \
                or not (value is None or value is query):
            return super().forward(query, key, value, attn_mask, cache)
        q, k, v = self._prepare_qkv(query, query, query, None)
        product = paddle.matmul(x=q * (self.head_dim ** -0.5), y=k, transpose_y=True)
        if attn_mask is not None:
            product = product + _convert_attention_mask(attn_mask, product.dtype)
        weights = dropout(F.softmax(product), self.dropout, self.training)
        out = paddle.matmul(weights, v).transpose([0, 2, 1, 3])
        return self.out_proj(out.reshape([0, 0, out.shape[2] * out.shape[3]]))


def enable_fast_dropout(model) -> int:
    """Swap every plain Dropout and MultiHeadAttention of ``model`` for the versions above.

    Returns the number of layers swapped.
    """
    swaps = {paddle.nn.Dropout: FastDropout, paddle.nn.MultiHeadAttention: FastAttention}
    layers = [layer for layer in model.sublayers() if type(layer) in swaps]
    for layer in layers:
        layer.__class__ = swaps[type(layer)]
    return len(layers)
