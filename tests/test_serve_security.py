"""Who may use ``serve`` and where it reaches (docs/security.md): basic authentication on every route but the probes,
the routes Label Studio posts to taking only JSON (415, a malformed body 400, never 500), training from Label Studio
off unless serve starts with its address, the address fixed at start whatever ``/setup`` names, the token kept to that
address (no redirect elsewhere, https verified) and an export over the limit stopping the run. A tiny ``http.server``
on 127.0.0.1 plays Label Studio (``FakeStudio``); the last test connects a real Label Studio with its Basic
Authentication fields."""

import base64
import json
import re
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from conftest import DATA
from helpers.label_studio import TOKEN
from test_label_studio_backend import SENTIMENT, TINY
from test_label_studio_real import REVIEWS
from test_serve import ReadyClient, Server

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.data import label_studio_api
from ernie_ft.errors import UserError
from ernie_ft.serving.retrain import RUNS, Retrainer
from ernie_ft.serving.security import BasicAuth, LabelStudioAccess

USER, PASSWORD = "annotator", "s3cret:密码"  # a colon and non-ASCII: split at the first colon, UTF-8
STUDIO_PASSWORD = "s3cret: pass"  # Label Studio (Python's requests) sends Latin-1 only
EXPORT = "/api/projects/3/export"
KEY = {"LABEL_STUDIO_API_KEY": "t"}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    out = tmp_path_factory.mktemp("security") / "classify"
    flags = ["--train", str(DATA / "sentiment_train.tsv"), "--lr", "3e-3", *TINY, "--epochs", "1"]
    assert task_command("classify")([*flags, "--output", str(out)]) == 0
    return out


def app(model_dir, **options):
    from ernie_ft.serving.app import create_app
    from ernie_ft.serving.model import ServedModel

    return create_app(ServedModel(str(model_dir), "dygraph", "cpu"), **options)


class FakeStudio:
    """``http.server`` on 127.0.0.1 answering GETs as Label Studio would: ``answers`` maps a path (without its query)
    to (status, headers, body); what it was asked is kept in ``requests`` as (path, headers), and ``asked`` is set once
    it answered."""

    def __init__(self, answers: dict, context: ssl.SSLContext = None):
        self.answers, self.requests, self.asked = answers, [], threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append((self.path, dict(self.headers)))
                status, headers, body = outer.answers.get(self.path.split("?")[0], (404, {}, b"{}"))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()  # HTTP/1.0: without Content-Length the body ends when the connection closes
                self.wfile.write(body)
                outer.asked.set()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def exported(tasks) -> tuple:
    body = json.dumps(tasks).encode()
    return 200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def stderr_line(capsys, pattern: str, timeout: float = 60) -> str:
    """The first line of standard error matching ``pattern``, waiting for the run that prints it."""
    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += capsys.readouterr().err
        found = re.search(pattern, seen)
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no line matching {pattern!r}: {seen[-2000:]}")


# ------------------------------------------------------------------ basic authentication


ROUTES = [
    ("GET", "/"),
    ("GET", "/v1/info"),
    ("GET", "/v1/stats"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/label-studio/health"),
    ("POST", "/v1/predict"),
    ("POST", "/"),
    ("POST", "/label-studio/setup"),
    ("POST", "/label-studio/predict"),
    ("POST", "/label-studio/webhook"),
]


def test_basic_auth_guards_every_route_but_the_probes(classifier):
    body = {"inputs": [{"text": "房间很干净"}]}
    with ReadyClient(app(classifier, auth=BasicAuth(USER, PASSWORD))) as http:
        for method, path in ROUTES:
            for headers in ({}, basic(USER, "wrong"), basic("someone", PASSWORD), {"Authorization": "Basic !!"}):
                answer = http.request(method, path, json=body if method == "POST" else None, headers=headers)
                assert answer.status_code == 401, (method, path, headers, answer.text)
                assert answer.headers["WWW-Authenticate"].startswith('Basic realm="ernie_ft"')
                assert answer.json()["error"]["field"] == "authorization"
            allowed = http.request(method, path, json=body if method == "POST" else None, headers=basic(USER, PASSWORD))
            assert allowed.status_code != 401, (method, path)
        predicted = http.post("/v1/predict", json=body, headers=basic(USER, PASSWORD))
        assert predicted.status_code == 200 and predicted.json()["predictions"][0]["label"]
        for probe in ("/healthz", "/readyz"):
            assert http.get(probe).status_code == 200
        large = http.post("/v1/predict", content=b"x" * 2_000_000)  # refused before its body is read: 401, not 413
        assert large.status_code == 401
    latin = BasicAuth(USER, "pässwort")  # as Python's requests encodes it, and as browsers do
    for encoding in ("latin-1", "utf-8"):
        assert latin.allows(b"Basic " + base64.b64encode(f"{USER}:pässwort".encode(encoding)))
    assert not latin.allows(b"Basic " + base64.b64encode(f"{USER}:passwort".encode()))


def test_the_workers_take_basic_auth_from_the_environment_serve_read(classifier, monkeypatch):
    from fastapi.testclient import TestClient

    from ernie_ft.serving import app_from_env
    from ernie_ft.serving.limits import Limits
    from ernie_ft.serving.settings import WorkerSettings

    settings = WorkerSettings(str(classifier), "dygraph", "cpu", Limits())
    monkeypatch.setenv(WorkerSettings.ENV, settings.to_json())
    monkeypatch.setenv("BASIC_AUTH_USER", USER)
    monkeypatch.setenv("BASIC_AUTH_PASS", PASSWORD)
    with TestClient(app_from_env()) as http:
        assert http.get("/v1/info").status_code == 401
        assert http.get("/v1/info", headers=basic(USER, PASSWORD)).status_code == 200


@pytest.mark.parametrize(
    "environ, flags, message",
    [
        ({"BASIC_AUTH_USER": USER}, [], "BASIC_AUTH_USER is set but BASIC_AUTH_PASS is not: set both"),
        ({"BASIC_AUTH_PASS": PASSWORD}, [], "BASIC_AUTH_PASS is set but BASIC_AUTH_USER is not: set both"),
        ({}, ["--label-studio-url", "http://ls:8080"], "--label-studio-url http://ls:8080: set LABEL_STUDIO_API_KEY"),
        ({"LABEL_STUDIO_URL": "http://ls:8080"}, [], "LABEL_STUDIO_URL=http://ls:8080: set LABEL_STUDIO_API_KEY"),
        (KEY, ["--label-studio-url", "http://ls:8080/projects/3"], "without a path"),
        (KEY, ["--label-studio-url", "ftp://ls:8080"], "expected http://HOST:PORT"),
        (KEY, ["--label-studio-url", "http://ls:8", "--workers", "2"], "each worker would"),
        (KEY, ["--label-studio-url", "http://ls:8", "--label-studio-max-export-mb", "0"], "must be positive"),
    ],
)
def test_a_half_set_up_serve_is_one_error_line_before_it_starts(environ, flags, message, monkeypatch, capsys):
    for name in ("BASIC_AUTH_USER", "BASIC_AUTH_PASS", "LABEL_STUDIO_URL", "LABEL_STUDIO_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert cli(["serve", "--model", "no-such-model", "--port", "0", *flags]) == 2  # refused before the model loads
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line, line


def test_serve_warns_when_it_listens_beyond_this_machine_without_a_password():
    from ernie_ft.serving import exposure

    auth, access = BasicAuth(USER, PASSWORD), LabelStudioAccess("https://ls.example.com", "t")
    for host in ("0.0.0.0", "::", "192.168.1.7", "ernie.example.com"):
        [line] = exposure(host, None, None)
        assert line.startswith(f"warning: --host {host}: any machine that reaches this port") and "BASIC_AUTH" in line
        assert exposure(host, auth, None) == []
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure(host, None, None) == []
    assert exposure("127.0.0.1", None, access) == [
        "Start training in Label Studio trains from https://ls.example.com (--label-studio-url)"
    ]


# ------------------------------------------------------------------ JSON only, never a 500


def test_label_studios_routes_take_only_json_and_a_malformed_body_is_400(classifier, tmp_path):
    access = LabelStudioAccess("http://127.0.0.1:9", "token")  # the discard port: a run would fail, none starts
    with ReadyClient(app(classifier, label_studio=access, runs=str(tmp_path / "runs"))) as http:
        for path in ("/label-studio/setup", "/label-studio/webhook", "/label-studio/train", "/label-studio/predict"):
            body = json.dumps({"action": "START_TRAINING", "project": {"id": 1}})
            for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
                headers = {"Content-Type": kind} if kind else {}
                answer = http.post(path, content=body, headers=headers)  # what a web page posts without a preflight
                assert answer.status_code == 415, (path, kind, answer.text)
                assert "application/json" in answer.json()["error"]["message"]
            for raw in (b"notjson", b"", b"{", b"[1, 2]", b'"text"'):
                answer = http.post(path, content=raw, headers={"Content-Type": "application/json"})
                malformed = raw in (b"notjson", b"", b"{")
                expected = 400 if malformed or not path.endswith("predict") else 422  # predict names "tasks"
                assert answer.status_code == expected, (path, raw, answer.text)
            odd = [  # none names a project a run could start for
                {"project": {"id": [1]}, "schema": "<View/>"},
                {"project": "x1.2", "schema": 5},
                {"project": True, "label_config": "<View/>", "tasks": []},
                {"action": "START_TRAINING", "project": {"id": 1, "label_config": 5}},
                {"action": "START_TRAINING", "project": [1]},
                {"action": ["START_TRAINING"], "project": {"id": 1}},
            ]
            for shape in odd:
                answer = http.post(path, json=shape)
                assert answer.status_code < 500, (path, shape, answer.text)
    assert not (tmp_path / "runs").exists()  # none of them started a run


# ------------------------------------------------------------------ training from Label Studio: off unless asked


def test_training_is_off_without_the_opt_in_and_contacts_nothing(classifier, tmp_path, capsys):
    with FakeStudio({EXPORT: exported([])}) as elsewhere:
        with ReadyClient(app(classifier, runs=str(tmp_path / "runs"))) as http:
            setup = {"project": "3.1700000000", "schema": SENTIMENT, "hostname": elsewhere.url, "access_token": "x"}
            assert http.post("/label-studio/setup", json=setup).status_code == 200
            for path, body in (("/label-studio/webhook", {"action": "START_TRAINING", "project": {"id": 3}}),
                               ("/label-studio/train", {"project": "3.1700000000"})):  # fmt: skip
                answer = http.post(path, json=body)
                assert answer.status_code == 403, answer.text
                message = answer.json()["error"]["message"]
                assert "\n" not in message and "--label-studio-url URL" in message and "LABEL_STUDIO_API_KEY" in message
            event = http.post("/label-studio/webhook", json={"action": "ANNOTATION_CREATED", "project": {"id": 3}})
            assert event.json() == {"status": "ignored", "action": "ANNOTATION_CREATED"}
        assert elsewhere.requests == []
    assert not (tmp_path / "runs").exists()
    assert "label-studio: project" not in capsys.readouterr().err


def test_runs_fetch_from_the_address_serve_started_with_whatever_setup_names(classifier, tmp_path, capsys):
    with FakeStudio({EXPORT: exported([])}) as studio_, FakeStudio({EXPORT: exported([])}) as elsewhere:
        access = LabelStudioAccess(studio_.url, "the-token")
        with ReadyClient(app(classifier, label_studio=access, runs=str(tmp_path / "runs"))) as http:
            for _ in range(2):
                setup = {"project": "3.17", "schema": SENTIMENT, "hostname": elsewhere.url, "access_token": "other"}
                assert http.post("/label-studio/setup", json=setup).status_code == 200
            said = f"label-studio: /setup named Label Studio at {elsewhere.url}; runs fetch from {studio_.url} only"
            assert capsys.readouterr().err.count(said) == 1  # once, not at every setup
            same = {"project": "3.17", "schema": SENTIMENT, "hostname": studio_.url + "/", "access_token": "other"}
            assert http.post("/label-studio/setup", json=same).status_code == 200
            assert "/setup named" not in capsys.readouterr().err
            started = http.post("/label-studio/webhook", json={"action": "START_TRAINING", "project": {"id": 3}})
            assert started.json()["status"] == "started", started.text
            assert studio_.asked.wait(60)  # the run fetched the export; leaving the client ends it
        [(path, headers)] = studio_.requests
        assert path == EXPORT + "?exportType=JSON" and headers["Authorization"] == "Token the-token"
        assert elsewhere.requests == []


def test_an_export_over_the_limit_stops_the_run_with_a_line(classifier, tmp_path, capsys):
    tasks = [{"id": i, "data": {"comment": "好" * 100}, "annotations": []} for i in range(50)]  # about 15 KB
    with FakeStudio({EXPORT: exported(tasks)}) as studio_:
        access = LabelStudioAccess(studio_.url, "the-token", max_export_bytes=10_000)
        with ReadyClient(app(classifier, label_studio=access, runs=str(tmp_path / "runs"))) as http:
            http.post("/label-studio/webhook", json={"action": "START_TRAINING", "project": {"id": 3}})
            line = stderr_line(capsys, r"label-studio: project 3: \S+ failed: .*")
    assert re.search(r"export is over [\d.]+ MB, serve's limit; raise it with serve --label-studio-max-export-mb", line)
    assert line.endswith(" still"), line  # the served model stays


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-closed"])
def test_the_export_limit_holds_with_or_without_a_content_length(declared):
    body = json.dumps([{"id": i, "data": {"text": "x" * 100}} for i in range(100)]).encode()
    headers = {"Content-Length": str(len(body))} if declared else {}
    with FakeStudio({EXPORT: (200, headers, body)}) as studio_:
        project = LabelStudioAccess(studio_.url, "t", max_export_bytes=len(body) - 1).project(3)
        with pytest.raises(UserError, match="export is over"):
            label_studio_api.fetch_export(project, "--train", {"LABEL_STUDIO_API_KEY": "t"})
        fits = LabelStudioAccess(studio_.url, "t", max_export_bytes=len(body)).project(3)
        assert len(label_studio_api.fetch_export(fits, "--train", {"LABEL_STUDIO_API_KEY": "t"})) == 100


# ------------------------------------------------------------------ the token stays with Label Studio's address


def test_a_redirect_to_another_host_never_gets_the_token(tmp_path):
    with FakeStudio({"/api/projects/4/export/": exported([{"id": 1}])}) as elsewhere:
        away = elsewhere.url.replace("127.0.0.1", "localhost") + "/api/projects/4/export/?exportType=JSON"
        with FakeStudio({EXPORT: (302, {"Location": away, "Content-Length": "0"}, b"")}) as studio_:
            retrainer = Retrainer(lambda: None, None, LabelStudioAccess(studio_.url, "the-token"), str(tmp_path))
            project, token = retrainer.source(3)
            with pytest.raises(UserError, match=f"redirected to {re.escape(away)}, another address") as refused:
                label_studio_api.fetch_export(label_studio_api.parse(project, "--train"), "--train",
                                              {"LABEL_STUDIO_API_KEY": token})  # fmt: skip
            assert "the-token" not in str(refused.value)
        assert elsewhere.requests == []
    # a redirect on the same address (a trailing slash) is followed, with the token
    moved = {EXPORT: (301, {"Location": "/api/projects/3/export/?exportType=JSON", "Content-Length": "0"}, b""),
             EXPORT + "/": exported([{"id": 1}])}  # fmt: skip
    with FakeStudio(moved) as studio_:
        project, token = Retrainer(lambda: None, None, LabelStudioAccess(studio_.url, "tk"), str(tmp_path)).source(3)
        assert label_studio_api.fetch_export(project, "--train", {"LABEL_STUDIO_API_KEY": token}) == [{"id": 1}]
        assert [h["Authorization"] for _, h in studio_.requests] == ["Token tk", "Token tk"]


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for 127.0.0.1 and its key (``openssl``)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    return cert, key


def test_https_stays_https_and_its_certificate_is_checked(certificate, tmp_path, monkeypatch):
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with FakeStudio({EXPORT: exported([{"id": 7}])}, context) as studio_:
        access = LabelStudioAccess(studio_.url, "the-token")
        project, token = Retrainer(lambda: None, None, access, str(tmp_path)).source(3)
        assert project.base == studio_.url  # https, not http to the same port
        environ = {"LABEL_STUDIO_API_KEY": token}
        with pytest.raises(UserError, match="TLS certificate of .* is not trusted .*SSL_CERT_FILE"):
            label_studio_api.fetch_export(project, "--train", environ)
        assert studio_.requests == []  # the handshake failed: nothing was sent
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the certificate trusted: the export is read over TLS
        assert label_studio_api.fetch_export(project, "--train", environ) == [{"id": 7}]
        [(_, headers)] = studio_.requests
        assert headers["Authorization"] == "Token the-token"


# ------------------------------------------------------------------ a real Label Studio's Basic Authentication


def test_label_studio_connects_with_basic_auth_fields_and_stores_predictions(studio, classifier, tmp_path):  # noqa: F811
    studio.wait_up()
    env = {"BASIC_AUTH_USER": USER, "BASIC_AUTH_PASS": STUDIO_PASSWORD, "LABEL_STUDIO_API_KEY": TOKEN}
    server = Server(str(classifier), tmp_path, "--label-studio-url", studio.url, env=env)
    try:
        server.wait_ready()
        backend = {"url": server.url + "/label-studio", "title": "ernie_ft"}
        project = studio.project("ernie_ft basic auth", SENTIMENT)
        headers = {"Authorization": f"Token {TOKEN}"}
        for fields in ({}, {"auth_method": "BASIC_AUTH", "basic_auth_user": USER, "basic_auth_pass": "wrong"}):
            refused = httpx.post(studio.url + "/api/ml", json={**backend, "project": project, **fields},
                                 headers=headers, timeout=120)  # fmt: skip
            assert refused.status_code == 400 and "authentication parameters" in refused.text, refused.text
        auth = {"auth_method": "BASIC_AUTH", "basic_auth_user": USER, "basic_auth_pass": STUDIO_PASSWORD}
        ml = studio.api("POST", "/api/ml", {**backend, "project": project, **auth})
        assert ml["readable_state"] == "Connected", ml
        studio.api("POST", f"/api/projects/{project}/import", [{"comment": t} for t in REVIEWS])
        action = f"/api/dm/actions?id=retrieve_tasks_predictions&project={project}"
        studio.api("POST", action, {"selectedItems": {"all": True, "excluded": []}})
        stored = studio.predictions(project)
        assert set(stored) == {t["id"] for t in studio.tasks(project)} and len(stored) == len(REVIEWS)
        assert all(p["result"][0]["value"]["choices"] for found in stored.values() for p in found)
        # Start training: Label Studio's webhook carries the credentials, the run fetches from --label-studio-url
        assert httpx.post(f"{studio.url}/api/ml/{ml['id']}/train", json={}, headers=headers, timeout=120).is_success
        deadline = time.monotonic() + 120
        while not re.search(rf"label-studio: project {project}: \S*{RUNS}/\d+", server.output()):
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.2)
        assert f"runs fetch from {studio.url} only" in server.output()  # Label Studio calls itself localhost
    finally:
        server.stop()
