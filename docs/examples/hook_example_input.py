"""``example_input``: the input record ``serve`` warms the model up with before ``/readyz`` answers 200.

    python docs/examples/hook_example_input.py

Without it the server sends '你好，世界。' in each required field of ``input_fields``; a task whose inputs
need a particular shape gives one that it reads (fill-mask: a text with [MASK]).
"""

from dataclasses import dataclass
from typing import ClassVar

from ernie_ft.config import DataConfig
from ernie_ft.serving.limits import Limits
from ernie_ft.serving.schemas import request_model
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class WarmedUp(Sentiment):
    example_input: ClassVar[dict] = {"text": "物流很快，包装完好，五星好评"}


if __name__ == "__main__":
    task = WarmedUp()
    warm_up = task.example_input
    request_model(*task.input_fields, Limits()).model_validate({"inputs": [warm_up]})  # a valid request
    examples = task.read_records([warm_up], DataConfig(), "inputs")  # and one the task reads
    print("warm-up input:", warm_up, "->", len(examples), "example")
