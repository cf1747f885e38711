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
