"""Nested NER (``ner --nested``): the GlobalPointer head and its loss, readers, decoding, and the command line."""

import numpy as np
import pytest

from ernie_ft.models.global_pointer import MASKED, GlobalPointer, global_pointer_loss


def numpy_loss(logits: np.ndarray, targets: np.ndarray) -> float:
    """The multi-label categorical cross-entropy written out per row and head: log(1 + sum_neg e^s) +
    log(1 + sum_pos e^-s), over the positions that are not masked."""
    width = logits.shape[-2] * logits.shape[-1]
    losses = []
    for scores, gold in zip(logits.reshape(-1, width), targets.reshape(-1, width)):
        unmasked = scores > MASKED / 2
        negative, positive = scores[unmasked & (gold == 0)], scores[unmasked & (gold == 1)]
        losses.append(np.log1p(np.exp(negative).sum()) + np.log1p(np.exp(-positive).sum()))
    return float(np.mean(losses))


def small_pointer(seed=0, heads=3, rope=True):
    import paddle

    paddle.seed(seed)
    pointer = GlobalPointer(16, heads, head_size=8, rope=rope)
    hidden = paddle.randn([2, 6, 16])
    mask = paddle.to_tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    return pointer, hidden, mask


def test_global_pointer_loss_equals_numpy_and_rewards_gold_spans():
    import paddle

    pointer, hidden, mask = small_pointer()
    logits = pointer(hidden, mask)
    assert logits.shape == [2, 3, 6, 6] and str(logits.dtype).endswith("float32")
    targets = np.zeros((2, 3, 6, 6), dtype="float32")
    targets[0, 1, 0, 2] = targets[0, 1, 1, 2] = targets[0, 2, 0, 2] = targets[1, 0, 1, 3] = 1  # nested, two types
    loss = float(global_pointer_loss(logits, paddle.to_tensor(targets)))
    assert loss == pytest.approx(numpy_loss(logits.numpy(), targets), rel=1e-5)
    # the gold spans' logits raised by 5: the loss drops; the non-gold ones raised instead: it grows
    up = paddle.to_tensor(targets * 5.0)
    assert float(global_pointer_loss(logits + up, paddle.to_tensor(targets))) < loss
    others = paddle.to_tensor((1 - targets) * 5.0 * (logits.numpy() > MASKED / 2))
    assert float(global_pointer_loss(logits + others, paddle.to_tensor(targets))) > loss


@pytest.mark.parametrize("rope", [True, False])
def test_masked_positions_never_win(rope):
    pointer, hidden, mask = small_pointer(seed=3, rope=rope)
    logits = pointer(hidden * 50.0, mask).numpy()  # large hidden states: large scores either way
    lower = np.tril(np.ones((6, 6), dtype=bool), -1)
    padded = ~np.outer(mask.numpy()[1], mask.numpy()[1]).astype(bool)
    assert (logits[:, :, lower] == MASKED).all()
    assert (logits[1][:, padded] == MASKED).all()
    open_ = logits[logits > MASKED]
    assert np.abs(open_).max() < 1e9 and (open_ > 0).any()  # some span wins at threshold 0, never a masked one


def test_rotary_scores_depend_on_relative_positions_only():
    """With RoPE, q_i . k_j depends on i - j: the same token repeated scores the same at every equal offset."""
    import paddle

    pointer, _, _ = small_pointer(seed=5, heads=1)
    hidden = paddle.tile(paddle.randn([1, 1, 16]), [1, 6, 1])
    logits = pointer(hidden, paddle.ones([1, 6])).numpy()[0, 0]
    for offset in range(6):
        diagonal = np.diagonal(logits, offset)
        assert np.allclose(diagonal, diagonal[0], atol=1e-4)
    assert not np.allclose(np.diagonal(logits, 0)[0], np.diagonal(logits, 3)[0])
