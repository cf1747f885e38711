"""The relation extractor's model: ERNIE with GPLinker's pointers (Su Jianlin, 2022).

One GlobalPointer finds entities with two heads, subject (head 0) and object (head 1); per relation class c
(``config.num_labels`` of them) a head-head pointer (head 2 + c) scores (subject's first token, object's first
token) and a tail-tail pointer (head 2 + C + c) scores (subject's last token, object's last token). Those two have
no triangle mask: an object may come before its subject. The forward pass returns one tensor [B, 2 + 2C, L, L].
"""

from __future__ import annotations

import paddle
from paddle import nn
from paddlenlp.transformers import ErnieModel, ErniePretrainedModel

from ernie_ft.models.global_pointer import GlobalPointer

ENTITY_HEADS = 2
"""Subject and object."""


class ErnieForRelationExtraction(ErniePretrainedModel):
    """ERNIE, an entity GlobalPointer (subject, object) and a head-head and a tail-tail pointer per relation class."""

    def __init__(self, config):
        super().__init__(config)
        self.ernie = ErnieModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.entities = GlobalPointer(config.hidden_size, ENTITY_HEADS, head_size=64, rope=True)
        pointers = 2 * config.num_labels  # head-head, then tail-tail, per relation class
        self.pointers = GlobalPointer(config.hidden_size, pointers, head_size=64, rope=False, tril_mask=False)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, **kwargs):
        # named inputs, not *args: paddle.jit.to_static (export) matches its InputSpecs to them
        hidden = self.ernie(
            input_ids, token_type_ids=token_type_ids, position_ids=position_ids, attention_mask=attention_mask
        )[0]
        hidden = self.dropout(hidden)
        mask = input_ids != self.config.pad_token_id
        return paddle.concat([self.entities(hidden, mask), self.pointers(hidden, mask)], axis=1)
