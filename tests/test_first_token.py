"""The sequence classifier's last layer computed for [CLS] alone: the same logits and gradients as PaddleNLP's
classifier with the same weights, one row through the last feed-forward network, every row where asked for."""

from pathlib import Path

import numpy as np
import paddle
import paddlenlp.transformers as pt
import pytest

from ernie_ft.models.fast_layers import enable_fast_kernels
from ernie_ft.models.first_token import (
    ErnieForSequenceClassification,
    FirstTokenEncoder,
    FirstTokenLayer,
    additive_mask,
    every_token,
)
from ernie_ft.models.modeling import model_class

IDS = [[1, 5, 6, 7, 8, 2, 0, 0, 0], [1, 9, 3, 9, 4, 9, 9, 7, 2], [1, 4, 2, 0, 0, 0, 0, 0, 0]]
"""Three windows of different lengths, padded (pad id 0) to the longest."""


def _pair(dropout: float = 0.0, layers: int = 3):
    """(PaddleNLP's classifier, ours with its weights)."""
    config = pt.ErnieConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        pad_token_id=0,
        num_labels=3,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    paddle.seed(7)
    reference = pt.ErnieForSequenceClassification(config)
    ours = ErnieForSequenceClassification(config)
    ours.set_state_dict(reference.state_dict())
    return reference, ours


def _gradients(model):
    return {name: p.grad.numpy() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("fast", [False, True], ids=["paddle-layers", "fast-kernels"])
@pytest.mark.parametrize("layers", [1, 3])
def test_logits_and_gradients_are_paddlenlps(fast, layers):
    reference, ours = _pair(layers=layers)
    assert type(ours.ernie.encoder) is FirstTokenEncoder and model_class("sequence") is ErnieForSequenceClassification
    if fast:  # every swappable layer of both but ours' last encoder layer, a FirstTokenLayer by construction,
        # whose sublayers are swapped (Paddle's encoder layers are swapped by exact class)
        assert enable_fast_kernels(reference) - 1 == enable_fast_kernels(ours) > 0
        last = ours.ernie.encoder.layers[-1]
        assert type(last) is FirstTokenLayer and all(type(s).__name__.startswith("Fast") for s in last.children())
    ids = paddle.to_tensor(IDS)
    expected, got = reference(input_ids=ids), ours(input_ids=ids)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    (expected * paddle.arange(3, dtype="float32")).sum().backward()
    (got * paddle.arange(3, dtype="float32")).sum().backward()
    want, have = _gradients(reference), _gradients(ours)
    assert set(have) == set(want) and len(want) == len(dict(reference.named_parameters()))
    for name in want:
        np.testing.assert_allclose(have[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_last_layer_computes_one_row_and_every_row_when_asked():
    reference, ours = _pair()
    rows = []
    ours.ernie.encoder.layers[-1].linear1.register_forward_post_hook(lambda layer, inputs, out: rows.append(out.shape))
    ids = paddle.to_tensor(IDS)
    with paddle.no_grad():
        sequence, pooled = ours.ernie(input_ids=ids)
        assert rows == [[3, 1, 64]] and sequence.shape == [3, 1, 32]  # [CLS]'s row alone
        full_reference = reference.ernie(input_ids=ids, output_hidden_states=True, return_dict=True)
        full = ours.ernie(input_ids=ids, output_hidden_states=True, return_dict=True)
        np.testing.assert_allclose(full.last_hidden_state.numpy(), full_reference.last_hidden_state.numpy(), atol=1e-5)
        np.testing.assert_allclose(sequence.numpy(), full_reference.last_hidden_state.numpy()[:, :1], atol=1e-5)
        np.testing.assert_allclose(pooled.numpy(), full_reference.pooler_output.numpy(), atol=1e-5)
        rows.clear()
        every_token(ours)
        sequence, _ = ours.ernie(input_ids=ids)
    assert rows == [[3, 9, 64]] and sequence.shape == [3, 9, 32]
    np.testing.assert_allclose(sequence.numpy(), full_reference.last_hidden_state.numpy(), atol=1e-5)


def test_a_checkpoint_loads_in_paddlenlps_class_and_back(tmp_path):
    reference, ours = _pair()
    ours.save_pretrained(str(tmp_path / "ours"), safe_serialization=True)
    reference.save_pretrained(str(tmp_path / "theirs"), safe_serialization=True)
    ids = paddle.to_tensor(IDS)
    with paddle.no_grad():
        expected = reference(input_ids=ids).numpy()
        for cls, folder in ((pt.ErnieForSequenceClassification, "ours"), (ErnieForSequenceClassification, "theirs")):
            loaded = cls.from_pretrained(str(tmp_path / folder))
            loaded.eval()
            np.testing.assert_allclose(loaded(input_ids=ids).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "ours" / "config.json").read_text().count('"ErnieForSequenceClassification"') == 1


def test_the_exported_graph_runs_the_last_feed_forward_for_one_row_per_window(tmp_path):
    """``export --format onnx`` of a trained classifier: run by ONNX Runtime with each layer's feed-forward input
    made an output, the first layer's has a row per token and the last layer's one row per window (the Paddle
    Inference export is the static graph paddle2onnx converts here)."""
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper

    from ernie_ft.cli import main

    data = Path(__file__).resolve().parents[1] / "data" / "sentiment_train.tsv"
    run, exported = tmp_path / "run", tmp_path / "onnx"
    train = ["classify", "--train", str(data), "--model", "scratch:2x32", "--epochs", "1", "--max-len", "32"]
    assert main([*train, "--output", str(run)]) == 0
    assert main(["export", "--model", str(run), "--output", str(exported), "--format", "onnx"]) == 0
    model = onnx.load(str(exported / "model.onnx"))
    weights = {w.name: numpy_helper.to_array(w).shape for w in model.graph.initializer}
    feed_forward = [
        n.input[0] for n in model.graph.node if n.op_type == "MatMul" and weights.get(n.input[1]) == (32, 128)
    ]
    assert len(feed_forward) == 2, feed_forward
    model.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in feed_forward)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.array([[1, 5, 6, 7, 8, 2, 0], [1, 9, 3, 9, 4, 9, 2]], dtype=np.int64)
    feed = {i.name: ids if i.name == "input_ids" else np.zeros_like(ids) for i in session.get_inputs()}
    first, last = session.run(feed_forward, feed)
    assert first.shape == (2, 7, 32) and last.shape == (2, 1, 32)


def test_recompute_and_dropout_give_the_gradients_of_a_run_without_recompute():
    """``--recompute`` recomputes every layer, the last one's [CLS] row included: with dropout on, the same loss
    and gradients as without recompute, the fused kernels replaying their masks."""
    from ernie_ft.training.runtime import enable_recompute

    ids = paddle.to_tensor(IDS)
    runs = []
    for recompute in (False, True):
        _, model = _pair(dropout=0.1)
        enable_fast_kernels(model)
        if recompute:
            assert enable_recompute(model) == 3
        model.train()
        paddle.seed(3)
        loss = paddle.nn.functional.cross_entropy(model(input_ids=ids), paddle.to_tensor([0, 2, 1]))
        loss.backward()
        runs.append((float(loss), _gradients(model)))
    assert runs[1][0] == runs[0][0]
    assert runs[1][1].keys() == runs[0][1].keys()
    for name, grad in runs[0][1].items():
        np.testing.assert_allclose(runs[1][1][name], grad, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("fast", [False, True], ids=["paddle-layers", "fast-kernels"])
def test_hooks_on_the_last_layer_fire_and_act_as_on_paddlenlps_classifier(fast):
    """A forward pre-hook on the last layer sees every token's input and what it returns is the layer's input (keys
    and values included); a forward post-hook's return is the layer's output, of which ours computes [CLS]'s row:
    the logits are PaddleNLP's with the same hooks, and differ from those without."""
    reference, ours = _pair()
    for model in (reference, ours) if fast else ():
        enable_fast_kernels(model)
    ids = paddle.to_tensor(IDS)
    with paddle.no_grad():
        plain = reference(input_ids=ids).numpy()
    seen = {id(reference): [], id(ours): []}
    scale = paddle.linspace(0.5, 1.5, 32)  # per feature: the keys and values change, not only [CLS]'s query
    for model in (reference, ours):
        calls = seen[id(model)]

        def scale_input(layer, inputs, calls=calls):
            calls.append(inputs[0].shape)
            return (inputs[0] * scale,)

        def shift_output(layer, inputs, out, calls=calls):
            calls.append(out.shape)
            return out * 1.5 + 0.25

        model.ernie.encoder.layers[-1].register_forward_pre_hook(scale_input)
        model.ernie.encoder.layers[-1].register_forward_post_hook(shift_output)
    with paddle.no_grad():
        expected, got = reference(input_ids=ids).numpy(), ours(input_ids=ids).numpy()
    assert seen[id(reference)] == [[3, 9, 32], [3, 9, 32]] and seen[id(ours)] == [[3, 9, 32], [3, 1, 32]]
    assert np.abs(expected - plain).max() > 1e-2  # the hooks change the logits
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(params=[True, False], ids=["strided-views", "copied-slices"])
def slices(request):
    """Slices as Paddle makes them by default (strided views) and as ``runtime.select_device`` sets it on CPU
    (copies), whatever an earlier test in this process set; restored after."""
    flag = "FLAGS_use_stride_kernel"
    before = paddle.get_flags(flag)[flag]
    paddle.set_flags({flag: request.param})
    yield
    paddle.set_flags({flag: before})


@pytest.mark.parametrize("fast", [False, True], ids=["paddle-layers", "fast-kernels"])
def test_recompute_recomputes_the_last_layers_row_with_the_same_logits_and_gradients(fast, slices):
    """``enable_recompute`` (``--recompute``) on our classifier: the last layer's forward for [CLS] runs again in
    the backward pass (its feed-forward sees one row twice), and logits and gradients are those without."""
    from ernie_ft.training.runtime import enable_recompute

    ids = paddle.to_tensor(IDS)
    runs = []
    for recompute in (False, True):
        _, model = _pair()
        if fast:
            enable_fast_kernels(model)
        if recompute:
            assert enable_recompute(model) == 3
        rows = []
        linear1 = model.ernie.encoder.layers[-1].linear1
        linear1.register_forward_post_hook(lambda _, i, out, rows=rows: rows.append(out.shape))
        model.train()
        logits = model(input_ids=ids)
        (logits * paddle.arange(3, dtype="float32")).sum().backward()
        runs.append((logits.numpy(), _gradients(model), rows))
    (logits, grads, rows), (logits_r, grads_r, rows_r) = runs
    assert rows == [[3, 1, 64]] and rows_r == [[3, 1, 64], [3, 1, 64]]
    np.testing.assert_allclose(logits_r, logits, rtol=1e-6, atol=1e-7)
    assert grads_r.keys() == grads.keys() and len(grads) == len(dict(model.named_parameters()))
    for name, grad in grads.items():
        np.testing.assert_allclose(grads_r[name], grad, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("normalize_before", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("mask_dtype", ["bool", "int64", "float32", None])
def test_the_first_token_layer_gives_the_layers_first_row(normalize_before, mask_dtype):
    """``FirstTokenLayer`` asked for token 0 equals Paddle's layer's output row 0, whatever the mask's type (bool
    and int masks: 1 where a key is attended to, as Paddle documents them; float masks: added to the scores)."""
    paddle.seed(11)
    layer = paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, normalize_before=normalize_before)
    layer.eval()
    src = paddle.randn([3, 9, 32])
    keep = paddle.to_tensor(IDS).unsqueeze([1, 2]) != 0
    mask = {
        "bool": keep,
        "int64": keep.astype("int64"),
        "float32": (1.0 - keep.astype("float32")) * -1e4,
        None: None,
    }[mask_dtype]
    with paddle.no_grad():
        expected = layer(src, mask).numpy()[:, :1]
        got = FirstTokenLayer(layer)(src, mask, first_token_only=True).numpy()
        assert FirstTokenLayer(layer)(src, mask).shape == [3, 9, 32]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if mask_dtype is not None:
        additive = additive_mask(mask, paddle.float32).numpy()
        np.testing.assert_array_equal(additive == 0, keep.numpy())
        assert additive.dtype == np.float32 and additive.max() <= 0 and additive.min() <= -1e4


def test_a_call_for_attentions_leaves_the_next_call_computing_one_row():
    """PaddleNLP's layer leaves its attention's ``need_weights`` on after a call that asked for attentions."""
    reference, ours = _pair()
    ids = paddle.to_tensor(IDS)
    with paddle.no_grad():
        ours.ernie(input_ids=ids, output_attentions=True)
        np.testing.assert_allclose(ours(input_ids=ids).numpy(), reference(input_ids=ids).numpy(), atol=1e-5)


def test_the_module_uses_no_private_paddle_function_nor_class_assignment():
    """Built from the classes that run: no ``__class__`` assignment, no ``_convert_attention_mask`` (behaviour: the
    layer and mask tests above); and the classifier's encoder and last layer are of our classes, holding
    PaddleNLP's parameters under PaddleNLP's names."""
    import re

    import ernie_ft.models.first_token as module

    source = Path(module.__file__).read_text()
    assert "_convert_attention_mask" not in source and not re.search(r"__class__\s*=", source)
    assert "paddle.nn.layer.transformer" not in source
    reference, ours = _pair()
    assert type(ours.ernie.encoder) is FirstTokenEncoder and type(ours.ernie.encoder.layers[-1]) is FirstTokenLayer
    assert list(ours.state_dict()) == list(reference.state_dict())


@pytest.mark.parametrize("fast", [False, True], ids=["paddle-layers", "fast-kernels"])
def test_recompute_puts_layers_of_declared_classes_in_place_with_paddlenlps_names(fast):
    """After ``enable_recompute`` (and the fast kernels), each encoder layer is a new layer of the recomputed class
    declared for its class, and the state dict's names are PaddleNLP's classifier's."""
    from ernie_ft.models.fast_layers import RecomputedEncoderLayer, RecomputedFastEncoderLayer
    from ernie_ft.models.first_token import RecomputedFirstTokenLayer
    from ernie_ft.training.runtime import enable_recompute

    reference, ours = _pair()
    if fast:
        enable_fast_kernels(ours)
    before = list(ours.ernie.encoder.layers)
    assert enable_recompute(ours) == 3
    body = RecomputedFastEncoderLayer if fast else RecomputedEncoderLayer
    assert [type(layer) for layer in ours.ernie.encoder.layers] == [body, body, RecomputedFirstTokenLayer]
    assert all(type(layer) is not RecomputedFirstTokenLayer for layer in before)  # new layers, not changed ones
    assert list(ours.state_dict()) == list(reference.state_dict())
