"""int8 quantization for the CPU the model will run on: ``export --format onnx --quantize METHOD[:TARGET]``.

METHOD is ``int8`` (``DEFAULT_METHOD``), ``int8-static`` (each activation quantized with a fixed range, calibrated
on training texts) or ``int8-dynamic`` (each activation quantized with the range of the whole batch, so a text's
answer depends on the texts and the padding beside it). Both write one graph: ONNX Runtime's dynamic quantization
of every MatMul; static then fixes each ``DynamicQuantizeLinear``'s scale and zero point to those of the range
calibrated (``onnx_graph.fix_ranges``), so a text's activations are quantized the same in any batch.
TARGET names the CPU kind, by default this machine's (``/proc/cpuinfo``):

- ``vnni`` (AVX-512 VNNI, AVX-VNNI, and AMX, which has them): the uint8 x int8 products add up in 32 bits, so the
  weights use all 8 bits, and the attention's two products of activations (scores and weighted values) run as
  ``MatMulInteger`` too instead of a float ``MultiHeadAttention``, as optimum's graph does (in an ONNX Runtime
  profile on the AVX-512 VNNI machine of docs/benchmarks.md, one thread: the int8 matmuls with their transposes
  and softmax took about 2.4 s of a pass where ``MultiHeadAttention`` took 3.5 s).
- ``avx2`` and ``avx512`` (without VNNI): ``vpmaddubsw`` adds pairs of uint8 x int8 products in 16 bits, which
  saturate with 8-bit weights (a QA model's outputs 35 % off fp32's, where 7 bits keep them within 2.2 %), so the
  weights use 7 bits (``reduce_range``); the attention stays the float ``MultiHeadAttention`` (1.07x optimum's
  dynamic int8 and 1.60x Paddle Inference on AVX2, the benchmark's earlier rows).

Whatever the target, the graph quantized has its residual layer norms and GELUs split out of the fused operators
(``onnx_graph.split_layer_norms``: ONNX Runtime's CPU kernels for the parts are faster). The choice is written to
``onnx.json`` (``Choice.record``), printed by ``export`` and shown by ``/v1/info``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ernie_ft._cpu import cpu_flags
from ernie_ft.errors import UserError

METHODS = ("int8", "int8-dynamic", "int8-static")
DEFAULT_METHOD = "int8-static"
"""Static int8 by default: a text's probabilities do not depend on its batch (dynamic's moved by up to 1.3e-3 between
a batch of 32 and the text alone; static's are equal, tests/test_int8_batch.py), and its graph runs faster, a
``QuantizeLinear`` with a fixed scale where dynamic first finds the batch's range (docs/benchmarks.md)."""
TARGETS = {
    "vnni": "AVX-512 VNNI, AVX-VNNI or AMX",
    "avx512": "AVX-512 without VNNI",
    "avx2": "AVX2 without VNNI",
}
"""``--quantize METHOD:TARGET`` values and the CPUs each is for."""
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@dataclass(frozen=True)
class Choice:
    """How ``model.int8.onnx`` is quantized, and why."""

    method: str
    """'dynamic' or 'static'."""
    target: str
    """A key of ``TARGETS``."""
    chosen_by: str
    """'--quantize' when the user named the target, else the flags of this machine that chose it."""
    reduce_range: bool
    """Weights in 7 bits (CPUs without VNNI) instead of 8."""
    attention: bool
    """The attention's two products of activations quantized (``MatMulInteger``) rather than a float
    ``MultiHeadAttention``."""
    per_channel: bool
    """A scale per output column of each weight rather than one per tensor (the static exports of before
    ``fix_ranges``, QDQ graphs; now False)."""

    def record(self) -> dict:
        return asdict(self)

    def describe(self, calibration: str | None = None) -> str:
        """What the export line and ``/v1/info`` say; ``calibration``: where static ranges came from."""
        bits = "7-bit weights (reduce_range)" if self.reduce_range else "8-bit weights"
        attention = "attention's matmuls int8" if self.attention else "attention in float (MultiHeadAttention)"
        scales = "per-channel" if self.per_channel else "per-tensor"
        calibrated = f" calibrated on {calibration}" if calibration else ""
        return (
            f"{self.method} quantization{calibrated} for {self.target} ({self.chosen_by}): {bits}, {scales}, "
            f"{attention}"
        )


def native_target(flags: set[str] | None) -> tuple[str, str]:
    """(target, why) for a CPU with ``flags``: 'vnni' with any VNNI flag, else 'avx512' or 'avx2'; 'avx2' (the
    setting that saturates nowhere) when the flags are unknown."""
    if flags is None:
        return "avx2", "this machine's CPU flags unread"
    found = [flag for flag in VNNI_FLAGS if flag in flags]
    if found:
        return "vnni", f"this machine's CPU: {' '.join(found)}"
    if "avx512f" in flags:
        return "avx512", "this machine's CPU: avx512f without VNNI"
    return "avx2", "this machine's CPU: no VNNI"


def parse(value: str | None, flags: set[str] | None = None) -> Choice | None:
    """The ``Choice`` for a ``--quantize`` value (None without one); UserError for an unknown method or target.
    ``flags``: the CPU flags an unnamed target is chosen for (default: this machine's)."""
    if value is None:
        return None
    method, _, target = value.partition(":")
    if method not in METHODS:
        raise UserError(
            f"--quantize must be one of {', '.join(METHODS)}, optionally with :TARGET ({', '.join(TARGETS)}), "
            f"not {value!r}"
        )
    method = (DEFAULT_METHOD if method == "int8" else method).split("-")[1]
    if target and target not in TARGETS:
        known = ", ".join(f"{name} ({cpus})" for name, cpus in TARGETS.items())
        raise UserError(f"--quantize {value}: unknown target {target!r}; one of {known}, or none for this CPU's")
    chosen_by = "--quantize"
    if not target:
        target, chosen_by = native_target(cpu_flags() if flags is None else flags)
    vnni = target == "vnni"
    return Choice(method, target, chosen_by, not vnni, vnni, False)


def quantize(choice: Choice, fused: str, unfused: str, target: str, calibration: Iterable[dict] | None) -> None:
    """Write ``target``, the int8 model, from the fp32 graph with the attention fused (``fused``) or not (``unfused``,
    read when ``choice.attention``); static: with the activations' ranges calibrated on ``calibration`` (batches of
    model inputs). The quantizer's advice (pre-processing, tensors it skips) is logged on the root logger:
    ``onnx.convert`` sends it to the export's log (``libraries.logs_to_file``)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = unfused if choice.attention else fused
    # every MatMul: with the attention unfused, its two products of activations too (quantize_dynamic leaves a MatMul
    # whose second input is not a constant in float unless MatMulConstBOnly is off)
    quantize_dynamic(
        source,
        target,
        weight_type=QuantType.QInt8,
        reduce_range=choice.reduce_range,
        per_channel=choice.per_channel,
        extra_options={"MatMulConstBOnly": not choice.attention},
    )
    if choice.method == "static":
        import onnx

        from ernie_ft.inference.onnx_graph import dynamic_inputs, fix_ranges, fuse_integer_matmuls

        model = onnx.load(target)
        fix_ranges(model, activation_ranges(source, dynamic_inputs(model), calibration))
        fuse_integer_matmuls(model)
        onnx.save(model, target)


def activation_ranges(source: str, names: list[str], batches: Iterable[dict]) -> dict[str, tuple[float, float]]:
    """(min, max) of each of the tensors ``names`` of the fp32 graph ``source`` over ``batches`` of its inputs."""
    import numpy as np
    import onnx
    import onnxruntime

    model = onnx.load(source)
    model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in names)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    low, high = dict.fromkeys(names, np.inf), dict.fromkeys(names, -np.inf)
    for batch in batches:
        for name, value in zip(names, session.run(names, {k: v for k, v in batch.items() if k in inputs})):
            low[name], high[name] = min(low[name], float(value.min())), max(high[name], float(value.max()))
    return {name: (low[name], high[name]) for name in names}
