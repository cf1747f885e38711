"""The HTTP application: routes, the request-body limit, readiness after a warm-up, and the page.

Requests are parsed off the event loop; their windows go through the ``Batcher`` together with those of
concurrent requests. A full queue answers 503 with Retry-After; a bad request gets a 4xx whose JSON names
the field (``schemas.error_body``).
"""

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.serving import label_studio_routes
from ernie_ft.serving.batcher import Batcher, QueueFull, Stats
from ernie_ft.serving.hf_tasks import KINDS, TaskAPI
from ernie_ft.serving.limits import CPU_FORWARD_BATCH, Limits
from ernie_ft.serving.model import ServedModel
from ernie_ft.serving.schemas import BadRequest, RequestBody, error_response, named_field, parse_json
from ernie_ft.serving.security import BasicAuth, BasicAuthMiddleware, LabelStudioAccess, send_error

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
HF_ROUTE = (
    'What huggingface_hub\'s InferenceClient(model=URL) posts: {"inputs": ..., "parameters": {...}}; the answer '
    "in the shape of Hugging Face's task API for the model's head (text classification, token classification, "
    "question answering)."
)


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, by Content-Length or while it streams in."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send):
        message = (
            f"the request body is over {self.limit} bytes; send fewer or shorter inputs, or raise serve "
            "--max-body-bytes"
        )
        await send_error(send, 413, "body", message)


class _TooLarge(Exception):
    pass


class Service:
    """What the routes share: the model, its batcher, the parsing threads, the counters, readiness."""

    def __init__(self, served: ServedModel, limits: Limits):
        if not limits.forward_batch_size:  # CPU: the pass size that costs least per window, per engine
            on_cpu = min(CPU_FORWARD_BATCH[served.engine], limits.max_batch_size)
            limits = replace(limits, forward_batch_size=limits.max_batch_size if served.on_gpu else on_cpu)
        self.served, self.limits, self.stats = served, limits, Stats()
        self.schema = RequestBody(served.required, served.optional, limits, served.input_names())
        self.hf = TaskAPI(served.task.head, self.schema)
        self.ready = False
        self.batcher: Optional[Batcher] = None
        self.prepare_pool = ThreadPoolExecutor(2, thread_name_prefix="ernie_ft-prepare")
        self.using = 0  # requests answering with ``served``: a swap waits for them
        self.open: Optional[asyncio.Event] = None  # cleared while a swap waits: new requests wait for the new model
        self.idle: Optional[asyncio.Event] = None

    @asynccontextmanager
    async def model(self):
        """The served model for one request, the same model from its first window to its answer: a swap
        (``swap``) waits until the requests that use the old model are answered, and holds new ones back meanwhile."""
        await self.open.wait()
        self.using += 1
        try:
            yield self.served
        finally:
            self.using -= 1
            if not self.using:
                self.idle.set()

    async def swap(self, served: ServedModel) -> None:
        """Serve ``served`` from now on: no request sees part of one model and part of the other."""
        self.open.clear()
        try:
            while self.using:
                self.idle.clear()
                await self.idle.wait()
            self.served = served
            self.schema = RequestBody(served.required, served.optional, self.limits, served.input_names())
            self.hf = TaskAPI(served.task.head, self.schema)
        finally:
            self.open.set()

    async def swap_in(self, model_dir: str, version: str) -> None:
        """Load the checkpoint or export ``model_dir`` (off the event loop), called ``version``, as the served model
        was loaded (its engine, device, ``--task``, ``--trust-pickle``, ``--threshold``: ``ServedModel.like``), and
        swap it in."""
        old = self.served
        loaded = await asyncio.get_running_loop().run_in_executor(self.prepare_pool, old.like, model_dir, version)
        await self.swap(loaded)

    async def start(self) -> asyncio.Task:
        """Start the batcher; returns the warm-up's task."""
        self.open, self.idle = asyncio.Event(), asyncio.Event()
        self.open.set()
        self.batcher = Batcher(
            lambda features: self.served.logits(features, self.limits.forward_batch_size), self.limits, self.stats
        )
        self.batcher.start()
        return asyncio.get_running_loop().create_task(self.warm_up())

    async def stop(self) -> None:
        await self.batcher.stop()
        self.prepare_pool.shutdown(wait=False)

    async def warm_up(self) -> None:
        """One prediction through the whole path; then /readyz answers 200."""
        examples, features = await asyncio.get_running_loop().run_in_executor(
            self.prepare_pool, self.served.prepare, [self.served.example_input()]
        )
        self.served.answer(examples, features, await self.batcher.submit(features))
        self.ready = True

    async def counted(self, answer, request):
        """``answer(body)`` for a request, counted in flight (``/v1/stats``) while it runs."""
        self.stats.in_flight += 1
        try:
            return await answer(await request.body())
        finally:
            self.stats.in_flight -= 1

    async def predict(self, raw: bytes):
        try:  # parsed here, not by FastAPI: JSON whatever the Content-Type, every shape, and our own error body
            inputs, parameters = self.schema.parse_request(raw, self.served.task.decides_by_threshold)
            return {"predictions": await self.predictions(inputs, parameters.get("threshold"))}
        except BadRequest as e:
            return error_response(e.status, e.field, e.message, e.headers)

    async def hf_predict(self, raw: bytes):
        """``POST /``: the Hugging Face task API of the model's head (``hf_tasks``)."""
        try:
            if self.hf.kind is None:
                task, head = self.served.task.name, self.served.task.head
                message = f"the {task} task's {head!r} head is none of Hugging Face's {', '.join(KINDS.values())}"
                raise BadRequest(404, "body", f"{message}; use POST /v1/predict")
            request = self.hf.parse(parse_json(raw))
            return self.hf.answer(request, await self.predictions(request.inputs))
        except BadRequest as e:
            return error_response(e.status, e.field, e.message, e.headers)

    async def predictions(
        self, inputs: list[dict], threshold: Optional[float] = None, served: Optional[ServedModel] = None
    ) -> list[dict]:
        """``predict``'s records for the parsed ``inputs``, through the batcher, decided at ``threshold`` when given (a
        request's own); raises ``BadRequest`` (a 422 for a field the task refuses, a 503 while loading or with a full
        queue). The inputs are answered a group at a time (``groups``), so that a request of many long texts holds
        one group's windows and outputs at once, and other requests' batches run between its groups. ``served``: the
        model the request holds (``model``), else it is taken here."""
        if not self.ready:
            raise BadRequest(503, "model", "the model is still loading", {"Retry-After": "1"})
        if served is None:
            async with self.model() as served:
                return await self.predictions(inputs, threshold, served)
        answers = []
        for start, group in groups(inputs, self.limits.max_chars):
            answers += await self.answer_group(group, start, threshold, served)
        self.stats.requests += 1
        self.stats.inputs += len(inputs)
        return answers

    async def answer_group(
        self, inputs: list[dict], start: int, threshold: Optional[float], served: ServedModel
    ) -> list[dict]:
        """The answers to ``inputs``, the request's from index ``start`` (a refused field named by its index in the
        request)."""
        self.batcher.incoming += 1
        try:
            examples, features = await asyncio.get_running_loop().run_in_executor(
                self.prepare_pool, served.prepare, inputs
            )
        except UserError as e:  # the task's reader refused a field: its message names it (inputs[2].text)
            message = re.sub(r"\binputs\[(\d+)\]", lambda m: f"inputs[{int(m[1]) + start}]", str(e))
            raise BadRequest(422, named_field(message), message) from None
        finally:
            self.batcher.incoming -= 1  # then submit queues it without yielding to the batcher in between
        try:
            logits = await self.batcher.submit(features)
        except QueueFull:
            message = f"{self.limits.max_queue} requests are waiting; retry shortly"
            raise BadRequest(503, "queue", message, {"Retry-After": "1"}) from None
        return served.answer(examples, features, logits, threshold)


def groups(inputs: list, max_chars: int):
    """(index of the first, the inputs) of consecutive groups of ``inputs`` holding at most ``max_chars`` characters
    of text each (at least one input: a text is at most ``max_chars`` long)."""
    start, size = 0, 0
    for i, record in enumerate(inputs):
        chars = sum(len(v) for v in record.values() if isinstance(v, str)) if isinstance(record, dict) else 0
        if i > start and size + chars > max_chars:
            yield start, inputs[start:i]
            start, size = i, 0
        size += chars
    if start < len(inputs):
        yield start, inputs[start:]


def create_app(
    served: ServedModel,
    limits: Optional[Limits] = None,
    label_studio: Optional[LabelStudioAccess] = None,
    runs: Optional[str] = None,
    auth: Optional[BasicAuth] = None,
):
    """The FastAPI application serving ``served`` (default limits unless given). ``label_studio``: the Label Studio
    whose "Start training" trains and swaps in a new model (``retrain``), fetching from that address only; None (the
    default): training from Label Studio is refused. ``runs``: where those runs go (default: ``label-studio-runs``
    beside the served checkpoint). ``auth``: the credentials every route but the probes needs (``security``)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse

    limits = limits or Limits()
    service = Service(served, limits)
    retrainer = None  # set below, before the application starts

    @asynccontextmanager
    async def lifespan(app):
        warm = await service.start()
        yield
        warm.cancel()
        if retrainer is not None:
            await retrainer.stop()
        await service.stop()

    description = f"{served.task.name} model {os.path.abspath(served.model_dir)}"
    app = FastAPI(title="ernie_ft", lifespan=lifespan, description=description)
    app.state.service = service
    shapes = {"schema": service.schema.openapi(), "examples": service.schema.openapi_examples(served.example_input())}
    request_body = {"required": True, "content": {"application/json": shapes}}
    retrainer = label_studio_routes.add_routes(app, service, label_studio, runs)

    @app.post("/v1/predict", openapi_extra={"requestBody": request_body})
    async def predict(request: Request):
        return await service.counted(service.predict, request)

    @app.post("/", summary="Hugging Face task API", description=HF_ROUTE)
    async def hf_predict(request: Request):
        return await service.counted(service.hf_predict, request)

    @app.get("/v1/info")
    async def info():  # example: the task's own example input (a fill-mask model's [MASK]) for the page, else null
        model = service.served
        return {**model.info(service.limits), "example": model.task.example_input, "ready": service.ready}

    @app.get("/v1/stats")
    async def stats():
        return service.stats.to_dict(len(service.batcher.queue) if service.batcher else 0)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz():
        if not service.ready:
            return error_response(503, "model", "loading or warming up", {"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    if auth is not None:  # added last: the outermost, before the body is read
        app.add_middleware(BasicAuthMiddleware, auth=auth)
    return app
