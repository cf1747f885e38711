"""GlobalPointer (Su Jianlin, 2021): a score for every (start, end) token pair per head, and its loss.

Each head (an entity type for nested NER; a subject/object or a predicate's head/tail for GPLinker)
projects every token to a query and a key of ``head_size`` values; the score of the span (i, j) is
``q_i . k_j / sqrt(head_size)``. ``EfficientGlobalPointer`` (Su, 2022) shares one query and key among
the heads and gives each head a start and an end bias per token instead: far fewer weights when the
heads are many (GPLinker's two pointers per predicate). With ``rope`` the query and key are rotated by
their token's position first (rotary position embedding), so the score knows the span's width. Spans
that end before they start or touch padding get ``MASKED``, far below any learned score, so a decode
that keeps every score > 0 never picks them.

``global_pointer_loss`` is the multi-label categorical cross-entropy ("global pointer loss"): per
batch row and head, ``log(1 + sum_neg e^s) + log(1 + sum_pos e^-s)``, which pushes every gold span
above 0 and every other span below 0 without a class-balance weight.

Three names here are a stable interface shared with the relation extractor: ``GlobalPointer``,
``EfficientGlobalPointer`` and ``global_pointer_loss``. ``ErnieGlobalPointer`` is ERNIE with a
``GlobalPointer``, the model of ``ner --nested``.
"""

from __future__ import annotations

import math

import paddle
from paddle import nn
from paddlenlp.transformers import ErnieModel, ErniePretrainedModel

HEAD_SIZE = 64
"""The query and key width of ``ErnieGlobalPointer``'s head (Su's default)."""
MASKED = -1e12
"""The logit of a span that cannot be an answer (end before start, or a padded token)."""


def rotary(x, positions):
    """``x`` [B, L, heads, D] rotated by rotary position embeddings of ``positions`` [L] (D even)."""
    dim = x.shape[-1]
    inv_freq = paddle.exp(paddle.arange(0, dim // 2, dtype="float32") * (-2.0 * math.log(10000.0) / dim))
    angles = positions.astype("float32").unsqueeze(-1) * inv_freq.unsqueeze(0)  # [L, D/2]
    # each angle for both members of its pair (2k, 2k+1): [1, L, 1, D]. The cosine and sine are taken of this one
    # tensor: with two separate pairwise copies (of cos and of sin), Paddle Inference 3.3 computed the exported
    # model's scores wrongly (up to 17 off the dygraph ones; ONNX Runtime was right)
    paired = paddle.stack([angles, angles], axis=-1).reshape([1, -1, 1, dim]).astype(x.dtype)
    halves = x.reshape([0, 0, 0, dim // 2, 2])  # (x_2k, x_2k+1) -> (-x_2k+1, x_2k)
    pairs = paddle.stack([-halves[..., 1], halves[..., 0]], axis=-1).reshape([0, 0, 0, dim])
    return x * paddle.cos(paired) + pairs * paddle.sin(paired)


def span_mask(logits, mask, tril_mask: bool):
    """``logits`` [B, heads, L, L] with ``MASKED`` where a span touches padding (``mask`` [B, L] is 0) and, with
    ``tril_mask``, where it ends before it starts."""
    length = paddle.shape(logits)[-1]
    valid = mask.astype("bool")
    keep = paddle.logical_and(valid.unsqueeze(1).unsqueeze(-1), valid.unsqueeze(1).unsqueeze(2))  # [B, 1, L, L]
    if tril_mask:
        upper = paddle.triu(paddle.ones([length, length], dtype="float32")).astype("bool")  # j >= i
        keep = paddle.logical_and(keep, upper.unsqueeze(0).unsqueeze(0))
    return paddle.where(keep, logits, paddle.full_like(logits, MASKED))


class GlobalPointer(nn.Layer):
    """Span scores per head: ``forward(hidden [B, L, H], mask [B, L]) -> logits [B, heads, L, L]``.

    ``logits[b, h, i, j]`` scores tokens i..j (inclusive) as a span of head h. ``mask`` is 1 (or True) on
    real tokens and 0 on padding; rows and columns of padded tokens and the lower triangle (j < i) hold
    ``MASKED`` (the triangle only with ``tril_mask``, the default). The logits are float32 whatever the hidden
    states' dtype.
    """

    def __init__(self, hidden_size: int, heads: int, head_size: int = 64, rope: bool = True, tril_mask: bool = True):
        super().__init__()
        self.tril_mask = tril_mask  # False: no triangle masked (GPLinker's head-head and tail-tail pointers)
        if head_size % 2:
            raise ValueError(f"{type(self).__name__}: head_size must be even for rotary embeddings, got {head_size}")
        self.heads, self.head_size, self.rope = heads, head_size, rope
        self.build(hidden_size)

    def build(self, hidden_size: int) -> None:
        self.dense = nn.Linear(hidden_size, self.heads * self.head_size * 2)

    def forward(self, hidden, mask):
        shape = paddle.shape(hidden)
        batch, length = shape[0], shape[1]
        x = self.dense(hidden).astype("float32").reshape([batch, length, self.heads, 2 * self.head_size])
        q, k = x[..., : self.head_size], x[..., self.head_size :]
        if self.rope:
            positions = paddle.arange(0, length, dtype="int64")
            q, k = rotary(q, positions), rotary(k, positions)
        logits = paddle.matmul(q.transpose([0, 2, 1, 3]), k.transpose([0, 2, 3, 1])) / math.sqrt(self.head_size)
        return span_mask(logits, mask, self.tril_mask)


class EfficientGlobalPointer(GlobalPointer):
    """``GlobalPointer``'s scores and masks from fewer weights, for many heads (GPLinker's pointers).

    Su's Efficient GlobalPointer (2022) with the parameters of PaddleNLP's
    ``paddlenlp.layers.globalpointer.GlobalPointer`` (``dense1``, ``dense2``; the same scores: tests compare them):
    one query and key of ``head_size`` shared by all heads (``dense1``, rotated when ``rope``) score every span once,
    and each head adds a start and an end bias per token (``dense2`` on the same projection):
    ``logits[b, h, i, j] = q_i . k_j / sqrt(head_size) + end_h(j) + start_h(i)``. Against one query and key per
    head this projects to 2 x head_size values instead of heads x 2 x head_size, which made GPLinker's 92 pointer
    heads cost ten times the encoder. PaddleNLP's layer is not used as it stands: its rotary slices a position table
    with strided views and it masks by subtracting 1e12 in the logits' dtype (an overflow under float16); here the
    rotation is ``rotary`` (checked against Paddle Inference and ONNX Runtime) and masked spans hold ``MASKED`` in
    float32. With few heads of a small encoder, per-head queries and keys learn more (CMeEE, docs/results.md).
    """

    def build(self, hidden_size: int) -> None:
        self.dense1 = nn.Linear(hidden_size, self.head_size * 2)
        self.dense2 = nn.Linear(self.head_size * 2, self.heads * 2)

    def parts(self, hidden):
        """(queries [B, L, D], keys [B, L, D], biases [B, L, heads, 2]: each head's (end, start) bias per token)."""
        x = self.dense1(hidden).astype("float32")  # [B, L, 2D]: query and key interleaved, as PaddleNLP's
        pairs = x.reshape([0, 0, self.head_size, 2])
        q, k = pairs[..., 0], pairs[..., 1]
        if self.rope:
            positions = paddle.arange(0, paddle.shape(hidden)[1], dtype="int64")
            q, k = rotary(q.unsqueeze(2), positions).squeeze(2), rotary(k.unsqueeze(2), positions).squeeze(2)
        return q, k, (self.dense2(x) / 2).reshape([0, 0, self.heads, 2])

    def products(self, q, k):
        """The heads' shared score of every span, ``q_i . k_j / sqrt(head_size)``: [B, L, L]."""
        return paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.head_size)

    def forward(self, hidden, mask):
        q, k, bias = self.parts(hidden)
        logits = self.products(q, k).unsqueeze(1)  # [B, 1, L, L]
        bias = bias.transpose([0, 2, 3, 1])  # [B, heads, 2, L]
        logits = logits + bias[:, :, 0].unsqueeze(2) + bias[:, :, 1].unsqueeze(3)
        return span_mask(logits, mask, self.tril_mask)

    def cells(self, hidden, index):
        """The scores ``forward`` gives the cells ``index`` [B, K, 2] (token i, token j) of each row, unmasked:
        [B, heads, K]. Training reads a few cells per row; this never builds the [B, heads, L, L] scores."""
        q, k, bias = self.parts(hidden)
        at = lambda x, axis: paddle.take_along_axis(x, index[:, :, axis : axis + 1], axis=1, broadcast=True)  # noqa: E731
        scores = (at(q, 0) * at(k, 1)).sum(-1, keepdim=True) / math.sqrt(self.head_size)  # [B, K, 1]
        ends = paddle.take_along_axis(bias[..., 0], index[:, :, 1:2], axis=1, broadcast=True)  # [B, K, heads]
        starts = paddle.take_along_axis(bias[..., 1], index[:, :, 0:1], axis=1, broadcast=True)
        return (scores + ends + starts).transpose([0, 2, 1])


def global_pointer_loss(logits, targets, sum_heads: bool = False):
    """Mean over batch rows and heads of the multi-label categorical cross-entropy of ``logits`` [B, heads, L, L]
    against 0/1 ``targets`` of the same shape (1: the span is gold for that head); with ``sum_heads``, summed over
    heads and averaged over rows (GPLinker's reduction: each of 46 predicates' pointers then weighs on the encoder
    as much as one entity type, where a mean would divide their gradient by the number of predicates).

    Per row and head, with s the scores: ``log(1 + sum over non-gold e^s) + log(1 + sum over gold e^-s)``. Targets
    must be 0 where the logits are ``MASKED`` (a gold span there would cost about 1e12).
    """
    shape = paddle.shape(logits)
    scores = logits.astype("float32").reshape([shape[0] * shape[1], -1])
    gold = targets.astype("float32").reshape([shape[0] * shape[1], -1])
    scores = (1 - 2 * gold) * scores  # gold spans' scores negated: both terms then penalise large values
    negative = scores - gold * 1e12  # gold spans out of the negative term
    positive = scores - (1 - gold) * 1e12  # everything but the gold spans out of the positive term
    zeros = paddle.zeros_like(scores[:, :1])  # the 1 in log(1 + ...)
    negative = paddle.logsumexp(paddle.concat([negative, zeros], axis=-1), axis=-1)
    positive = paddle.logsumexp(paddle.concat([positive, zeros], axis=-1), axis=-1)
    loss = negative + positive
    return loss.sum() / shape[0].astype(loss.dtype) if sum_heads else loss.mean()


class ErnieGlobalPointer(ErniePretrainedModel):
    """ERNIE with a ``GlobalPointer`` over its last hidden states, one head per label (``config.num_labels``).

    ``forward`` returns the span logits [B, num_labels, L, L]; padding is read from ``input_ids`` (the config's
    ``pad_token_id``), as ERNIE's own attention mask is. The head's weights sit under ``global_pointer.``, the
    encoder's under ``ernie.`` as in every PaddleNLP ERNIE model, so a pretrained checkpoint loads into it.
    """

    def __init__(self, config):
        super().__init__(config)
        self.ernie = ErnieModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.global_pointer = GlobalPointer(config.hidden_size, config.num_labels, HEAD_SIZE)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, **kwargs):
        # named inputs, not *args: paddle.jit.to_static (export) matches its InputSpecs to them
        hidden = self.ernie(
            input_ids, token_type_ids=token_type_ids, position_ids=position_ids, attention_mask=attention_mask
        )[0]
        return self.global_pointer(self.dropout(hidden), input_ids != self.config.pad_token_id)
