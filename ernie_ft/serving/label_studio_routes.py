"""The routes of Label Studio's ML backend protocol under ``/label-studio`` (``label_studio`` says what they answer),
registered on ``serve``'s application by ``add_routes``: health, setup, predict, and the training webhook whose runs
(``retrain``) swap a new model in."""

import sys
from typing import Optional

from ernie_ft.data.label_config import MissingText, task_record, text_fields
from ernie_ft.errors import UserError
from ernie_ft.serving.label_studio import ConfigError, Projects, answer_tasks
from ernie_ft.serving.retrain import Retrainer, project_number
from ernie_ft.serving.schemas import INPUTS, BadRequest, error_response, parse_json

PREFIX = "/label-studio"
"""Where the protocol's routes are: a project's backend URL is ``http://HOST:PORT/label-studio``."""


def add_routes(app, service, retrain: bool, runs: Optional[str] = None) -> Optional[Retrainer]:
    """Register the ``/label-studio`` routes on the FastAPI ``app`` answering with ``service`` (``app.Service``).
    ``retrain``: "Start training" trains and swaps in a new model, in runs under ``runs`` (``retrain.Retrainer``);
    else it is refused. Returns the retrainer (None without), which the application stops when it stops."""
    from fastapi import Request  # FastAPI reads the routes' annotations: no ``from __future__ import annotations`` here

    projects = Projects()
    retrainer = Retrainer(lambda: service.served, service.swap_in, runs) if retrain else None

    @app.get(f"{PREFIX}/health", summary="Label Studio ML backend: health")
    @app.get(f"{PREFIX}/", include_in_schema=False)
    async def label_studio_health():
        model = service.served
        return {"status": "UP", "model_class": f"ernie_ft {model.task.name}", "model_version": model.name}

    @app.post(f"{PREFIX}/setup", summary="Label Studio ML backend: a project's labelling config")
    async def label_studio_setup(request: Request):
        body = await request.json()
        projects.config(body.get("project"), body.get("schema"))
        if retrainer is not None:
            retrainer.connect(body.get("project"), body.get("hostname"), body.get("access_token"))
        return {"model_version": service.served.name}

    @app.post(f"{PREFIX}/webhook", summary="Label Studio ML backend: events; START_TRAINING trains a new model")
    @app.post(f"{PREFIX}/train", summary="Label Studio ML backend: train (Label Studio before its webhook)")
    async def label_studio_train(request: Request):
        body = parse_json(await request.body())
        body = body if isinstance(body, dict) else {}
        action = body.get("action", "START_TRAINING" if request.url.path.endswith("/train") else None)
        if action != "START_TRAINING":  # Label Studio sends every project event here: only training is ours
            return {"status": "ignored", "action": action}
        return start_training(body, retrainer, projects)

    @app.post(f"{PREFIX}/predict", summary="Label Studio ML backend: predictions for tasks")
    async def label_studio_predict(request: Request):
        return await service.counted(lambda raw: predict(service, raw, projects), request)

    return retrainer


def start_training(body: dict, retrainer: Optional[Retrainer], projects: Projects):
    """The answer to a START_TRAINING ``body``: the run started (``Retrainer.start``), or the error response."""
    project = project_number(body.get("project"))
    if project is None:
        return error_response(422, "project", 'expected the project: {"project": {"id": N}} (or "N.TIMESTAMP")')
    if retrainer is None:
        message = "serve with several --workers cannot train from Label Studio: each worker would swap its own"
        return error_response(409, "action", message + "; run serve --workers 1")
    sent = body["project"].get("label_config") if isinstance(body["project"], dict) else body.get("label_config")
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
        xml = projects.config(body.get("project"), body.get("label_config"))
        if not xml:
            message = "no labelling config: connect this backend to the project in Label Studio (POST /setup)"
            raise BadRequest(422, "label_config", message)
        try:
            async with service.model() as served:  # its version names the model that predicted
                fields = text_fields(xml, len(text_inputs(served)))
                records = [record(task, fields, i, served) for i, task in enumerate(body.get("tasks", []))]
                inputs = service.schema.validate({INPUTS: records}) if records else []
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
