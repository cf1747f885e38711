"""The trainer's AdamW (``run.build_optimizer``) updates as Paddle's AdamW with its usual global-norm clipping."""

import numpy as np
import paddle
import pytest

from ernie_ft.config import TrainConfig
from ernie_ft.training.run import build_optimizer


def trained_weights(make_optimizer, steps: int = 6) -> dict:
    """A small two-layer net (with a LayerNorm, which takes no weight decay) after ``steps`` updates on fixed data."""
    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.LayerNorm(16), paddle.nn.Linear(16, 2))
    optimizer = make_optimizer(net)
    x, y = paddle.randn([32, 8]), paddle.randint(0, 2, [32])
    for _ in range(steps):
        paddle.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
    return {name: p.numpy() for name, p in net.named_parameters()}


@pytest.mark.parametrize("max_norm", [1e-3, 1e3], ids=["clipped every step", "never clipped"])
def test_updates_equal_adamw_with_plain_global_norm_clipping(max_norm):
    tc = TrainConfig(lr=1e-2, max_grad_norm=max_norm, weight_decay=0.01)

    def reference(net):
        decay = {p.name for n, p in net.named_parameters() if not any(s in n for s in ("bias", "norm"))}
        return paddle.optimizer.AdamW(
            learning_rate=tc.lr,
            parameters=net.parameters(),
            weight_decay=tc.weight_decay,
            epsilon=tc.adam_epsilon,
            apply_decay_param_fun=lambda name: name in decay,
            grad_clip=paddle.nn.ClipGradByGlobalNorm(max_norm),
        )

    ours, expected = trained_weights(lambda net: build_optimizer(net, tc, tc.lr)), trained_weights(reference)
    for name in expected:  # the same operations on the same numbers: equal to the bit, tolerance 0
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)
    unclipped = trained_weights(lambda net: build_optimizer(net, TrainConfig(lr=1e-2, max_grad_norm=0), tc.lr))
    assert (max_norm < 1) == any(not np.array_equal(unclipped[n], expected[n]) for n in expected)  # clipping bites
