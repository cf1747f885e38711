"""ELECTRA's replaced-token detection on ERNIE (``python -m ernie_ft.pretrain --objective electra``).

A small generator (an ``ErnieForMaskedLM`` of the same width with a third of the layers) fills the
masked positions by sampling from its own predictions; the discriminator, a plain ``ErnieModel``
under ``ernie.*`` with a one-logit head per token, learns which tokens were replaced, from every
token rather than from the 15% masked. Both share the embeddings, as ELECTRA and ERNIE-Health do.
The discriminator is what the tasks load: ``ErnieForSequenceClassification.from_pretrained(dir)``
takes ``ernie.*`` and leaves ``generator.*`` unused.
"""

from __future__ import annotations

import copy

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddlenlp.transformers import ErnieForMaskedLM, ErnieModel
from paddlenlp.transformers.ernie.modeling import ErniePretrainedModel

DISCRIMINATOR_WEIGHT = 50.0
"""ELECTRA's weight of the replaced-token loss against the generator's MLM loss."""


class ErnieElectra(ErniePretrainedModel):
    base_model_prefix = "ernie"

    def __init__(self, config):
        super().__init__(config)
        self.ernie = ErnieModel(config)
        self.discriminator = nn.Sequential(
            nn.Linear(config.hidden_size, config.hidden_size), nn.GELU(), nn.Linear(config.hidden_size, 1)
        )
        small = copy.deepcopy(config)
        small.num_hidden_layers = max(1, config.num_hidden_layers // 3)
        self.generator = ErnieForMaskedLM(small)
        self.generator.ernie.embeddings = self.ernie.embeddings  # shared, and the output projection tied to them
        self.generator.cls.predictions.decoder.weight = self.ernie.embeddings.word_embeddings.weight

    def get_output_embeddings(self):
        """The generator's projection, tied to the shared word embeddings (``resize_token_embeddings`` grows both)."""
        return self.generator.cls.predictions.decoder

    def forward(
        self,
        input_ids,
        token_type_ids=None,
        position_ids=None,
        masked_positions=None,
        original_ids=None,
        replace_uniform=None,
    ):
        """The generator's logits at ``masked_positions``; with ``original_ids`` (the unmasked input) and
        ``replace_uniform`` (one number in [0, 1) per masked position, drawn with the masks) also a sample
        from them put in place of the originals, and the discriminator's per-token logits on that:
        {"generator", "discriminator", "replaced"}."""
        generated = self.generator(
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            masked_positions=masked_positions,
        )
        if original_ids is None:
            return generated
        with paddle.no_grad():
            replaced = self._replace(generated, original_ids, masked_positions, replace_uniform)
        hidden = self.ernie(replaced, token_type_ids=token_type_ids, position_ids=position_ids)[0]
        return {"generator": generated, "discriminator": self.discriminator(hidden).squeeze(-1), "replaced": replaced}

    def _replace(self, generated, original_ids, masked_positions, replace_uniform):
        """``original_ids`` with a sample from the generator at each masked position, by inverse CDF from
        the uniforms (so a function of (seed, epoch, block)). On a tensor-parallel mesh it runs on whole
        local tensors (Paddle 3.3 has no distributed cumsum) and the result is laid out like the input."""
        layout = (original_ids.process_mesh, original_ids.placements) if original_ids.is_dist() else None
        if layout is not None:
            import paddle.distributed as dist

            generated, original_ids, masked_positions, replace_uniform = (
                dist.unshard_dtensor(t) for t in (generated, original_ids, masked_positions, replace_uniform)
            )
        logits = generated.astype("float32").clone()  # not the tensor the MLM loss reads
        logits[:, self.config.pad_token_id] = -1e9  # a sampled [PAD] would be masked out of the attention
        cdf = paddle.cumsum(F.softmax(logits, axis=-1), axis=-1)
        sampled = (cdf < replace_uniform.unsqueeze(-1)).astype("int64").sum(axis=-1).clip(max=logits.shape[-1] - 1)
        replaced = paddle.scatter(original_ids.flatten(), masked_positions, sampled).reshape(original_ids.shape)
        return replaced if layout is None else dist.shard_tensor(replaced, *layout)
