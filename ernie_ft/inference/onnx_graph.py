"""Rewrites of the fp32 ONNX graph before int8 quantization: what ONNX Runtime's CPU kernels run fastest.

Measured on the nano shape, ONNX Runtime 1.32, one thread, the ORT profile of 38 batches of ChnSentiCorp dev
reviews (docs/benchmarks.md): a ``SkipLayerNormalization`` took about 8 times the time of the ``Add`` and
``LayerNormalization`` it stands for (0.19 s against 0.02 + 0.04 s a node), and ``BiasGelu`` about twice a
``Gelu`` whose bias ONNX Runtime adds inside the quantized matmul before it. ``split_layer_norms`` undoes those
two fusions of the transformer optimizer; the residual sum is written as ``Sum``, which ONNX Runtime's own
``SkipLayerNormFusion`` (run when a session loads) does not match. The outputs are the same sums and
normalisations, in another order of float additions only.
"""

from __future__ import annotations


def split_layer_norms(model) -> dict[str, int]:
    """Replace each ``SkipLayerNormalization`` of the ONNX ``model`` (a ``ModelProto``) by ``Add(bias)``,
    ``Sum(skip)`` and ``LayerNormalization``, and each ``BiasGelu`` by ``Add`` and ``Gelu``; returns how many of each
    were split. A node whose statistics outputs (mean, inverse deviation, the sum) are read is left as it is."""
    from onnx import helper

    graph = model.graph
    read = {name for node in graph.node for name in node.input} | {output.name for output in graph.output}
    split = {"SkipLayerNormalization": 0, "BiasGelu": 0}
    for node in list(graph.node):
        if node.op_type not in split or any(name and name in read for name in node.output[1:]):
            continue
        prefix, (x, *rest), out = f"ernie_ft.split.{node.name}", node.input, node.output[0]
        if node.op_type == "BiasGelu":
            nodes = [
                helper.make_node("Add", [x, rest[0]], [prefix + ".biased"], name=prefix + ".bias"),
                helper.make_node("Gelu", [prefix + ".biased"], [out], name=prefix, domain="com.microsoft"),
            ]
        else:
            skip, gamma, beta, bias = (rest + [""] * 4)[:4]
            nodes = []
            if bias:
                nodes.append(helper.make_node("Add", [x, bias], [prefix + ".biased"], name=prefix + ".bias"))
                x = prefix + ".biased"
            epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
            nodes.append(helper.make_node("Sum", [x, skip], [prefix + ".sum"], name=prefix + ".residual"))
            inputs = [prefix + ".sum", gamma, beta] if beta else [prefix + ".sum", gamma]
            nodes.append(helper.make_node("LayerNormalization", inputs, [out], name=prefix, axis=-1, epsilon=epsilon))
        at = list(graph.node).index(node)
        graph.node.remove(node)
        for offset, new in enumerate(nodes):
            graph.node.insert(at + offset, new)
        split[node.op_type] += 1
    return split


def split_line(split: dict[str, int] | None) -> str:
    """What the export line says of ``split_layer_norms``'s ``split`` (nothing for an export of before it)."""
    if not split:
        return ""
    parts = {"SkipLayerNormalization": "Sum + LayerNormalization", "BiasGelu": "Add + Gelu"}
    done = ", ".join(f"{name} x{count} -> {parts[name]}" for name, count in split.items() if count)
    return f"; split for ONNX Runtime's faster CPU kernels: {done}"


def dynamic_inputs(model) -> list[str]:
    """The activations that ``model``'s ``DynamicQuantizeLinear`` nodes quantize (what ``fix_ranges`` needs ranges
    of)."""
    return [node.input[0] for node in model.graph.node if node.op_type == "DynamicQuantizeLinear"]


def fix_ranges(model, ranges: dict[str, tuple[float, float]]) -> int:
    """Replace each ``DynamicQuantizeLinear`` of ``model`` (which scales its input by the range of the whole batch)
    by a ``QuantizeLinear`` with the fixed scale and zero point of ``ranges`` (input name -> (min, max), calibrated),
    computed as ``DynamicQuantizeLinear`` computes them from a batch: a text's activations are then quantized the same
    whatever the texts and the padding beside them. Returns how many were replaced."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph, replaced = model.graph, 0
    for node in list(graph.node):
        if node.op_type != "DynamicQuantizeLinear":
            continue
        low, high = ranges[node.input[0]]
        low, high = min(low, 0.0), max(high, 0.0)
        scale = np.float32((high - low) / 255 if high > low else 1.0)
        zero_point = np.uint8(np.clip(np.round(-low / scale), 0, 255))
        quantized, scale_name, zero_name = node.output
        graph.initializer.append(numpy_helper.from_array(np.array(scale, np.float32), scale_name))
        graph.initializer.append(numpy_helper.from_array(np.array(zero_point, np.uint8), zero_name))
        fixed = helper.make_node("QuantizeLinear", [node.input[0], scale_name, zero_name], [quantized], name=node.name)
        at = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.insert(at, fixed)
        replaced += 1
    return replaced


def fuse_integer_matmuls(model) -> int:
    """Write each ``MatMulInteger -> Cast -> Mul(Mul(scale of A, scale of B)) [-> Add(constant bias)]`` of ``model``
    as one ``MatMulIntegerToFloat``, as ONNX Runtime's own fusion does when the scales come from a
    ``DynamicQuantizeLinear``: with fixed scales (``fix_ranges``) its constant folding multiplies them first and the
    fusion no longer matches. Returns how many were fused."""
    from onnx import helper

    graph = model.graph
    constants = {i.name: i for i in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    producer = {out: node for node in graph.node for out in node.output}

    def only_reader(name, op):
        nodes = readers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op else None

    fused = 0
    for matmul in [node for node in graph.node if node.op_type == "MatMulInteger"]:
        cast = only_reader(matmul.output[0], "Cast")
        mul = cast and only_reader(cast.output[0], "Mul")
        scales = mul and producer.get(next((i for i in mul.input if i != cast.output[0]), ""))
        if not scales or scales.op_type != "Mul" or len(readers[scales.output[0]]) != 1:
            continue
        add = only_reader(mul.output[0], "Add")
        bias = add and add.input[1] if add and add.input[0] == mul.output[0] else None
        bias = bias if bias in constants and len(constants[bias].dims) == 1 else None
        a, b, *zero_points = matmul.input
        inputs = [a, b, *scales.input, *(zero_points + ["", ""])[:2], *([bias] if bias else [])]
        last = add if bias else mul
        node = helper.make_node(
            "MatMulIntegerToFloat", inputs, [last.output[0]], name=matmul.name, domain="com.microsoft"
        )
        graph.node.insert(list(graph.node).index(last), node)
        for old in (matmul, cast, scales, mul, *([add] if bias else [])):
            graph.node.remove(old)
        fused += 1
    return fused
