"""``python -m ernie_ft serve``: a trained checkpoint behind an HTTP API, with a page to try it.

    POST /v1/predict  {"inputs": [{"text": "..."}, ...]}  ->  {"predictions": [...]}
                      (also {"inputs": {...}} one record, and for one-field tasks {"inputs": ["...", ...]} or
                      {"inputs": "..."}, the Hugging Face shapes: see ``schemas``)
    GET  /v1/info     task, labels, input fields, engine, limits
    GET  /v1/stats    requests, inputs, batches and their sizes, queue depth
    GET  /healthz     the process answers;   GET /readyz   the model is loaded and warmed up
    GET  /            a page to try the model;   GET /docs   the OpenAPI page

A prediction is what ``predict`` writes for the same input: the request's inputs reach the task's reader as
records in memory (``read_records``) and are cut into the same windows. Requests are parsed off the event
loop; their windows wait in a bounded queue and run through the model together, up to ``max_batch_size``
windows or ``max_wait_ms`` after the first one arrived (dynamic batching; no wait when no other request is
being read), on one model thread. A full queue answers 503 with Retry-After; bad requests get a 4xx whose
JSON names the field. uvicorn drains in-flight requests on SIGTERM, then the process exits 0.

Security (docs/security.md): 127.0.0.1 by default; with ``BASIC_AUTH_USER`` and ``BASIC_AUTH_PASS`` set every route
but ``/healthz`` and ``/readyz`` needs them; Label Studio's "Start training" is off unless serve starts with the Label
Studio to fetch from (``--label-studio-url``, ``LABEL_STUDIO_URL``).

Modules: ``limits`` (every limit, a ``serve`` flag), ``settings`` (what a ``--workers`` process starts with),
``security`` (basic authentication, the Label Studio to train from),
``model`` (the loaded checkpoint), ``batcher`` (dynamic batching and its counters), ``schemas`` (the request and error
bodies), ``app`` (routes, body limit, page), ``label_studio`` and ``label_studio_routes`` (Label Studio's ML backend
protocol under ``/label-studio``), ``retrain`` (its "Start training"), ``run_data`` (a run's data and recipe), ``runs``
(one run at a time, run directories).
"""

from __future__ import annotations

import os
import signal
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.serving.limits import Limits
from ernie_ft.serving.security import BasicAuth, LabelStudioAccess
from ernie_ft.serving.settings import EXPORTS, WorkerSettings

__all__ = ["Limits", "WorkerSettings", "app_from_env", "serve"]


def app_from_env():
    """The application of one ``--workers`` process, from the ``WorkerSettings`` that ``serve`` left in the
    environment (uvicorn's factory). The worker is a process ernie_ft starts, so it hides the libraries' noise
    (PaddleNLP's INFO lines, Paddle's import warnings) as the command line does. Its basic authentication is read from
    the environment it inherited, as ``serve`` read it."""
    from ernie_ft.training.quiet import quiet_process

    quiet_process()
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    settings = WorkerSettings.from_json(os.environ[WorkerSettings.ENV])
    served = ServedModel(
        settings.model_dir,
        settings.engine,
        settings.device,
        settings.trust_pickle,
        settings.task,
        settings.name,
        settings.threshold,
    )
    return create_app(served, settings.limits, auth=BasicAuth.from_environ(os.environ))


def serve(
    model_dir: str,
    host: str,
    port: int,
    engine: str,
    device: str,
    limits: Limits,
    export: str | bool | None = None,
    calibration: Optional[str] = None,
    workers: int = 1,
    trust_pickle: bool = False,
    task: Optional[str] = None,
    log_level: str = "info",
    name: Optional[str] = None,
    threshold: Optional[float] = None,
    label_studio: Optional[LabelStudioAccess] = None,
    auth: Optional[BasicAuth] = None,
) -> int:
    """Load the model (with ``export``, one of ``EXPORTS``, after exporting it; ``calibration``: the file an int8
    export calibrates on, ``--calibrate``), then serve it until SIGTERM or Ctrl-C; returns 0.

    With ``workers`` > 1, uvicorn runs that many processes, each with its own model and batcher, on one port;
    the model is loaded here first so that a bad checkpoint fails before any starts. ``task`` is a task spec
    (``file.py:Class``) passed on to the loader. ``name``: what clients are told the model is called (default: the
    directory's last part, ``inference.outputs.model_name``). ``threshold``: the probability a model that decides by one
    decides with instead of its own (a request may give its own). ``label_studio``: the Label Studio whose "Start
    training" trains a new model (one worker only; None: off). ``auth``: the credentials every route but the probes
    needs (``security``; the ``--workers`` processes read them from the environment, as ``BasicAuth.from_environ``).
    """
    import uvicorn

    from ernie_ft.inference.outputs import model_name
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    limits.check()
    name = name or model_name(model_dir)
    if calibration is not None and export != "int8":
        raise UserError(f"--calibrate {calibration} is for static int8: add --export int8 (serve exports it first)")
    if export:
        kind = "paddle" if export is True else export
        model_dir = exported_model(model_dir, trust_pickle, task, kind, calibration)
    if workers < 1:
        raise UserError(f"--workers must be at least 1, not {workers}")
    if label_studio is not None and workers > 1:
        raise UserError(
            f"--label-studio-url with --workers {workers}: each worker would train and swap in its own model; serve "
            "with --workers 1 to train from Label Studio"
        )
    served = ServedModel(model_dir, engine, device, trust_pickle, task, name, threshold)
    sock = listen(host, port)
    # uvicorn drains in-flight requests on SIGTERM, then raises the signal again to the handler it
    # found: a no-op one, so that a drained server exits 0 (SIG_DFL would end it with -15).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    options = {"host": host, "port": port, "log_level": log_level, "timeout_graceful_shutdown": 30}
    if workers == 1:
        config = uvicorn.Config(create_app(served, limits, label_studio, auth=auth), **options)
    else:
        settings = WorkerSettings(model_dir, served.engine, device, limits, trust_pickle, task, name, threshold)
        os.environ[WorkerSettings.ENV] = settings.to_json()
        config = uvicorn.Config("ernie_ft.serving:app_from_env", factory=True, workers=workers, **options)
    print(
        f"serving {served.task.name} model {model_dir} ({served.engine}, {workers} worker"
        f"{'s' if workers > 1 else ''}) on http://{host}:{sock.getsockname()[1]}/",
        flush=True,
    )
    del served
    for line in exposure(host, auth, label_studio):
        print(line, flush=True)
    with sock:
        if workers == 1:
            uvicorn.Server(config).run(sockets=[sock])
        else:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[sock]).run()
    return 0


def exposure(host: str, auth: Optional[BasicAuth], label_studio: Optional[LabelStudioAccess]) -> list[str]:
    """What ``serve`` says at start about who can use it: training from Label Studio, when on, and a warning for an
    address other machines reach without basic authentication."""
    lines = []
    if label_studio is not None:
        lines.append(f"Start training in Label Studio trains from {label_studio.url} (--label-studio-url)")
    if auth is None and not is_loopback(host):
        lines.append(
            f"warning: --host {host}: any machine that reaches this port can use the model and every route; set "
            "BASIC_AUTH_USER and BASIC_AUTH_PASS (docs/security.md)"
        )
    return lines


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def listen(host: str, port: int):
    """The socket the server accepts on, bound here so that the line ``serve`` prints names the port it got: with
    ``--port 0`` the system picks a free one (what the tests do), never a port found free, released and bound again
    (another process can take it in between). A port that cannot be had is one error line."""
    import socket

    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and without it
    # a keep-alive client waits out its delayed ACK (40 ms) between the response's headers and body
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        reason = f"--host {host} --port {port}: cannot listen there ({e.strerror})"
        raise UserError(f"{reason}; --port 0 picks a free port") from None
    sock.set_inheritable(True)  # uvicorn's worker processes accept on it too
    return sock


def exported_model(
    model_dir: str, trust_pickle: bool, task: Optional[str] = None, kind: str = "paddle", calibration=None
) -> str:
    """The export of ``model_dir`` of ``kind`` (``serve --export KIND``): the checkpoint itself when it is one,
    else ``DIR-exported`` (``-onnx``, ``-int8``) beside it, written now (recording ``task``, a task spec, if
    given) unless it is newer than the checkpoint. ``calibration``: the file an int8 export calibrates on (default:
    the run's training file); an export of before is reused only if it was calibrated on it and is newer."""
    from ernie_ft.inference.export import check_calibration, export
    from ernie_ft.inference.onnx import onnx_file
    from ernie_ft.inference.static_graph import graph_file
    from ernie_ft.training import checkpoint

    precision = "int8" if kind == "int8" else "fp32"

    def holds(directory) -> bool:  # a path, or the checkpoint as read
        if not isinstance(directory, str):
            return bool(directory.graph if kind == "paddle" else directory.onnx(precision))
        return bool(graph_file(directory) if kind == "paddle" else onnx_file(directory, precision))

    if calibration is not None:
        check_calibration(calibration)
    found = checkpoint.checkpoint_dir(model_dir)  # read once, for what it holds and for the export
    source = found.path
    exported = source.rstrip("/") + EXPORTS[kind]
    if holds(found):
        if calibration is not None:
            raise UserError(
                f"--calibrate {calibration}: --model {model_dir} is an int8 export already, which keeps no weights to "
                "calibrate again; serve its checkpoint with --export int8 --calibrate FILE"
            )
        return source
    fresh = holds(exported) and os.path.getmtime(exported) >= os.path.getmtime(source)
    if fresh and (calibration is None or _calibrated_on(exported, calibration)):
        print(f"using the export in {exported} (--export)", flush=True)
    else:
        engine = {"paddle": "Paddle Inference", "onnx": "ONNX Runtime", "int8": "ONNX Runtime int8"}[kind]
        print(f"exporting {source} to {exported} for {engine} (--export)", flush=True)
        spec = {} if task is None else {"task": task}
        if kind != "paddle":
            spec.update(format="onnx", quantize="int8" if kind == "int8" else None, calibration=calibration)
        export(found, exported, overwrite=True, trust_pickle=trust_pickle, **spec)
    return exported


def _calibrated_on(exported: str, calibration: str) -> bool:
    """Whether the int8 export ``exported`` was calibrated on a file named as ``calibration`` and is newer than it."""
    import json

    from ernie_ft.inference.onnx import INT8_FILE, MANIFEST

    try:
        with open(os.path.join(exported, MANIFEST), encoding="utf-8") as f:
            source = json.load(f)["files"][INT8_FILE].get("calibration") or ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    named = source.endswith(f" of {os.path.basename(calibration)}")
    return named and os.path.getmtime(exported) >= os.path.getmtime(calibration)
