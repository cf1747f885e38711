"""The fast CPU dropout: the same function as Paddle's, and a model that computes what it did."""
import numpy as np
import paddle
import pytest
from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

from ernie_ft.kernels import FastAttention, FastDropout, dropout, enable_fast_dropout


def test_dropout_zeroes_the_given_share_and_keeps_the_expectation():
    paddle.seed(0)
    x = paddle.ones([400, 2500])
    y = dropout(x, 0.1).numpy()
    assert abs((y == 0).mean() - 0.1) < 0.002
    assert abs(y.mean() - 1.0) < 0.005
    np.testing.assert_allclose(np.unique(y), [0.0, 65536 / (65536 - 6554)], rtol=1e-6)
    paddle.seed(0)
    np.testing.assert_array_equal(dropout(x, 0.1).numpy(), y)  # reproducible from Paddle's state
    np.testing.assert_array_equal(dropout(x, 0.1, training=False).numpy(), x.numpy())


def test_gradient_flows_through_the_kept_elements_only():
    paddle.seed(1)
    x = paddle.rand([8, 50])
    x.stop_gradient = False
    y = dropout(x, 0.3)
    y.sum().backward()
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.7, rtol=1e-3)


def _model(dropout_prob):
    paddle.seed(5)
    config = ErnieConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=32, type_vocab_size=4, use_task_id=False,
                         num_labels=3, hidden_dropout_prob=dropout_prob, attention_probs_dropout_prob=dropout_prob)
    return ErnieForSequenceClassification(config)


@pytest.mark.parametrize("train_mode,dropout_prob", [(True, 0.0), (False, 0.1)])
def test_swapped_model_computes_the_same_loss_and_gradients(train_mode, dropout_prob):
    ids = paddle.to_tensor(np.random.default_rng(0).integers(5, 60, (4, 11)))
    ids[:, 8:] = 0  # padding, masked in attention
    results = []
    for fast in (False, True):
        model = _model(dropout_prob)
        if fast:
            assert enable_fast_dropout(model) > 0
            assert any(isinstance(m, FastAttention) for m in model.sublayers())
            assert any(isinstance(m, FastDropout) for m in model.sublayers())
        model.train(train_mode)
        loss = paddle.nn.functional.cross_entropy(model(input_ids=ids, token_type_ids=paddle.zeros_like(ids)),
                                                  paddle.to_tensor([0, 1, 2, 1]))
        loss.backward()
        results.append((float(loss), {n: p.grad.numpy() for n, p in model.named_parameters()
                                      if p.grad is not None}))
    assert results[1][0] == pytest.approx(results[0][0], abs=1e-6)
    for name, grad in results[0][1].items():
        np.testing.assert_allclose(results[1][1][name], grad, atol=1e-6, err_msg=name)
