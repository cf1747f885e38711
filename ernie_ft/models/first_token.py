"""Sequence classification reads one row of the encoder's output: token 0's ([CLS], the pooler's input). The last
encoder layer needs every token's keys and values, but its query, attention output, feed-forward network and layer
norms only for token 0. ``ErnieForSequenceClassification`` here is PaddleNLP's with an encoder that computes no
more: the same parameters, names, config and logits, so its checkpoints load in plain PaddleNLP and PaddleNLP's load
here. Of the 12 h^2 multiply-adds a layer spends per token, the last layer keeps 2 h^2 (keys and values) for every
token but the first: a fifth of the encoder's work on the 4-layer nano shape, in training (forward and backward)
and in every engine an export runs, since the exported graph is this forward.

The last layer is a ``FirstTokenLayer``: a subclass of Paddle's encoder layer holding PaddleNLP's sublayers (so the
parameter names stay ``ernie.encoder.layers.N.*``), called as a layer with every token's states and asked for
token 0's row. Being called, it runs what a layer's call runs: forward pre-hooks see and may replace every token's
input, as on PaddleNLP's classifier; forward post-hooks see and may replace [CLS]'s output row, [batch, 1, hidden],
which is all the pooler reads; ``--recompute`` (``training.runtime.enable_recompute``) puts a
``RecomputedFirstTokenLayer`` in its place, which recomputes this forward in the backward pass. The alternative,
turning the shortcut off when the layer has hooks or recompute, was not taken: Paddle lists a layer's hooks only in
private attributes, and a recompute run would then draw other dropout masks than the same run without recompute and
lose the speed. The one difference:
``enable_fast_kernels`` replaces Paddle's encoder layers of exactly Paddle's class, so it leaves this layer's forward
as it is (its linears, norms, dropouts and attention are replaced; the fused post-norm would gain nothing on one
row).

Whoever needs every token's last hidden state gets them: ``every_token(model)`` (hidden-state transfer in
distillation), or the arguments that ask for them (``output_hidden_states``, ``return_dict``, a cache), which
PaddleNLP's encoder answers.
"""

from __future__ import annotations

import paddle
from paddlenlp.transformers import ErnieForSequenceClassification as _PaddleNLPSequenceClassifier

from ernie_ft.models.fast_layers import Recomputed, additive_mask

__all__ = [
    "ErnieForSequenceClassification",
    "FirstTokenEncoder",
    "FirstTokenLayer",
    "RecomputedFirstTokenLayer",
    "additive_mask",
    "every_token",
]


def _first_row(x):
    """``x[:, :1]``, copied where Paddle makes it a strided view: under recompute, Paddle 3.3 hands a PyLayer (the
    fast kernels' Linear) wrong values for a view it saved, and the query's gradients came out wrong."""
    row = x[:, :1]
    return row.contiguous() if paddle.in_dynamic_mode() and not row.is_contiguous() else row


class FirstTokenLayer(paddle.nn.TransformerEncoderLayer):
    """Paddle's encoder layer holding another layer's sublayers, which with ``first_token_only=True`` returns token
    0's output row alone, [batch, 1, hidden]: attention from token 0's query to every token's key and value (the
    mask masks padded keys), then the residual, norms and feed-forward network on that one row, equal to
    ``layer(src, src_mask)[:, :1]``. Without it, the layer's own forward on every row."""

    def __init__(self, layer: paddle.nn.TransformerEncoderLayer):
        paddle.nn.Layer.__init__(self)  # not Paddle's constructor, which would build new weights: ``layer``'s
        for name, sublayer in layer.named_children():  # in their order, under their names
            setattr(self, name, sublayer)
        self.normalize_before = layer.normalize_before
        self.activation = layer.activation
        self.training = layer.training

    def forward(self, src, src_mask=None, *args, first_token_only: bool = False, **kwargs):
        if not first_token_only:
            return super().forward(src, src_mask, *args, **kwargs)
        src_mask = additive_mask(src_mask, src.dtype)
        query = _first_row(src)
        if self.normalize_before:
            normed = self.norm1(src)
            x = query + self.dropout1(self._attend(_first_row(normed), normed, src_mask))
            return x + self.dropout2(self._feed_forward(self.norm2(x)))
        x = self.norm1(query + self.dropout1(self._attend(query, src, src_mask)))
        return self.norm2(x + self.dropout2(self._feed_forward(x)))

    def _attend(self, query, keys, mask):
        attended = self.self_attn(query, keys, keys, mask)
        # a tuple when an earlier call asked PaddleNLP's layer for its attentions (it leaves ``need_weights`` on)
        return attended[0] if isinstance(attended, tuple) else attended

    def _feed_forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class RecomputedFirstTokenLayer(Recomputed, FirstTokenLayer):
    """``FirstTokenLayer``, recomputed (``--recompute``): the [CLS] row's forward runs again in the backward pass."""


class FirstTokenEncoder(paddle.nn.TransformerEncoder):
    """An encoder over ``layers`` (kept as they are, the last one held by a ``FirstTokenLayer``) whose output is
    token 0's row only, [batch, 1, hidden], unless ``first_token`` is False or the caller asks for more (every
    layer's states, attentions, a cache, a dict), which Paddle's encoder (as PaddleNLP extends it) answers."""

    first_token = True
    _use_cache = False
    """PaddleNLP's ``ErnieModel`` sets it before each call: True asks for a new cache."""

    def __init__(self, layers, norm=None):
        *body, last = layers
        last = last if isinstance(last, FirstTokenLayer) else FirstTokenLayer(last)
        super().__init__(last, 1, norm)  # Paddle's constructor builds copies of a layer; this encoder holds these
        self.layers = paddle.nn.LayerList([*body, last])
        self.num_layers = len(self.layers)

    def forward(self, src, src_mask=None, cache=None, **options):
        asks_for_more = cache is not None or self._use_cache or any(options.values())
        if not self.first_token or asks_for_more or self.norm is not None:
            return super().forward(src, src_mask, cache, **options)
        src_mask = additive_mask(src_mask, src.dtype)
        for i in range(len(self.layers) - 1):
            src = self.layers[i](src, src_mask=src_mask)
        return self.layers[len(self.layers) - 1](src, src_mask=src_mask, first_token_only=True)


class ErnieForSequenceClassification(_PaddleNLPSequenceClassifier):
    """PaddleNLP's ``ErnieForSequenceClassification`` (same name, so checkpoints record the same architecture)
    with a ``FirstTokenEncoder`` over its encoder's layers: the logits are the same function of the same weights."""

    def __init__(self, config):
        super().__init__(config)
        encoder = self.ernie.encoder
        self.ernie.encoder = FirstTokenEncoder(list(encoder.layers), encoder.norm)


def every_token(model) -> None:
    """Make ``model``'s encoder compute every token's last hidden state again (distillation's hidden-state
    transfer compares them all)."""
    for layer in model.sublayers():
        if isinstance(layer, FirstTokenEncoder):
            layer.first_token = False
