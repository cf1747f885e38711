"""inference/onnx_graph.py: the fp32 graph's rewrites before int8 quantization give the same outputs (issue 40)."""

from __future__ import annotations

import numpy as np
import pytest

from ernie_ft.inference.onnx_graph import split_layer_norms, split_line

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def fused_block(bias: bool = True):
    """A residual block as the transformer optimizer fuses it: BiasGelu, then SkipLayerNormalization (with or
    without its bias) reading the block's input as the skip."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {
        "w": rng.normal(size=(8, 8)).astype(np.float32),
        "b1": rng.normal(size=8).astype(np.float32),
        "gamma": (1 + 0.1 * rng.normal(size=8)).astype(np.float32),
        "beta": rng.normal(size=8).astype(np.float32),
        "b2": rng.normal(size=8).astype(np.float32),
    }
    skip_inputs = ["h", "x", "gamma", "beta", "b2"] if bias else ["h", "x", "gamma", "beta"]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("BiasGelu", ["m", "b1"], ["h"], name="gelu", domain="com.microsoft"),
        helper.make_node(
            "SkipLayerNormalization", skip_inputs, ["y"], name="sln", domain="com.microsoft", epsilon=1e-5
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length", 8])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    opsets = [helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def run(model, x):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0], session


@pytest.mark.parametrize("bias", [True, False])
def test_split_layer_norms_keeps_the_outputs_and_leaves_no_fused_node(bias):
    model = fused_block(bias)
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype(np.float32)
    expected, _ = run(model, x)
    assert split_layer_norms(model) == {"SkipLayerNormalization": 1, "BiasGelu": 1}
    ops = [node.op_type for node in model.graph.node]
    assert ops == ["MatMul", "Add", "Gelu", *(["Add"] if bias else []), "Sum", "LayerNormalization"], ops
    # the fused node's epsilon carried over (1e-12 in place of its 1e-5 moves these outputs by less than the tolerance)
    (epsilon,) = [a.f for a in model.graph.node[-1].attribute if a.name == "epsilon"]
    assert epsilon == pytest.approx(1e-5)
    got, _ = run(model, x)  # LayerNormalization at opset 14: ONNX Runtime's, as the transformer optimizer writes it
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)  # the same sums, in another order


def test_a_node_whose_statistics_are_read_stays_fused():
    """A SkipLayerNormalization whose sum output is read elsewhere is not split (the sum would be lost)."""
    from onnx import helper

    model = fused_block()
    sln = next(node for node in model.graph.node if node.op_type == "SkipLayerNormalization")
    sln.output.extend(["", "", "summed"])
    model.graph.node.append(helper.make_node("Identity", ["summed"], ["y2"]))
    assert split_layer_norms(model) == {"SkipLayerNormalization": 0, "BiasGelu": 1}
    assert "SkipLayerNormalization" in [node.op_type for node in model.graph.node]


def test_the_export_line_names_what_was_split():
    assert split_line(None) == "" and split_line({}) == ""
    line = split_line({"SkipLayerNormalization": 8, "BiasGelu": 4})
    assert line == (
        "; split for ONNX Runtime's faster CPU kernels: SkipLayerNormalization x8 -> Sum + LayerNormalization, "
        "BiasGelu x4 -> Add + Gelu"
    )


def test_fixed_ranges_quantize_a_row_alike_in_any_batch(tmp_path):
    """fix_ranges + fuse_integer_matmuls on a dynamically quantized block: every DynamicQuantizeLinear becomes a
    QuantizeLinear with the calibrated range, every MatMulInteger chain one MatMulIntegerToFloat (bias included), and
    a row's outputs are the same alone and beside a row of ten times its scale (dynamic's are not)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from ernie_ft.inference.int8 import activation_ranges
    from ernie_ft.inference.onnx_graph import dynamic_inputs, fix_ranges, fuse_integer_matmuls

    source, target = tmp_path / "block.onnx", tmp_path / "int8.onnx"
    onnx.save(fused_block(), str(source))
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    model = onnx.load(str(target))
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 5, 8)).astype(np.float32)
    batch = np.concatenate([x, 10 * rng.normal(size=(1, 5, 8)).astype(np.float32)])
    dynamic = [run(model, x)[0], run(model, batch)[0][:1]]
    assert np.abs(dynamic[0] - dynamic[1]).max() > 1e-3  # the other row's range changed this one's scale
    names = dynamic_inputs(model)
    ranges = activation_ranges(str(source), names, [{"x": batch}])
    assert fix_ranges(model, ranges) == len(names) > 0
    assert fuse_integer_matmuls(model) == 1
    ops = [node.op_type for node in model.graph.node]
    assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops and "MatMulIntegerToFloat" in ops, ops
    alone, together = run(model, x)[0], run(model, batch)[0][:1]
    np.testing.assert_array_equal(alone, together)
    expected, _ = run(fused_block(), x)
    # int8's rounding: a step of the range calibrated (the other row's, ten times this one's) is about 0.25
    np.testing.assert_allclose(alone, expected, atol=0.5)
