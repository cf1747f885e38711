"""The routes of Label Studio's ML backend protocol under ``/label-studio`` (``label_studio`` says what they answer),
registered on ``serve``'s application by ``add_routes``: health, setup, predict, and the training webhook whose runs
(``retrain``) swap a new model in, when serve was started with the Label Studio to train from (``security``).

The routes Label Studio posts to take only ``application/json`` (415 otherwise: a web page's form or ``text/plain``
post, which needs no CORS preflight, never reaches them); a body that is not a JSON object is a 400."""

import re
import sys
from typing import Optional

from ernie_ft.data.label_config import MissingText, task_record, text_fields
from ernie_ft.errors import UserError
from ernie_ft.serving.label_studio import ConfigError, Projects, answer_tasks
from ernie_ft.serving.retrain import Retrainer, project_number
from ernie_ft.serving.schemas import INPUTS, BadRequest, error_response, parse_json
from ernie_ft.serving.security import TRAINING_OFF, LabelStudioAccess

PREFIX = "/label-studio"
"""Where the protocol's routes are: a project's backend URL is ``http://HOST:PORT/label-studio``."""


def add_routes(app, service, access: Optional[LabelStudioAccess], runs: Optional[str] = None) -> Optional[Retrainer]:
    """Register the ``/label-studio`` routes on the FastAPI ``app`` answering with ``service`` (``app.Service``).
    ``access``: the Label Studio "Start training" fetches from, in runs under ``runs`` that train and swap in a new
    model (``retrain.Retrainer``); None: training is refused. Returns the retrainer (None without), which the
    application stops when it stops."""
    from fastapi import Request  # FastAPI reads the routes' annotations: no ``from __future__ import annotations`` here

    projects = Projects()
    retrainer = Retrainer(lambda: service.served, service.swap_in, access, runs, service.limits) if access else None
    told: set[str] = set()  # the other addresses /setup named, each said once

    @app.get(f"{PREFIX}/health", summary="Label Studio ML backend: health")
    @app.get(f"{PREFIX}/", include_in_schema=False)
    async def label_studio_health():
        model = service.served
        return {"status": "UP", "model_class": f"ernie_ft {model.task.name}", "model_version": model.name}

    @app.post(f"{PREFIX}/setup", summary="Label Studio ML backend: a project's labelling config")
    async def label_studio_setup(request: Request):
        try:
            body = await json_object(request)
            config_of(projects, body.get("project"), body.get("schema"), "schema")
        except BadRequest as e:
            return error_response(e.status, e.field, e.message, e.headers)
        hostname = body.get("hostname")
        if access is not None and hostname and not access.is_at(hostname) and str(hostname) not in told:
            told.add(str(hostname))
            print(f"label-studio: /setup named Label Studio at {hostname}; runs fetch from {access.url} only, the "
                  "address serve started with (--label-studio-url)", file=sys.stderr, flush=True)  # fmt: skip
        return {"model_version": service.served.name}

    @app.post(f"{PREFIX}/webhook", summary="Label Studio ML backend: events; START_TRAINING trains a new model")
    @app.post(f"{PREFIX}/train", summary="Label Studio ML backend: train (Label Studio before its webhook)")
    async def label_studio_train(request: Request):
        try:
            body = await json_object(request)
        except BadRequest as e:
            return error_response(e.status, e.field, e.message, e.headers)
        action = body.get("action", "START_TRAINING" if request.url.path.endswith("/train") else None)
        if action != "START_TRAINING":  # Label Studio sends every project event here: only training is ours
            return {"status": "ignored", "action": action if isinstance(action, str) else None}
        return start_training(body, retrainer, projects)

    @app.post(f"{PREFIX}/predict", summary="Label Studio ML backend: predictions for tasks")
    async def label_studio_predict(request: Request):
        if not is_json(request):
            return error_response(415, "content-type", NOT_JSON)
        return await service.counted(lambda raw: predict(service, raw, projects), request)

    return retrainer


NOT_JSON = "send the body as JSON with Content-Type: application/json (as Label Studio does)"


def is_json(request) -> bool:
    """Whether ``request`` says its body is JSON (``application/json``, any parameters)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower() == "application/json"


async def json_object(request) -> dict:
    """The JSON object ``request`` carries: BadRequest 415 when it is not sent as JSON, 400 when it is not an object."""
    if not is_json(request):
        raise BadRequest(415, "content-type", NOT_JSON)
    body = parse_json(await request.body())
    if not isinstance(body, dict):
        raise BadRequest(400, "body", "expected a JSON object")
    return body


def config_of(projects: Projects, project, xml, key: str) -> Optional[str]:
    """The labelling config of ``project``, ``xml`` when given (and kept for it); BadRequest 422 when either is of a
    type Label Studio never sends."""
    if isinstance(project, bool) or project is not None and not isinstance(project, (str, int)):
        raise BadRequest(422, "project", 'expected the project as Label Studio sends it: "N.TIMESTAMP"')
    if xml is not None and not isinstance(xml, str):
        raise BadRequest(422, key, "expected the labelling config as a string: <View>...</View>")
    return projects.config(project, xml)


def start_training(body: dict, retrainer: Optional[Retrainer], projects: Projects):
    """The answer to a START_TRAINING ``body``: the run started (``Retrainer.start``), or the error response (403
    saying how to turn training on, when it is off)."""
    if retrainer is None:
        return error_response(403, "action", TRAINING_OFF)
    project = project_number(body.get("project"))
    if project is None:
        return error_response(422, "project", 'expected the project: {"project": {"id": N}} (or "N.TIMESTAMP")')
    sent = body["project"].get("label_config") if isinstance(body["project"], dict) else body.get("label_config")
    if sent is not None and not isinstance(sent, str):
        return error_response(422, "label_config", "expected the labelling config as a string: <View>...</View>")
    xml = sent or next((x for k, x in projects.configs.items() if project_number(k) == project), None)
    try:
        return retrainer.start(project, text_field(xml))
    except UserError as e:
        return error_response(422, "project", str(e))


async def predict(service, raw: bytes, projects: Projects):
    """Label Studio's ``POST /predict``: ``{"results": [one prediction per task], "model_version"}`` in the names of
    the project's labelling config (``label_studio``); labels it does not offer are left out and logged."""
    try:
        body = parse_json(raw)
        if not isinstance(body, dict) or not isinstance(body.get("tasks", []), list):
            raise BadRequest(422, "tasks", 'expected {"tasks": [...], "label_config": "<View>...</View>"}')
        xml = config_of(projects, body.get("project"), body.get("label_config"), "label_config")
        if not xml:
            message = "no labelling config: connect this backend to the project in Label Studio (POST /setup)"
            raise BadRequest(422, "label_config", message)
        try:
            async with service.model() as served:  # its version names the model that predicted
                fields = text_fields(xml, len(text_inputs(served)))
                records = [record(task, fields, i, served) for i, task in enumerate(body.get("tasks", []))]
                inputs = task_inputs(service, records)
                predictions = await service.predictions(inputs, served=served) if records else []
            separator = served.loaded.run.get("task", {}).get("hierarchy_separator")
            results, dropped = answer_tasks(predictions, xml, served.name, separator)
        except ConfigError as e:
            raise BadRequest(422, "label_config", str(e)) from None
    except BadRequest as e:
        return error_response(e.status, e.field, e.message, e.headers)
    if dropped:
        print(f"label-studio: {dropped} predicted labels the project's config does not offer were left out",
              file=sys.stderr)  # fmt: skip
    return {"results": results, "model_version": served.name}


def task_inputs(service, records: list[dict]) -> list[dict]:
    """The checked inputs of the tasks' ``records``, however many: Label Studio sends every task its user selected
    for "Retrieve predictions" in one request, so ``--max-inputs`` bounds each slice the schema checks here, not the
    request (``--max-body-bytes`` still does). An error names its task: ``tasks[70]``, not ``inputs[6]``."""
    step, inputs = service.limits.max_inputs, []
    for start in range(0, len(records), step):
        try:
            inputs += service.schema.validate({INPUTS: records[start : start + step]})
        except BadRequest as e:
            where = re.sub(rf"^{INPUTS}\[(\d+)\]", lambda m, start=start: f"tasks[{start + int(m[1])}]", e.field)
            raise BadRequest(e.status, where, e.message, e.headers) from None
    return inputs


def text_inputs(served) -> tuple[str, ...]:
    """The text inputs of the model ``served``: those it was trained with (a sentence pair's ``text`` and
    ``text_pair``), its required ones for a checkpoint that does not record them."""
    return tuple(served.trained_with or served.required)


def record(task, fields: tuple[str, ...], i: int, served) -> dict:
    """The input record of Label Studio task ``i``: its ``data`` under ``fields`` (``text_fields``: both texts of
    a sentence pair) as the text inputs of the model ``served``."""
    try:
        return task_record(task, fields, text_inputs(served), f"tasks[{i}]")
    except MissingText as e:
        raise BadRequest(422, e.where, "missing: the labelling config's <Text> shows it") from None


def text_field(xml: Optional[str]) -> Optional[str]:
    """The key of a task's data that the labelling config ``xml`` shows a model of one text (``text_fields``), None
    without a config or with one that shows none."""
    try:
        return text_fields(xml)[0] if xml else None
    except ConfigError:
        return None
