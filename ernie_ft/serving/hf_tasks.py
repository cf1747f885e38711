"""Hugging Face's task APIs on ``POST /``, so that ``huggingface_hub.InferenceClient(model="http://HOST:PORT")`` (and
huggingface.js, and code written for an Inference Endpoint) talks to ``serve``.

What the clients post (``huggingface_hub`` 0.25 and later, read from their source): ``{"inputs": TEXT}`` for text
and token classification, with ``"parameters": {...}`` when the caller gives any; for question answering
``{"question": ..., "context": ...}`` (0.25) or ``{"inputs": {"question": ..., "context": ...}, "parameters": {...}}``
(0.26 and later). What they read, as the Inference API answers:

- text classification: one list of ``{"label", "score"}`` per input, highest score first, so one text gets
  ``[[...]]``: both clients take the answer's first element as the text's list (``parse_obj_as_list(response)[0]``
  in Python; huggingface.js refuses anything else);
- token classification: a list of ``{"entity_group", "score", "word", "start", "end"}`` (whole entities, as
  ``aggregation_strategy="simple"`` gives them; ``end`` exclusive, in characters);
- question answering: ``{"answer", "score", "start", "end"}``, or a list of ``top_k`` of them.

A list of inputs gets a list of those answers. The predictions are ``POST /v1/predict``'s (the same records,
reshaped); a parameter this server does not take, or a value it cannot honour, is a 422 naming
``parameters.NAME``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ernie_ft.serving.schemas import INPUTS, BadRequest, RequestBody, json_type

KINDS = {"sequence": "text-classification", "token": "token-classification", "span": "question-answering"}
"""The Hugging Face task each model head answers as."""
PARAMETERS = {
    "text-classification": ("top_k", "function_to_apply"),
    "token-classification": ("aggregation_strategy", "ignore_labels"),
    "question-answering": ("top_k",),
}
"""The ``parameters`` each task takes here (each in ``CHECKS``)."""


@dataclass
class Request:
    inputs: list[dict]
    """The inputs as records of the task's fields, as ``/v1/predict`` takes them."""
    single: bool
    """One input was sent (not a list): the answer is that input's, not a list of answers."""
    parameters: dict


def _top_k(value) -> Optional[str]:
    whole = isinstance(value, int) and not isinstance(value, bool)
    return None if whole and value >= 1 else "a whole number, 1 or more"


def _function(value) -> Optional[str]:
    return None if value in ("softmax", "sigmoid", "none") else '"softmax", "sigmoid" or "none"'


def _aggregation(value) -> Optional[str]:
    if value == "simple":
        return None
    return '"simple": this model answers whole entities, each with its score, as "simple" groups them'


def _labels(value) -> Optional[str]:
    return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "a list of entity types"


CHECKS: dict[str, Callable[[object], Optional[str]]] = {
    "top_k": _top_k,
    "function_to_apply": _function,
    "aggregation_strategy": _aggregation,
    "ignore_labels": _labels,
}
"""Each parameter's check: None for a value taken, else what it takes."""


class TaskAPI:
    """The Hugging Face task a served model answers as (``KINDS``), its requests and its answers."""

    def __init__(self, head: str, schema: RequestBody):
        self.kind, self.schema = KINDS.get(head), schema

    def parse(self, body) -> Request:
        """The request in a parsed body (``schemas.parse_json``); raises ``BadRequest`` naming what is wrong."""
        if not isinstance(body, dict):
            return Request(self.schema.validate(body), True, {})  # refused there, with the accepted shapes
        body = dict(body)
        parameters = body.pop("parameters", None)
        parameters = self.check(parameters if parameters is not None else {})
        if INPUTS not in body and self.kind == "question-answering" and {"question", "context"} <= body.keys():
            body = {INPUTS: body}  # huggingface_hub before 0.26 posts the question and the context at the top
        return Request(self.schema.validate(body), not isinstance(body.get(INPUTS), list), parameters)

    def check(self, parameters) -> dict:
        if not isinstance(parameters, dict):
            raise BadRequest(422, "parameters", f'got {json_type(parameters)}, not an object such as {{"top_k": 2}}')
        known = PARAMETERS[self.kind]
        for name, value in parameters.items():
            if name not in known:
                raise BadRequest(
                    422,
                    f"parameters.{name}",
                    f"unknown parameter; {self.kind} takes {', '.join(known)} here",
                )
            wrong = CHECKS[name](value) if value is not None else None
            if wrong:
                raise BadRequest(422, f"parameters.{name}", f"got {json_type(value)} {value!r}; give {wrong}")
        return {k: v for k, v in parameters.items() if v is not None}

    def answer(self, request: Request, predictions: list[dict]):
        """The answer the Hugging Face task API gives for ``predictions`` (``/v1/predict``'s records); raises
        ``BadRequest`` for a ``function_to_apply`` the model's scores are not."""
        shape = {
            "text-classification": classification,
            "token-classification": entities,
            "question-answering": answers,
        }[self.kind]
        shaped = [shape(p, request.parameters) for p in predictions]
        if self.kind == "text-classification" or not request.single:
            return shaped
        return shaped[0]


def classification(prediction: dict, parameters: dict) -> list[dict]:
    """``{"label", "score"}`` per label, highest first, ``top_k`` of them. The scores are the prediction's
    ``probs``: softmax over the labels, or a sigmoid per label for a model of label sets (its predictions have
    ``labels``); another ``function_to_apply`` would need the raw logits, which are not served."""
    function = "sigmoid" if "labels" in prediction else "softmax"
    asked = parameters.get("function_to_apply", function)
    if asked != function:
        raise BadRequest(
            422,
            "parameters.function_to_apply",
            f"this model's scores are {function} probabilities; {asked!r} would need its raw logits, which serve "
            f"does not return: give {function!r} or leave it out",
        )
    scores = sorted(({"label": k, "score": v} for k, v in prediction["probs"].items()), key=lambda s: -s["score"])
    return scores[: parameters.get("top_k", len(scores))]


def entities(prediction: dict, parameters: dict) -> list[dict]:
    """One ``{"entity_group", "score", "word", "start", "end"}`` per entity, those of ``ignore_labels`` left out."""
    ignored = set(parameters.get("ignore_labels", ()))
    return [
        {"entity_group": e["type"], "score": e["score"], "word": e["text"], "start": e["start"], "end": e["end"]}
        for e in prediction["entities"]
        if e["type"] not in ignored
    ]


def answers(prediction: dict, parameters: dict):
    """The answer as ``{"answer", "score", "start", "end"}``; with ``top_k``, a list of the best ``top_k`` (the
    prediction's ``n_best``)."""
    if "top_k" not in parameters:
        return _span(prediction["answer"], prediction["start"], prediction["probability"])
    best = prediction.get("n_best") or [{**prediction, "text": prediction["answer"]}]
    return [_span(b["text"], b["start"], b["probability"]) for b in best[: parameters["top_k"]]]


def _span(text: str, start: int, score: float) -> dict:
    """No answer (start -1) is the empty answer at 0, as transformers gives it."""
    start = max(start, 0)
    return {"answer": text, "score": score, "start": start, "end": start + len(text)}
