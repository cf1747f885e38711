"""ONNX Runtime sessions block their idle intra-op threads instead of spinning (``OnnxModel``; the figures:
docs/benchmarks.md, *CPU deployment*, spinning when the cores are shared)."""

import json

import numpy as np
import pytest

SPINNING = "session.intra_op.allow_spinning"
INPUTS = ("input_ids", "token_type_ids")


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    """A directory that passes ``onnx.check_belongs``: a two-input graph (logits = input_ids as floats, plus
    token_type_ids) in model.onnx and model.int8.onnx, and the onnx.json export writes (hashes, no weights)."""
    from onnx import TensorProto, helper, save

    from ernie_ft.inference import onnx as ernie_onnx

    directory = tmp_path_factory.mktemp("onnx")
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, [None, None]) for name in INPUTS]
    graph = helper.make_graph(
        [
            helper.make_node("Add", list(INPUTS), ["sum"]),
            helper.make_node("Cast", ["sum"], ["logits"], to=TensorProto.FLOAT),
        ],
        "tiny",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ernie_onnx.OPSET)])
    files = {}
    for precision, name in ernie_onnx.FILES.items():
        save(model, str(directory / name))
        files[name] = {"precision": precision, "sha256": ernie_onnx.sha256(str(directory / name))}
    (directory / ernie_onnx.MANIFEST).write_text(json.dumps({"files": files}), encoding="utf-8")
    return str(directory)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_session_blocks_idle_threads_and_still_runs(onnx_export, precision):
    pytest.importorskip("onnxruntime")
    from ernie_ft.inference.onnx import OnnxModel

    session = OnnxModel(onnx_export, precision, threads=2).session
    options = session.get_session_options()
    assert options.get_session_config_entry(SPINNING) == "0"
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    ids, types = np.array([[1, 2, 3]], dtype=np.int64), np.array([[0, 0, 1]], dtype=np.int64)
    (logits,) = session.run(None, {"input_ids": ids, "token_type_ids": types})
    np.testing.assert_array_equal(logits, np.array([[1, 2, 4]], dtype=np.float32))
