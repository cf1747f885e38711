"""``model_class``, ``bind``, ``binds_model`` and ``report``: a model with parameters of its own that the task uses.

    python docs/examples/hook_model.py [OUTPUT_DIR]

- ``model_class`` ('module:Class') is built instead of the head's PaddleNLP class (NER's CRF tagger,
  ELECTRA); here an ERNIE classifier with a learned bias per label.
- ``bind(model)`` hands the task the built model, before training and after loading a checkpoint: the loss
  and the decoding read the bias from it (as NER's CRF reads its transition scores).
- ``binds_model = True``: the checkpoint's weights are loaded for ``bind`` even where another engine runs
  the forward pass (an export on Paddle Inference), since decoding needs them.
- ``report(...)`` is what ``python -m ernie_ft evaluate`` prints (without it: the metrics on one line); here
  each label's accuracy and the learned bias, with the misclassified reviews written to ``errors.txt``.
"""

import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import paddle
from paddlenlp.transformers import ErnieForSequenceClassification

from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


class BiasedClassifier(ErnieForSequenceClassification):
    """ERNIE's sequence classifier plus a learned bias per label, applied by the task (not in forward)."""

    def __init__(self, config):
        super().__init__(config)
        zero = paddle.nn.initializer.Constant(0.0)
        self.label_bias = self.create_parameter([config.num_labels], default_initializer=zero)


@dataclass
class WithBias(Sentiment):
    name: str = f"{os.path.abspath(__file__)}:WithBias"
    # This module by the name it runs under: __main__ here, hook_model when a checkpoint loads the task by file.
    model_class: ClassVar[str] = f"{__name__}:BiasedClassifier"
    binds_model: ClassVar[bool] = True
    model: Any = field(default=None, init=False, repr=False)

    def bind(self, model):
        self.model = model

    def bias(self):
        return self.model.label_bias.numpy()

    def loss(self, logits, batch):
        return paddle.nn.functional.cross_entropy(logits + self.model.label_bias, batch["labels"])

    def probabilities(self, logits, features, examples):
        return super().probabilities(np.asarray(logits) + self.bias(), features, examples)

    def report(self, logits, features, examples, labels, data, out_dir):
        predicted = [labels[i] for i in self.probabilities(logits, features, examples).argmax(axis=1)]
        total = Counter(e.label for e in examples)
        right = Counter(e.label for e, p in zip(examples, predicted) if p == e.label)
        wrong = [
            f"{e.source}:{e.line}\t{e.label} -> {p}\t{e.text}" for e, p in zip(examples, predicted) if p != e.label
        ]
        with open(os.path.join(out_dir, "errors.txt"), "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in wrong)
        rows = [f"{label}\t{right[label]}/{total[label]}\t{bias:+.4f}" for label, bias in zip(labels, self.bias())]
        return "\n".join(["label\tright\tbias", *rows, f"{len(wrong)} errors in {os.path.join(out_dir, 'errors.txt')}"])


def main(output: str) -> None:
    from ernie_ft import build_config, fit, load_model, setup
    from ernie_ft.inference.evaluate import EvaluateOptions, evaluate

    config = build_config(
        {
            "data": {"train": "data/sentiment_train.tsv", "max_len": 64},
            "train": {"epochs": 1, "batch_size": 4, "lr": 2e-3, "log_steps": 16},
        },
        {"output": output},
    )
    task = WithBias()
    run = setup(task, config)
    print(f"built {type(run.net).__name__}; bound to the task: {task.model is run.net}")
    fit(run)
    scored = os.path.join(output, "eval-test")  # else beside the input: eval-sentiment_test/ in data/
    evaluate(EvaluateOptions(model=output, input="data/sentiment_test.csv", output_dir=scored))  # ernie_ft evaluate
    loaded = load_model(output, weights=False)  # weights=False: what an exported model's predict asks for
    print(f"loaded for prediction with weights=False: {type(loaded.model).__name__} (binds_model)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(os.path.join(tmp, "run"))
