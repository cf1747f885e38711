"""The relation extractor's model: ERNIE with GPLinker's pointers (Su Jianlin, 2022).

One GlobalPointer finds entities with two heads, subject (head 0) and object (head 1); per relation class c
(``config.num_labels`` of them) a head-head pointer (head 2 + c) scores (subject's first token, object's first
token) and a tail-tail pointer (head 2 + C + c) scores (subject's last token, object's last token). The pointers
have no triangle mask (an object may come before its subject) and no rotary embedding; each is an
``EfficientGlobalPointer`` (one query and key for all its C heads, a start and end bias per head: with a query and
key per head the two would project each token to 4 x C x 64 values, ten times a 2 x 128 encoder's work), two of
them as first and last tokens need different queries and keys. The forward pass returns one tensor
[B, 2 + 2C, L, L].
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
        """The scores [B, 2 + 2C, L, L]; with ``pair_index`` [B, 2, K, 2] (training: the head-head and the tail-tail
        cells the loss reads, ``relation.task.training_targets``) a dict of the entity scores [B, 2, L, L] and the
        pointers' scores of those cells alone, [B, 2C, K] (the head-head ones first), in place of 2C x L x L."""
        # named inputs, not *args: paddle.jit.to_static (export) matches its InputSpecs to them
        hidden = self.ernie(
            input_ids, token_type_ids=token_type_ids, position_ids=position_ids, attention_mask=attention_mask
        )[0]
        hidden = self.dropout(hidden)
        mask = input_ids != self.config.pad_token_id
        if pair_index is not None:
            pointers = [self.heads.cells(hidden, pair_index[:, 0]), self.tails.cells(hidden, pair_index[:, 1])]
            return {"entities": self.entities(hidden, mask), "pointers": paddle.concat(pointers, axis=1)}
        return paddle.concat([layer(hidden, mask) for layer in (self.entities, self.heads, self.tails)], axis=1)
