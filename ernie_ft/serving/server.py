"""``python -m ernie_ft serve``: a trained checkpoint behind an HTTP API, with a page to try it.

    POST /v1/predict  {"inputs": [{"text": "..."}, ...]}  ->  {"predictions": [...]}
    GET  /v1/info     task, labels, input fields, engine, limits
    GET  /v1/stats    requests, inputs, batches and their sizes, queue depth
    GET  /healthz     the process answers;   GET /readyz   the model is loaded and warmed up
    GET  /            a page to try the model;   GET /docs   the OpenAPI page

A prediction is what ``predict`` writes for the same input: the request's inputs are read by the
task's own reader (as JSON Lines) and cut into the same windows. Requests are parsed off the
event loop; their windows wait in a bounded queue and run through the model together, up to
``max_batch_size`` windows or ``max_wait_ms`` after the first one arrived (dynamic batching; no
wait when no other request is being read), on one model thread. A full queue answers 503 with
Retry-After; bad requests get a 4xx whose JSON names the field. uvicorn drains in-flight requests
on SIGTERM, then the process exits 0.
"""

import asyncio
import collections
import json
import os
import re
import shutil
import signal
import tempfile
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from ernie_ft.errors import UserError
from ernie_ft.serving.limits import CPU_FORWARD_BATCH, Limits

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


# The fields of one input, per task: (required, optional). A custom task may set ``input_fields``.
INPUT_FIELDS = {
    "classify": (("text",), ("text_pair",)),
    "ner": (("text",), ()),
    "qa": (("question", "context"), ("id",)),
    "pretrain": (("text",), ()),  # fill-mask: a text with [MASK]s
}


def input_fields(task) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return getattr(task, "input_fields", None) or INPUT_FIELDS.get(task.name, (("text",), ()))


class ServedModel:
    """A loaded checkpoint that turns request inputs into ``predict``'s records, in three steps:
    ``prepare`` (read and featurize, any thread), ``logits`` (the model; one thread at a time) and
    ``answer``."""

    def __init__(self, model_dir: str, engine: str = "auto", device: str = "auto", trust_pickle: bool = False):
        import paddle

        from ernie_ft.inference.predict import load_for_inference, resolve_engine

        self.model_dir, self.engine = model_dir, resolve_engine(model_dir, engine)
        self.loaded, self.data = load_for_inference(model_dir, device, {}, self.engine, trust_pickle)
        self.task, self.labels = self.loaded.task, self.loaded.labels
        self.on_gpu = paddle.device.get_device().startswith("gpu")
        self.required, self.optional = input_fields(self.task)
        # each request's inputs pass through one small file here, read by the task's own reader
        self._tmp = tempfile.mkdtemp(prefix="ernie_ft-serve-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        weakref.finalize(self, shutil.rmtree, self._tmp, True)  # removed with the model, or at exit

    def prepare(self, inputs: list[dict]) -> tuple[list, list[dict]]:
        """(examples, features) for the inputs, as ``predict`` makes them from a JSONL file (without
        its tokenisation cache); a UserError names the input (``inputs[i]``)."""
        fd, path = tempfile.mkstemp(suffix=".jsonl", dir=self._tmp)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in inputs)
            try:
                examples = self.task.read(path, self.data, "inputs", labelled=False)
                encodings = self.loaded.pipeline.encode_many(self.task.texts(examples))
                features = self.task.featurize(examples, encodings, self.loaded.pipeline, self.labels, self.data)
            except UserError as e:  # "inputs: /dev/shm/.../x.jsonl:3: ..." -> "inputs[2]: ..."
                message = re.sub(re.escape(path) + r":(\d+)(:\d+)?", lambda m: f"[{int(m.group(1)) - 1}]", str(e))
                raise UserError(message.replace(f"inputs: {path}", "inputs").replace(path, "the request")) from None
        finally:
            os.unlink(path)
        if not features:
            raise UserError("inputs: no model input could be built from the request")
        return examples, features

    def logits(self, features: list[dict], batch_size: int):
        from ernie_ft.models.modeling import compute_logits, task_batching

        return compute_logits(
            self.loaded.model,
            features,
            self.loaded.pipeline.pad_id,
            batch_size,
            head=self.task.head,
            **task_batching(self.task, self.loaded.pipeline),
        )

    def answer(self, examples: list, features: list[dict], logits) -> list[dict]:
        return self.task.predict(logits, features, examples, self.labels, self.data)

    def info(self, limits: Limits) -> dict:
        return {
            "task": self.task.name,
            "head": self.task.head,
            "labels": self.labels,
            "model": os.path.abspath(self.model_dir),
            "engine": self.engine,
            "inputs": {"required": list(self.required), "optional": list(self.optional)},
            "limits": asdict(limits),
        }


class QueueFull(Exception):
    pass


@dataclass
class _Job:
    features: list[dict]
    future: asyncio.Future


@dataclass
class Stats:
    requests: int = 0  # answered
    in_flight: int = 0  # received, not yet answered
    inputs: int = 0
    rejected: int = 0
    batches: int = 0
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)

    def to_dict(self, queued: int) -> dict:
        return {
            "requests": self.requests,
            "in_flight": self.in_flight,
            "inputs": self.inputs,
            "rejected_queue_full": self.rejected,
            "batches": self.batches,
            "queued": queued,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
        }


class Batcher:
    """Windows of concurrent requests, run through ``run(features)`` together on one thread.

    ``submit`` waits for its own rows of the result. A batch closes at ``max_batch_size`` windows,
    ``max_wait_ms`` after its first job, or once no request is ``incoming`` (being read); a request
    with more windows than that runs alone (``run`` cuts it into batches). At most ``max_queue``
    requests wait; ``submit`` raises QueueFull beyond.
    """

    def __init__(self, run, limits: Limits, stats: Stats):
        self.run, self.limits, self.stats = run, limits, stats
        self.queue: collections.deque[_Job] = collections.deque()
        self.incoming = 0  # requests being read (prepared) that will submit next: company worth waiting for
        self.wakeup = asyncio.Event()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="ernie_ft-model")
        self.task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)

    async def submit(self, features: list[dict]):
        if len(self.queue) >= self.limits.max_queue:
            self.stats.rejected += 1
            raise QueueFull
        job = _Job(features, asyncio.get_running_loop().create_future())
        self.queue.append(job)
        self.wakeup.set()
        return await job.future

    def _take(self) -> list[_Job]:
        jobs, size = [], 0
        while self.queue and (not jobs or size + len(self.queue[0].features) <= self.limits.max_batch_size):
            job = self.queue.popleft()
            jobs.append(job)
            size += len(job.features)
        return jobs

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
            deadline = loop.time() + self.limits.max_wait_ms / 1000
            while (
                self.incoming
                and sum(len(j.features) for j in self.queue) < self.limits.max_batch_size
                and loop.time() < deadline
            ):
                self.wakeup.clear()
                try:
                    await asyncio.wait_for(self.wakeup.wait(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
            jobs = [job for job in self._take() if not job.future.cancelled()]
            if not jobs:
                continue
            features = [f for job in jobs for f in job.features]
            self.stats.batches += 1
            self.stats.batch_sizes[len(features)] += 1
            try:
                outputs = await loop.run_in_executor(self.executor, self.run, features)
            except Exception as e:  # a bug of ours: fail these requests, keep serving
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(e)
                continue
            start = 0
            for job in jobs:
                rows = outputs[start : start + len(job.features)]
                start += len(job.features)
                if not job.future.done():
                    job.future.set_result(rows)


def _error(status: int, field_name: str, message: str, headers: Optional[dict] = None):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"field": field_name, "message": message}}, status_code=status, headers=headers)


def _field_path(loc) -> str:
    """pydantic's ('body', 'inputs', 0, 'text') -> 'inputs[0].text'."""
    path = ""
    for part in loc:
        if part == "body":
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


def request_model(required, optional, limits: Limits):
    """The pydantic schema of a request: ``{"inputs": [{field: text, ...}, ...]}``."""
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


def _inline_refs(schema: dict) -> dict:
    """A JSON schema with its ``$defs`` written in place of their ``$ref``s, for the OpenAPI page."""
    defs = schema.pop("$defs", {})

    def resolve(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    return resolve(schema)


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
        body = json.dumps(
            {
                "error": {
                    "field": "body",
                    "message": f"the request body is over {self.limit} bytes; send fewer or shorter inputs",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class Service:
    """What the routes share: the model, its batcher, the parsing threads, the counters, readiness."""

    def __init__(self, served: ServedModel, limits: Limits):
        if not limits.forward_batch_size:  # CPU: a pass of 32 windows costs more per window than two of 16
            limits = replace(
                limits,
                forward_batch_size=limits.max_batch_size
                if served.on_gpu
                else min(CPU_FORWARD_BATCH, limits.max_batch_size),
            )
        self.served, self.limits, self.stats = served, limits, Stats()
        self.schema = request_model(served.required, served.optional, limits)
        self.ready = False
        self.batcher: Optional[Batcher] = None
        self.prepare_pool = ThreadPoolExecutor(2, thread_name_prefix="ernie_ft-prepare")

    async def start(self) -> asyncio.Task:
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
        example = getattr(self.served.task, "example_input", None) or dict.fromkeys(
            self.served.required, "你好，世界。"
        )
        examples, features = await asyncio.get_running_loop().run_in_executor(
            self.prepare_pool, self.served.prepare, [example]
        )
        self.served.answer(examples, features, await self.batcher.submit(features))
        self.ready = True

    async def predict(self, raw: bytes):
        from pydantic import ValidationError

        try:  # parsed here, not by FastAPI: JSON whatever the Content-Type, and our own error shape
            body = self.schema.model_validate_json(raw)
        except ValidationError as e:
            first = e.errors()[0]
            if first["type"] == "json_invalid":
                return _error(400, "body", f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}")
            return _error(422, _field_path(first["loc"]), first["msg"])
        if not self.ready:
            return _error(503, "model", "the model is still loading", {"Retry-After": "1"})
        inputs = [item.model_dump(exclude_none=True) for item in body.inputs]
        self.batcher.incoming += 1
        try:
            examples, features = await asyncio.get_running_loop().run_in_executor(
                self.prepare_pool, self.served.prepare, inputs
            )
        except UserError as e:
            return _error(422, "inputs", str(e))
        finally:
            self.batcher.incoming -= 1  # then submit queues it without yielding to the batcher in between
        try:
            logits = await self.batcher.submit(features)
        except QueueFull:
            return _error(
                503, "queue", f"{self.limits.max_queue} requests are waiting; retry shortly", {"Retry-After": "1"}
            )
        self.stats.requests += 1
        self.stats.inputs += len(inputs)
        return {"predictions": self.served.answer(examples, features, logits)}


def create_app(served: ServedModel, limits: Optional[Limits] = None):
    """The FastAPI application serving ``served`` (default limits unless given)."""
    limits = limits or Limits()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse

    service = Service(served, limits)

    @asynccontextmanager
    async def lifespan(app):
        warm = await service.start()
        yield
        warm.cancel()
        await service.stop()

    app = FastAPI(
        title="ernie_ft", lifespan=lifespan, description=f"{served.task.name} model {os.path.abspath(served.model_dir)}"
    )
    schema = _inline_refs(service.schema.model_json_schema())
    app.state.service = service

    @app.post(
        "/v1/predict",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}},
    )
    async def predict(request: Request):
        service.stats.in_flight += 1
        try:
            return await service.predict(await request.body())
        finally:
            service.stats.in_flight -= 1

    @app.get("/v1/info")
    async def info():
        return {**served.info(service.limits), "ready": service.ready}

    @app.get("/v1/stats")
    async def stats():
        return service.stats.to_dict(len(service.batcher.queue) if service.batcher else 0)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz():
        if not service.ready:
            return _error(503, "model", "loading or warming up", {"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    return app


ENV = "ERNIE_FT_SERVE"


def app_from_env():
    """The application of one ``--workers`` process: ``serve`` passes the settings in ``ERNIE_FT_SERVE``."""
    settings = json.loads(os.environ[ENV])
    return create_app(
        ServedModel(settings["model_dir"], settings["engine"], settings["device"], settings["trust_pickle"]),
        Limits(**settings["limits"]),
    )


def serve(
    model_dir: str,
    host: str,
    port: int,
    engine: str,
    device: str,
    limits: Limits,
    export_first: bool = False,
    workers: int = 1,
    log_level: str = "info",
    trust_pickle: bool = False,
) -> int:
    """Load (and if asked export) the model, then serve it until SIGTERM or Ctrl-C; returns 0.

    With ``workers`` > 1, uvicorn runs that many processes, each with its own model and batcher,
    on one port; the model is loaded here first so that a bad checkpoint fails before any starts.
    """
    import uvicorn

    from ernie_ft.training import checkpoint

    limits.check()
    if export_first:
        from ernie_ft.inference.export import export, graph_file

        source = checkpoint.resolve_model_dir(model_dir)
        exported = source.rstrip("/") + "-exported"
        if graph_file(source):
            exported = source
        elif graph_file(exported) and os.path.getmtime(exported) >= os.path.getmtime(source):
            print(f"using the export in {exported} (--export)", flush=True)
        else:
            print(f"exporting {source} to {exported} for Paddle Inference (--export)", flush=True)
            export(source, exported, overwrite=True, trust_pickle=trust_pickle)
        model_dir = exported
    if workers < 1:
        raise UserError(f"--workers must be at least 1, not {workers}")
    served = ServedModel(model_dir, engine, device, trust_pickle)
    # uvicorn drains in-flight requests on SIGTERM, then raises the signal again to the handler it
    # found: a no-op one, so that a drained server exits 0 (SIG_DFL would end it with -15).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    print(
        f"serving {served.task.name} model {model_dir} ({served.engine}, {workers} worker"
        f"{'s' if workers > 1 else ''}) on http://{host}:{port}/",
        flush=True,
    )
    if workers == 1:
        uvicorn.run(create_app(served, limits), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=30)
        return 0
    os.environ[ENV] = json.dumps(
        {
            "model_dir": model_dir,
            "engine": served.engine,
            "device": device,
            "trust_pickle": trust_pickle,
            "limits": asdict(limits),
        }
    )
    del served
    uvicorn.run(
        "ernie_ft.serving.server:app_from_env",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=30,
    )
    return 0
