"""A linear-chain CRF on ERNIE's token logits: the model class and its loss. The decode that only yields valid BIO
sequences is ``models.viterbi`` (numpy, so that running an export needs no Paddle).

The likelihood is written here rather than taken from PaddleNLP 2.8.1's ``LinearChainCrf``: its
normaliser reads the transition matrix as [to, from] while its gold-path score reads [from, to],
so the loss is not a likelihood unless the matrix is symmetric (it can go negative, which
``LinearChainCrfLoss`` hides with a relu; PaddleNLP issue #1401). The test compares this loss
with a brute-force sum over every tag path.
"""

from __future__ import annotations

import numpy as np
import paddle
from paddlenlp.transformers import ErnieForTokenClassification


class ErnieCrfForTokenClassification(ErnieForTokenClassification):
    """ERNIE's token classifier plus tag-transition scores ``crf_transitions[from, to]``.

    The transitions live in the model so that the checkpoint, the optimizer and data-parallel
    gradient averaging treat them like any other weight; the forward pass still returns the
    per-token emission logits, so PaddleNLP's ``ErnieForTokenClassification`` loads the
    checkpoint too (it ignores the transitions).
    """

    def __init__(self, config):
        super().__init__(config)
        self.crf_transitions = self.create_parameter(
            [config.num_labels, config.num_labels], default_initializer=paddle.nn.initializer.Constant(0.0)
        )

    def forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, **kwargs):
        # named inputs, not *args: paddle.jit.to_static (export) matches its InputSpecs to them
        logits = super().forward(
            input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            **kwargs,
        )
        if not isinstance(logits, paddle.Tensor):
            return logits
        # The loss reads the transitions after forward; tying them into the forward graph (adding
        # zero) is what lets paddle.DataParallel see them as used and average their gradients.
        return logits + 0.0 * self.crf_transitions.sum()


def labelled_positions(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a padded [batch, tokens] label array with -100 on ignored tokens: (index [batch, K],
    gold tags [batch, K], lengths [batch]) of the labelled tokens, left-aligned and zero-padded."""
    mask = labels != -100
    lengths = mask.sum(axis=1)
    index = np.zeros((len(labels), max(int(lengths.max(initial=0)), 1)), dtype="int64")
    gold = np.zeros_like(index)
    for row, m in enumerate(mask):
        positions = np.flatnonzero(m)
        index[row, : len(positions)] = positions
        gold[row, : len(positions)] = labels[row, positions]
    return index, gold, lengths


def sequence_nll(emissions, gold: np.ndarray, lengths: np.ndarray, transitions):
    """Negative log-likelihood of each row's gold path: emissions [B, K, T], gold [B, K], lengths [B] >= 1."""
    batch, steps, tags = emissions.shape
    mask = paddle.to_tensor((np.arange(steps)[None, :] < lengths[:, None]).astype("float32"))
    score = (paddle.take_along_axis(emissions, paddle.to_tensor(gold)[:, :, None], axis=2)[:, :, 0] * mask).sum(1)
    if steps > 1:
        moves = paddle.to_tensor((gold[:, :-1] * tags + gold[:, 1:]).reshape(-1))
        score += (paddle.gather(transitions.flatten(), moves).reshape([batch, steps - 1]) * mask[:, 1:]).sum(1)
    alpha = emissions[:, 0]  # log-sum of every path's score up to step k, per last tag
    for k in range(1, steps):
        step = paddle.logsumexp(alpha[:, :, None] + transitions[None], axis=1) + emissions[:, k]
        alpha = mask[:, k : k + 1] * step + (1 - mask[:, k : k + 1]) * alpha
    return paddle.logsumexp(alpha, axis=1) - score


def crf_loss(transitions, logits, labels):
    """Mean negative log-likelihood of the gold tags on the labelled tokens of each row.

    Continuation pieces, [CLS]/[SEP] and padding (label -100) are taken out first, so the
    transitions link consecutive characters/words, as in decoding.
    """
    index, gold, lengths = labelled_positions(labels.numpy())
    rows = np.broadcast_to(np.arange(len(index))[:, None], index.shape)
    emissions = paddle.gather_nd(logits.astype("float32"), paddle.to_tensor(np.stack([rows, index], axis=-1)))
    nll = sequence_nll(emissions, gold, np.maximum(lengths, 1), transitions)
    used = (lengths > 0).astype("float32")
    return (nll * paddle.to_tensor(used)).sum() / max(float(used.sum()), 1.0)
