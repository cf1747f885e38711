"""The task model as ONNX, run by ONNX Runtime: ``python -m ernie_ft export --format onnx``, ``--engine onnxruntime``.

paddle2onnx (a PaddleNLP dependency) converts the static graph that ``export`` saves (Paddle 3's PIR
``inference.json``) into ``model.onnx`` beside it, with dynamic batch size and length; ONNX Runtime runs it
on the CPU with as many threads as Paddle would use. The outputs are the dygraph model's logits (classification
to 2.4e-7 on the nano shape); whatever the task does with them (pooling windows, CRF decoding, spans) runs as
for the other engines.
"""

from __future__ import annotations

import os

from ernie_ft.errors import UserError

ONNX_FILE = "model.onnx"
OPSET = 14
INSTALL = "pip install onnxruntime"


def onnx_file(directory: str) -> str | None:
    """The ONNX model in ``directory``, or None."""
    path = os.path.join(directory, ONNX_FILE)
    return path if os.path.isfile(path) else None


def convert(directory: str, graph: str, params: str) -> str:
    """Write ``directory``/model.onnx from the exported Paddle graph ``graph`` and its ``params``; returns its path."""
    try:
        import paddle2onnx
    except ImportError:
        raise UserError("--format onnx needs paddle2onnx: pip install paddle2onnx") from None
    # paddle2onnx's graph optimiser (polygraphy) would otherwise pip-install packages while it runs
    os.environ.setdefault("POLYGRAPHY_AUTOINSTALL_DEPS", "0")
    path = os.path.join(directory, ONNX_FILE)
    paddle2onnx.export(graph, params, save_file=path, opset_version=OPSET, enable_onnx_checker=True)
    return path


class OnnxModel:
    """An ONNX Runtime session that the prediction code calls like the dygraph model."""

    training = False

    def __init__(self, directory: str, threads: int = 0):
        try:
            import onnxruntime
        except ImportError:
            raise UserError(f"--engine onnxruntime needs ONNX Runtime: {INSTALL}") from None
        path = onnx_file(directory)
        if path is None:
            raise UserError(
                f"--model {directory}: no {ONNX_FILE}; create it with "
                f"python -m ernie_ft export --model CHECKPOINT --output DIR --format onnx"
            )
        from ernie_ft.training.runtime import available_cores

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or available_cores()
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def __call__(self, input_ids, token_type_ids, position_ids=None):
        import paddle

        feed = {"input_ids": input_ids.numpy(), "token_type_ids": token_type_ids.numpy()}
        outputs = [paddle.to_tensor(o) for o in self.session.run(None, {k: feed[k] for k in self.inputs})]
        return outputs[0] if len(outputs) == 1 else outputs
