"""The relation extractor's model: ERNIE with GPLinker's pointers (Su Jianlin, 2022).

One GlobalPointer finds entities with two heads, subject (head 0) and object (head 1); per relation class c
(``config.num_labels`` of them) a head-head pointer (head 2 + c) scores (subject's first token, object's first
token) and a tail-tail pointer (head 2 + C + c) scores (subject's last token, object's last token). The pointers
have no triangle mask (an object may come before its subject) and no rotary embedding; each is an
``EfficientGlobalPointer`` (one query and key for all its C heads, a start and end bias per head: with a query and
key per head the two would project each token to 4 x C x 64 values, ten times a 2 x 128 encoder's work), two of
them as first and last tokens need different queries and keys.

Outside training the forward pass returns one packed tensor [B, L, 4L + 4C], row i of each input holding what
token i scores (``packed``): the entity scores of the spans starting there (subject then object, L each, masked
as ``GlobalPointer`` masks), the head-head and then the tail-tail pointer's shared score ``q_i . k_j / sqrt(d)``
of every token j (L each, unmasked), and the head-head and then the tail-tail pointer's per-class biases of the
token (C x (end, start) each). A pointer's score of class c is ``shared[i, j] + end_c(j) + start_c(i)``, the sums
its dense [C, L, L] scores hold; ``relation.decoding.packed_rows`` adds them for the pairs of entities found, in
that order (the same float32 values). The previous version returned the dense scores [B, 2 + 2C, L, L] (``dense``,
98 x L x L floats a window for 48 classes, against 4 x L x L + 192 x L); the decoder reads both (a 4-D output is
the dense one), so older exports still run.
"""

from __future__ import annotations

import paddle
from paddle import nn
from paddlenlp.transformers import ErnieModel, ErniePretrainedModel

from ernie_ft.models.global_pointer import EfficientGlobalPointer, GlobalPointer

ENTITY_HEADS = 2
"""Subject and object."""


class ErnieForRelationExtraction(ErniePretrainedModel):
    """ERNIE, an entity GlobalPointer (subject, object) and a head-head and a tail-tail pointer per relation class."""

    def __init__(self, config):
        super().__init__(config)
        self.ernie = ErnieModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.entities = GlobalPointer(config.hidden_size, ENTITY_HEADS, head_size=64, rope=True)
        pointer = dict(hidden_size=config.hidden_size, heads=config.num_labels, rope=False, tril_mask=False)
        self.heads, self.tails = EfficientGlobalPointer(**pointer), EfficientGlobalPointer(**pointer)

    def forward(
        self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, pair_index=None, **kwargs
    ):
        """The packed scores [B, L, 4L + 4C] (see the module); with ``pair_index`` [B, 2, K, 2] (training: the
        head-head and the tail-tail cells the loss reads, ``relation.task.training_targets``) a dict of the entity
        scores [B, 2, L, L] and the pointers' scores of those cells alone, [B, 2C, K] (the head-head ones first)."""
        # named inputs, not *args: paddle.jit.to_static (export) matches its InputSpecs to them
        hidden = self.ernie(
            input_ids, token_type_ids=token_type_ids, position_ids=position_ids, attention_mask=attention_mask
        )[0]
        hidden = self.dropout(hidden)
        mask = input_ids != self.config.pad_token_id
        if pair_index is not None:
            pointers = [self.heads.cells(hidden, pair_index[:, 0]), self.tails.cells(hidden, pair_index[:, 1])]
            return {"entities": self.entities(hidden, mask), "pointers": paddle.concat(pointers, axis=1)}
        return self.packed(hidden, mask)

    def packed(self, hidden, mask):
        """[B, L, 4L + 4C]: per token the entity scores of its spans, each pointer's shared scores, their biases."""
        entities = self.entities(hidden, mask).transpose([0, 2, 1, 3]).reshape([0, 0, -1])  # [B, L, 2L]
        shared, biases = [], []
        for pointer in (self.heads, self.tails):
            q, k, bias = pointer.parts(hidden)  # bias [B, L, C, 2]: (end, start) per class
            shared.append(pointer.products(q, k))
            biases.append(bias.reshape([0, 0, -1]))
        return paddle.concat([entities, *shared, *biases], axis=-1)

    def dense(self, hidden, mask):
        """Every head's scores [B, 2 + 2C, L, L]: the previous version's output (and a check of ``packed``)."""
        return paddle.concat([layer(hidden, mask) for layer in (self.entities, self.heads, self.tails)], axis=1)
