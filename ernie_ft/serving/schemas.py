"""What goes over the wire: the request's schema (from the task's input fields and the limits), the shapes a
request body may take, and the error body every 4xx/5xx answer carries:
``{"error": {"field": "inputs[2].text", "message": "..."}}``."""

import json
import re
from typing import Any, Optional, Union

from ernie_ft.serving.limits import Limits

Names = Optional[dict]
"""Each input field's keys (``Predictor.input_names``: ``{"text": ("text", "text_a", ...)}``); None: its name only."""

INPUTS = "inputs"
"""The request's list of inputs, and the flag its records are read under (messages name ``inputs[2].text``)."""
_NAMED = re.compile(rf"{INPUTS}(\[\d+\](\.[^\s:]+)?)?")
_VALUE_ERRORS = ("string_too_long", "value_error")
"""pydantic's errors about a text, not the body's shape: their own message says what is wrong (too long, blank);
every other 422 but too many inputs adds the shapes the server accepts."""


def _text_and_input(required: tuple[str, ...], optional: tuple[str, ...], limits: Limits, names: Names = None):
    """(one text: at most ``max_chars``, not blank; one input record: those texts in the task's fields, each also
    under its other ``names``)."""
    from typing import Annotated

    from pydantic import AfterValidator, AliasChoices, ConfigDict, Field, create_model

    def not_blank(value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    Text = Annotated[str, Field(max_length=limits.max_chars), AfterValidator(not_blank)]

    def under(name: str) -> dict:
        keys = (names or {}).get(name, ())
        return {"validation_alias": AliasChoices(name, *keys)} if len(keys) > 1 else {}

    fields: dict[str, Any] = {name: (Text, Field(..., **under(name))) for name in required}
    fields.update({name: (Optional[Text], Field(None, **under(name))) for name in optional})
    return Text, create_model("Input", __config__=ConfigDict(extra="forbid", strict=True), **fields)


def request_model(required: tuple[str, ...], optional: tuple[str, ...], limits: Limits, names: Names = None):
    """The pydantic schema of a request in the record form: ``{"inputs": [{field: text, ...}, ...]}``, each text
    at most ``max_chars`` and not blank, at most ``max_inputs`` inputs, no other field (``RequestBody`` takes
    the other shapes to this one)."""
    return _record_form(_text_and_input(required, optional, limits, names)[1], limits)


def _record_form(Input, limits: Limits):
    from pydantic import BaseModel, ConfigDict, Field

    class PredictRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        inputs: list[Input] = Field(min_length=1, max_length=limits.max_inputs)  # type: ignore[valid-type]
        parameters: Optional[dict] = None  # checked by ``RequestBody.parameters``

    return PredictRequest


class BadRequest(Exception):
    """A request the server refuses: the status, the part of the body that is wrong, what to do (and headers:
    ``Retry-After`` on a 503)."""

    def __init__(self, status: int, field_name: str, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field_name, message, headers


class RequestBody:
    """The bodies ``POST /v1/predict`` takes for a task's input fields (``required``, ``optional``), each field also
    under the other keys the model's ``Predictor`` reads it by (``names``: ``Predictor.input_names``, a classifier's
    ``text_a`` or ``sentence`` for ``text``), so that a record that ``Predictor`` answers is one the server answers.

    Every task: ``{"inputs": [{field: "...", ...}, ...]}`` (the record form) and one record
    ``{"inputs": {field: "...", ...}}`` (Hugging Face's shape for question answering). A task with one required
    field (classification, NER, fill-mask, a custom task with one text field) also takes texts for that field:
    ``{"inputs": ["...", ...]}`` (text-embeddings-inference) and ``{"inputs": "..."}`` (Hugging Face's Inference
    API), with the same limits; each answer is the record form's (one text: a list of one prediction)."""

    def __init__(self, required: tuple[str, ...], optional: tuple[str, ...], limits: Limits, names: Names = None):
        self.required, self.optional, self.limits = required, optional, limits
        self.text_field = required[0] if len(required) == 1 else None
        self.text, self.input = _text_and_input(required, optional, limits, names)
        self.model = _record_form(self.input, limits)
        self.shapes = shapes(required, self.text_field is not None)
        self.expected = "expected " + _or(self.shapes)

    def parse(self, raw: bytes) -> list[dict]:
        """The inputs of a request body, as records of the task's fields; raises ``BadRequest``."""
        return self.validate(parse_json(raw))

    def parse_request(self, raw: bytes, thresholds: bool) -> tuple[list[dict], dict]:
        """(the inputs as ``parse`` gives them, the body's ``parameters``): ``{"threshold": P}`` at most, a probability
        from ``REQUEST_LOWEST`` to 1 for a model that decides by a threshold (``thresholds``); raises ``BadRequest``."""
        from ernie_ft.thresholds import REQUEST_LOWEST

        body = parse_json(raw)
        records = self.validate(body)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise BadRequest(
                422, "parameters", f'got {json_type(parameters)}; expected an object, e.g. {{"threshold": 0.3}}'
            )
        for name in parameters:
            if name != "threshold":
                raise BadRequest(
                    422,
                    f"parameters.{name}",
                    "unknown parameter (this endpoint takes threshold; Hugging Face's task parameters go to POST /)",
                )
        value = parameters.get("threshold")
        if value is None:
            return records, {}
        if not thresholds:
            raise BadRequest(422, "parameters.threshold", "this model decides by no threshold (it takes none)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not REQUEST_LOWEST <= value < 1:
            raise BadRequest(
                422, "parameters.threshold", f"got {json.dumps(value)}; give a probability from {REQUEST_LOWEST} to 1"
            )
        return records, {"threshold": float(value)}

    def validate(self, body) -> list[dict]:
        """The inputs of a parsed request body (``parse_json``), as records of the task's fields; raises
        ``BadRequest``."""
        from pydantic import ValidationError

        if not isinstance(body, dict):
            raise BadRequest(422, "body", f"got {json_type(body)}, not an object; {self.expected}")
        if INPUTS not in body:
            has = f" (the body has {', '.join(map(json.dumps, body))})" if body else ""
            raise BadRequest(422, INPUTS, f"missing{has}; {self.expected}")
        records, texts = self.as_records(body[INPUTS])
        try:
            request = self.model.model_validate({**body, INPUTS: records})
        except ValidationError as e:
            error = e.errors()[0]
            where = field_path(self._where(error["loc"], body[INPUTS], texts))
            raise BadRequest(422, where, self._message(error)) from None
        return [item.model_dump(exclude_none=True) for item in request.inputs]

    def as_records(self, inputs) -> tuple[Any, set[int]]:
        """``inputs`` in the record form (anything else left as it is, for the schema to refuse), and the
        positions of the texts that became records."""
        one_record = isinstance(inputs, dict) or (isinstance(inputs, str) and self.text_field)
        items = [inputs] if one_record else inputs
        if not isinstance(items, list):
            return inputs, set()
        texts = {i for i, item in enumerate(items) if isinstance(item, str) and self.text_field}
        return [{self.text_field: item} if i in texts else item for i, item in enumerate(items)], texts

    @staticmethod
    def _where(loc: tuple, inputs, texts: set[int]) -> tuple:
        """An error's place in the body as sent (``loc``: its place in the record form): ``inputs[1]`` for the
        second text of a list of texts, ``inputs`` for a single text, ``inputs.context`` for a single record's
        field."""
        if len(loc) < 3 or loc[0] != INPUTS:
            return loc
        if isinstance(inputs, str):
            return (INPUTS,)
        if isinstance(inputs, dict):
            return (INPUTS, *loc[2:])
        return loc[:2] if loc[1] in texts else loc

    def _message(self, error: dict) -> str:
        kind = error["type"]
        if kind in _VALUE_ERRORS:
            return error["msg"]
        if kind == "too_long":
            given, most = error["ctx"]["actual_length"], self.limits.max_inputs
            return f"{given} inputs; at most {most} in one request (serve --max-inputs)"
        if kind == "missing":
            what = "required"
        elif kind == "extra_forbidden":
            fields = ", ".join((*self.required, *self.optional))
            what = f"unknown field (an input's fields: {fields})" if len(error["loc"]) > 2 else "unknown field"
        elif kind == "too_short":
            what = "no inputs"
        else:
            what = f"got {json_type(error['input'])}"
        return f"{what}; {self.expected}"

    def openapi(self) -> dict:
        """The JSON schema of every accepted body, with its ``$defs`` written in place, for the OpenAPI page."""
        from pydantic import BaseModel, ConfigDict, Field

        forms = (list[self.input], self.input) + ((list[self.text], self.text) if self.text_field else ())
        Inputs = Union[forms]  # type: ignore[valid-type]
        description = f"The inputs, in one of these shapes: {_or(self.shapes)}."

        class PredictRequest(BaseModel):
            model_config = ConfigDict(extra="forbid")
            inputs: Inputs = Field(description=description)  # type: ignore[valid-type]

        schema = openapi_schema(PredictRequest)
        for form in schema["properties"][INPUTS]["anyOf"]:
            if form.get("type") == "array":
                form.update(minItems=1, maxItems=self.limits.max_inputs)
        return schema

    def openapi_examples(self, record: dict) -> dict:
        """One example body of each accepted shape, with ``record``'s texts, for the OpenAPI page."""
        examples = {"records": [record], "record": record}
        if self.text_field:
            text = str(record.get(self.text_field, "..."))
            examples.update(texts=[text, text], text=text)
        return {
            name: {"summary": shape, "value": {INPUTS: value}}
            for (name, value), shape in zip(examples.items(), self.shapes)
        }


def parse_json(raw: bytes):
    """A request body's JSON, or ``BadRequest`` (400) saying why it is not JSON."""
    from pydantic_core import from_json

    try:
        return from_json(raw)
    except ValueError as e:
        raise BadRequest(400, "body", f"malformed JSON: {e}") from None


def shapes(required: tuple[str, ...], takes_texts: bool) -> list[str]:
    """The request bodies a task with these required fields takes, as examples: the record form first."""
    record = "{" + ", ".join(f'"{name}": "..."' for name in required) + "}"
    bodies = [f"[{record}]", record] + (['["...", ...]', '"..."'] if takes_texts else [])
    return [f'{{"{INPUTS}": {body}}}' for body in bodies]


def _or(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0]


def json_type(value) -> str:
    """What a JSON value is, in words: 'a number', 'a string', 'null'..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def openapi_schema(model) -> dict:
    """``model``'s JSON schema with its ``$defs`` written in place of their ``$ref``s, for the OpenAPI page."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    return resolve(schema)


def error_body(field_name: str, message: str) -> dict:
    """The JSON of every error answer: which part of the request is wrong, and what to do."""
    return {"error": {"field": field_name, "message": message}}


def error_response(status: int, field_name: str, message: str, headers: Optional[dict] = None):
    """An error answer (``error_body``) with its status and headers (``Retry-After`` on a 503)."""
    from fastapi.responses import JSONResponse

    return JSONResponse(error_body(field_name, message), status_code=status, headers=headers)


def field_path(loc: tuple) -> str:
    """Where pydantic found an error, as a request path: ('body', 'inputs', 0, 'text') -> 'inputs[0].text'."""
    path = ""
    for part in loc:
        if part == "body":
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


def named_field(message: str) -> str:
    """The field a task's reader names at the start of its message (``inputs[2].text: ...``), else ``inputs``."""
    head = message.split(":", 1)[0]
    return head if _NAMED.fullmatch(head) else INPUTS
