"""What goes over the wire: the request's schema (from the task's input fields and the limits), and the error
body every 4xx/5xx answer carries: ``{"error": {"field": "inputs[2].text", "message": "..."}}``."""

import re
from typing import Any, Optional

from ernie_ft.serving.limits import Limits

INPUTS = "inputs"
"""The request's list of inputs, and the flag its records are read under (messages name ``inputs[2].text``)."""
_NAMED = re.compile(rf"{INPUTS}(\[\d+\](\.[^\s:]+)?)?")


def request_model(required: tuple[str, ...], optional: tuple[str, ...], limits: Limits):
    """The pydantic schema of a request: ``{"inputs": [{field: text, ...}, ...]}``, each text at most
    ``max_chars`` and not blank, at most ``max_inputs`` inputs, no other field."""
    from typing import Annotated

    from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

    def not_blank(value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    Text = Annotated[str, Field(max_length=limits.max_chars), AfterValidator(not_blank)]
    fields: dict[str, Any] = dict.fromkeys(required, (Text, ...))
    fields.update(dict.fromkeys(optional, (Optional[Text], None)))
    Input = create_model("Input", __config__=ConfigDict(extra="forbid", strict=True), **fields)

    class PredictRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        inputs: list[Input] = Field(min_length=1, max_length=limits.max_inputs)  # type: ignore[valid-type]

    return PredictRequest


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
