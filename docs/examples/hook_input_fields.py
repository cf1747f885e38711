"""``input_fields``: the fields of one input record, as ``serve`` takes them in a request.

    python docs/examples/hook_input_fields.py

(required, optional): the server's request schema (``POST /v1/predict``, the OpenAPI page at ``/docs``)
is built from them, so a request that misses a required field or adds an unknown one gets a 422 naming it.
"""

from dataclasses import dataclass
from typing import ClassVar

from ernie_ft.serving.limits import Limits
from ernie_ft.serving.schemas import request_model
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class AspectSentiment(Sentiment):
    input_fields: ClassVar[tuple] = (("text", "aspect"), ("id",))


if __name__ == "__main__":
    Request = request_model(*AspectSentiment.input_fields, Limits())
    good = Request.model_validate({"inputs": [{"text": "菜很好吃，就是上菜太慢", "aspect": "服务"}]})
    print("accepted:", good.inputs[0].model_dump(exclude_none=True))
    for bad in ({"inputs": [{"text": "菜很好吃"}]}, {"inputs": [{"text": "菜很好吃", "aspect": "口味", "stars": "5"}]}):
        try:
            Request.model_validate(bad)
        except ValueError as error:
            print("refused:", [(".".join(map(str, e["loc"])), e["type"]) for e in error.errors()])
