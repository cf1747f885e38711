"""Sequence classification reads one row of the encoder's output: token 0's ([CLS], the pooler's input). The last
encoder layer needs every token's keys and values, but its query, attention output, feed-forward network and layer
norms only for token 0. ``ErnieForSequenceClassification`` here is PaddleNLP's with an encoder that computes no
more: the same parameters, names, config and logits, so its checkpoints load in plain PaddleNLP and PaddleNLP's load
here. Of the 12 h^2 multiply-adds a layer spends per token, the last layer keeps 2 h^2 (keys and values) for every
token but the first: a fifth of the encoder's work on the 4-layer nano shape, in training (forward and backward)
and in every engine an export runs, since the exported graph is this forward.

Whoever needs every token's last hidden state gets them: ``every_token(model)`` (hidden-state transfer in
distillation), or the arguments that ask for them (``output_hidden_states``, ``return_dict``, a cache).
"""

from __future__ import annotations

import paddle
from paddle.nn.layer.transformer import _convert_attention_mask
from paddlenlp.transformers import ErnieForSequenceClassification as _PaddleNLPSequenceClassifier


def first_token_output(layer, src, src_mask=None):
    """The output of the post-norm encoder ``layer`` at token 0 only, [batch, 1, hidden]: attention from token 0's
    query to every key of ``src`` (``src_mask`` masks padded keys), then the residual norms and the feed-forward
    network on that one row. Equal to ``layer(src, src_mask)[:, :1]``."""
    if layer.normalize_before:
        return layer(src, src_mask=src_mask)[:, :1]
    query = src[:, :1]
    attended = layer.self_attn(query, src, src, _convert_attention_mask(src_mask, src.dtype))
    x = layer.norm1(query + layer.dropout1(attended))
    return layer.norm2(x + layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))


class FirstTokenEncoder(paddle.nn.TransformerEncoder):
    """An encoder whose output is token 0's row only, [batch, 1, hidden], unless ``first_token`` is False or the
    caller asks for more (every layer's states, attentions, a cache, a dict), when it is PaddleNLP's encoder."""

    first_token = True

    def forward(
        self, src, src_mask=None, cache=None, output_attentions=False, output_hidden_states=False, return_dict=False
    ):
        if (
            not self.first_token
            or cache is not None
            or getattr(self, "_use_cache", False)
            or output_attentions
            or output_hidden_states
            or return_dict
            or self.norm is not None
        ):
            return super().forward(src, src_mask, cache, output_attentions, output_hidden_states, return_dict)
        src_mask = _convert_attention_mask(src_mask, src.dtype)
        for i in range(len(self.layers) - 1):
            src = self.layers[i](src, src_mask=src_mask)
        return first_token_output(self.layers[len(self.layers) - 1], src, src_mask)


class ErnieForSequenceClassification(_PaddleNLPSequenceClassifier):
    """PaddleNLP's ``ErnieForSequenceClassification`` (same name, so checkpoints record the same architecture)
    with the ``FirstTokenEncoder``: the logits are the same function of the same weights."""

    def __init__(self, config):
        super().__init__(config)
        encoder = self.ernie.encoder
        if type(encoder) is paddle.nn.TransformerEncoder:  # swapped in place: parameter names are unchanged
            encoder.__class__ = FirstTokenEncoder


def every_token(model) -> None:
    """Make ``model``'s encoder compute every token's last hidden state again (distillation's hidden-state
    transfer compares them all)."""
    for layer in model.sublayers():
        if isinstance(layer, FirstTokenEncoder):
            layer.first_token = False
