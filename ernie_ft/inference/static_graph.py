"""The graph ``export`` saves with ``paddle.jit.save``, and Paddle Inference running it (``--engine inference``)."""

from __future__ import annotations

import os

from ernie_ft.errors import UserError

PREFIX = "inference"


def graph_file(directory: str) -> str | None:
    """The exported graph in ``directory`` (PIR JSON or the older ProgramDesc), or None."""
    for name in (f"{PREFIX}.json", f"{PREFIX}.pdmodel"):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


class InferenceModel:
    """A Paddle Inference predictor that the dygraph prediction code can call like the model.

    oneDNN on CPU; on GPU the predictor runs on the selected card, with TensorRT when
    ``tensorrt`` is set (Paddle must be built with it).
    """

    training = False

    def __init__(self, directory: str, device: str = "cpu", threads: int = 0, tensorrt: bool = False):
        from paddle import inference

        graph = graph_file(directory)
        if graph is None:
            raise UserError(
                f"--model {directory}: no exported model ({PREFIX}.json or {PREFIX}.pdmodel); "
                f"create one with python -m ernie_ft.export --model CHECKPOINT --output DIR"
            )
        config = inference.Config(graph, os.path.join(directory, f"{PREFIX}.pdiparams"))
        config.disable_glog_info()
        if device.startswith("gpu"):
            card = int(device.split(":")[1]) if ":" in device else 0
            config.enable_use_gpu(256, card)
            if tensorrt:
                config.enable_tensorrt_engine(precision_mode=inference.PrecisionType.Float32)
        else:
            config.disable_gpu()
            config.enable_mkldnn()
            from ernie_ft.training.cores import available_cores

            config.set_cpu_math_library_num_threads(threads or available_cores())
        self.predictor = inference.create_predictor(config)

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def __call__(self, input_ids, token_type_ids, position_ids=None):
        import paddle

        for name, value in (("input_ids", input_ids), ("token_type_ids", token_type_ids)):
            handle = self.predictor.get_input_handle(name)
            array = value.numpy()
            handle.reshape(array.shape)
            handle.copy_from_cpu(array)
        self.predictor.run()
        outputs = [
            paddle.to_tensor(self.predictor.get_output_handle(name).copy_to_cpu())
            for name in self.predictor.get_output_names()
        ]
        return outputs[0] if len(outputs) == 1 else outputs
