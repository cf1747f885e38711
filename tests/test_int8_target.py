"""--quantize METHOD[:TARGET]: int8 quantization chosen for the CPU that will run the model, recorded in onnx.json,
printed by export and shown by /v1/info; an int8 export holds only what its engine reads (issue 40)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from test_serve import CLASSIFY_INPUTS, assert_int8_within_bound, train

from ernie_ft.inference import int8

VNNI = {"fpu", "avx2", "avx512f", "avx512_vnni", "avx512_bf16"}
AVX2 = {"fpu", "avx2", "fma"}


@pytest.mark.parametrize(
    "value,flags,expected",
    [
        # (method, target, chosen_by starts, reduce_range, attention, per_channel)
        ("int8", VNNI, ("static", "vnni", "this machine's CPU: avx512_vnni", False, True, False)),
        ("int8", AVX2, ("static", "avx2", "this machine's CPU: no VNNI", True, False, False)),
        ("int8", {"avx2", "avx512f"}, ("static", "avx512", "this machine's CPU: avx512f", True, False, False)),
        ("int8", {"avx2", "avx_vnni"}, ("static", "vnni", "this machine's CPU: avx_vnni", False, True, False)),
        ("int8:avx2", VNNI, ("static", "avx2", "--quantize", True, False, False)),
        ("int8-dynamic:vnni", AVX2, ("dynamic", "vnni", "--quantize", False, True, False)),
        ("int8-static:vnni", AVX2, ("static", "vnni", "--quantize", False, True, False)),
        ("int8-dynamic", AVX2, ("dynamic", "avx2", "this machine's CPU: no VNNI", True, False, False)),
    ],
)
def test_the_target_decides_the_bits_and_the_attention(value, flags, expected):
    """Without VNNI the weights keep 7 bits (16-bit sums saturate otherwise) and the attention stays float; with
    VNNI 8 bits and the attention's products int8; a named target wins over the machine's flags."""
    choice = int8.parse(value, flags=flags)
    method, target, chosen_by, reduce_range, attention, per_channel = expected
    assert (choice.method, choice.target, choice.reduce_range, choice.attention, choice.per_channel) == (
        method,
        target,
        reduce_range,
        attention,
        per_channel,
    )
    assert choice.chosen_by.startswith(chosen_by), choice.chosen_by
    assert int8.parse(None) is None
    assert int8.native_target(None) == ("avx2", "this machine's CPU flags unread")  # 7 bits saturate nowhere


def test_cpu_flags_are_read_from_the_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_vnni\n\n")
    assert int8.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512f", "avx512_vnni"}
    assert int8.cpu_flags(str(tmp_path / "none")) is None


@pytest.mark.parametrize(
    "value,says",
    [
        ("int8:sse4", "--quantize int8:sse4: unknown target 'sse4'; one of vnni (AVX-512 VNNI, AVX-VNNI or AMX), "),
        ("int4", "--quantize must be one of int8, int8-dynamic, int8-static, optionally with :TARGET (vnni, avx512, "),
    ],
)
def test_an_unknown_target_or_method_is_one_error_line(value, says, tmp_path, capsys):
    from ernie_ft.cli import main

    output = tmp_path / "out"
    command = ["export", "--model", str(tmp_path), "--output", str(output), "--format", "onnx", "--quantize", value]
    assert main(command) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: " + says), err
    assert not output.exists()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    return train(
        tmp_path_factory, "classify", "--train", str(DATA / "sentiment_train.tsv"), "--max-len", "64", "--stride", "16"
    )


@pytest.fixture(scope="module")
def fp32_export(classifier, tmp_path_factory):
    from ernie_ft.inference.export import export

    return export(classifier, str(tmp_path_factory.mktemp("fp32") / "onnx"), format="onnx")


@pytest.mark.parametrize("target", ["vnni", "avx2"])
def test_an_int8_export_says_what_was_chosen_holds_its_engines_files_and_predicts(
    target, classifier, fp32_export, tmp_path, capsys
):
    """export --quantize int8:TARGET: the export line and onnx.json say what was chosen, the directory holds the int8
    model and what the engine reads (no Paddle graph, no fp32 ONNX, no dygraph weights), and predict, evaluate and
    the server run it, within int8's bound of the fp32 export's outputs."""
    import onnx

    from ernie_ft import Predictor
    from ernie_ft.cli import main
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.model import ServedModel

    exported = tmp_path / "int8"
    command = ["export", "--model", classifier, "--output", str(exported), "--format", "onnx"]
    assert main([*command, "--quantize", f"int8:{target}"]) == 0
    out = capsys.readouterr().out
    choice = int8.parse(f"int8:{target}")
    manifest = json.loads((exported / "onnx.json").read_text())
    calibration = manifest["files"]["model.int8.onnx"]["calibration"]  # static, on the run's training file
    assert calibration == "256 windows of sentiment_train.tsv", calibration
    assert f"model.int8.onnx: int8, {choice.describe(calibration)}" in out, out
    assert ("MultiHeadAttention" in out) == (not choice.attention), out
    assert manifest["files"]["model.int8.onnx"]["quantization"] == choice.record()
    ops = {node.op_type for node in onnx.load(str(exported / "model.int8.onnx")).graph.node}
    # every MatMul of the vnni graph is int8, the attention's two products of activations too; the layer norms and
    # GELUs are the split ones (onnx_graph.split_layer_norms), whatever the target
    assert ("MatMul" in ops, "MultiHeadAttention" in ops) == (False, not choice.attention), ops
    assert "QuantizeLinear" in ops and "DynamicQuantizeLinear" not in ops, ops  # static: fixed ranges
    assert {"LayerNormalization", "Sum", "Gelu"} <= ops and not ops & {"SkipLayerNormalization", "BiasGelu"}, ops
    names = {p.name for p in exported.iterdir()}
    assert "model.int8.onnx" in names and "vocab.txt" in names and "labels.json" in names
    assert not names & {"model.onnx", "inference.json", "inference.pdiparams", "model.safetensors"}, names

    source = tmp_path / "in.txt"
    source.write_text("房间很干净，服务也好\n太差了\n", encoding="utf-8")
    assert main(["predict", "--model", str(exported), "--input", str(source)]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == "wrote 2 predictions (engine onnxruntime, int8)"
    assert main(["evaluate", "--model", str(exported), "--input", str(DATA / "sentiment_dev.tsv"), "--output",
                 str(tmp_path / "scored"), "--text-column", "text_a", "--label-column", "label"]) == 0  # fmt: skip
    assert "engine onnxruntime, int8" in capsys.readouterr().out
    info = ServedModel(str(exported), "auto", "cpu").info(Limits())
    assert (info["engine"], info["precision"]) == ("onnxruntime", "int8")
    assert info["quantization"]["target"] == target and info["quantization"]["line"] == choice.describe(calibration)

    fp32, quantized = Predictor(fp32_export, "onnxruntime", "cpu"), Predictor(str(exported), "auto", "cpu")
    examples, features = fp32.prepare(CLASSIFY_INPUTS)
    assert_int8_within_bound(fp32.logits(features, 8), quantized.logits(features, 8))
