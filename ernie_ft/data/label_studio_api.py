"""Training from a Label Studio project: ``--train label-studio://HOST:PORT/PROJECT`` fetches the project's export
through Label Studio's REST API (``GET /api/projects/PROJECT/export?exportType=JSON``: its annotated tasks), with the
access token in the environment variable ``LABEL_STUDIO_API_KEY``, and saves it as a file that trains as any Label
Studio export (``annotations.load``).

The token is sent as ``Authorization: Token ...`` (Label Studio's legacy tokens); a personal access token (a JWT,
Label Studio's default since 1.16) is first exchanged for an access token at ``/api/token/refresh`` and sent as
``Bearer``. An unreachable host, a refused token (401) and a missing project (404) are each one error naming the URL
and what to do.

The token goes to the project's address only: a redirect is followed to the same scheme, host and port, never to
another (``origin``); https is verified against the system's certificates (``SSL_CERT_FILE`` names others). A
project may carry the largest export read (``Project.max_bytes``, serve's ``--label-studio-max-export-mb``).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from ernie_ft.errors import UserError

SCHEME = "label-studio://"
TOKEN_VARIABLE = "LABEL_STUDIO_API_KEY"
TIMEOUT = 120.0
"""Seconds to wait for Label Studio's answer (an export of a large project takes a while)."""


@dataclass(frozen=True)
class Project:
    """A project named by ``label-studio://HOST:PORT/PROJECT`` (http), or given by serve (``serving.security``)."""

    host: str
    port: int
    project: int
    scheme: str = "http"
    max_bytes: Optional[int] = None
    """The largest export read, in bytes (None: any)."""

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def __str__(self) -> str:
        if self.scheme != "http":  # no label-studio:// form: the project's page
            return f"{self.base}/projects/{self.project}"
        return f"{SCHEME}{self.host}:{self.port}/{self.project}"


def is_project(value) -> bool:
    """Whether a data path names a Label Studio project instead of a file."""
    return isinstance(value, str) and value.startswith(SCHEME)


def parse(value, flag: str) -> Project:
    """The project of ``label-studio://HOST:PORT/PROJECT`` (``flag``: the flag it came from, for the error); a
    ``Project`` as it is (serve's runs: its scheme and export limit are the ones serve started with)."""
    if isinstance(value, Project):
        return value
    found = re.fullmatch(r"label-studio://([^:/\s]+):(\d+)/(\d+)/?", value)
    if not found:
        raise UserError(
            f"{flag} {value}: expected label-studio://HOST:PORT/PROJECT (PROJECT: the number in the project's URL, "
            "http://HOST:PORT/projects/PROJECT/)"
        )
    return Project(found[1], int(found[2]), int(found[3]))


def fetch_export(project: Project, flag: str, environ: Optional[Mapping[str, str]] = None) -> list:
    """The project's JSON export: its annotated tasks as Label Studio exports them."""
    token = (os.environ if environ is None else environ).get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise UserError(
            f"{flag} {project}: set {TOKEN_VARIABLE} to your Label Studio access token (Label Studio: Account & "
            "Settings > Access Token) to read the project"
        )
    authorization = _authorization(project, token, flag)
    tasks = _request(project, f"/api/projects/{project.project}/export?exportType=JSON", authorization, flag)
    if not isinstance(tasks, list):
        raise UserError(
            f"{flag} {project}: Label Studio's export is not a list of tasks; is {project.base} Label Studio?"
        )
    return tasks


def save_export(value: str, flag: str, directory: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """Fetch the project ``value`` names and save its export in ``directory``; returns the file's path."""
    project = parse(value, flag)
    tasks = fetch_export(project, flag, environ)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"label-studio-{project.host}-{project.port}-{project.project}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(tasks, f, ensure_ascii=False)
    os.replace(path + ".tmp", path)
    return path


def _authorization(project: Project, token: str, flag: str) -> str:
    """The Authorization header for ``token``: a legacy token as it is, a personal access token (a JWT) exchanged for
    an access token first."""
    if token.count(".") != 2:
        return f"Token {token}"
    answer = _request(project, "/api/token/refresh", None, flag, {"refresh": token})
    return f"Bearer {answer['access']}"


def origin(url: str) -> Optional[tuple[str, str, int]]:
    """(scheme, host, port) of ``url``, the port filled in; None for an address without a host."""
    try:
        address = urlsplit(url)
        port = address.port or {"http": 80, "https": 443}.get(address.scheme)
    except ValueError:
        return None
    return (address.scheme, address.hostname, port) if address.hostname else None


class _SameOrigin(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the scheme, host and port asked: the token is never sent to another host, nor over
    http after https. Any other redirect is the HTTPError of its status (``_refused`` names where it pointed)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl) != origin(req.full_url):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _request(project: Project, path: str, authorization: Optional[str], flag: str, body: Optional[dict] = None):
    headers = {"Accept": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(project.base + path, data=data, headers=headers)
    try:
        # an opener per request: its https context reads the system's certificates (SSL_CERT_FILE) as they are now
        with urllib.request.build_opener(_SameOrigin).open(request, timeout=TIMEOUT) as response:
            return json.loads(_read(response, project, flag).decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise UserError(_refused(project, flag, e.code, e.headers.get("Location"))) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ssl.SSLCertVerificationError):
            raise UserError(
                f"{flag} {project}: the TLS certificate of {project.base} is not trusted ({reason.verify_message}); "
                "if your own authority signed it, name its certificate file in SSL_CERT_FILE"
            ) from None
        raise UserError(
            f"{flag} {project}: cannot reach Label Studio at {project.base} ({reason}); is it running, and are the "
            "host and port the ones in its address?"
        ) from None
    except ValueError:
        raise UserError(f"{flag} {project}: {project.base}{path} did not answer JSON; is it Label Studio?") from None


def _read(response, project: Project, flag: str) -> bytes:
    """The answer's body; UserError once it is over ``project.max_bytes`` (by Content-Length, or while it comes)."""
    limit = project.max_bytes
    declared = response.headers.get("Content-Length", "")
    over = limit is not None and declared.isdigit() and int(declared) > limit
    chunks, size = [], 0
    while not over and (chunk := response.read(1 << 20)):
        chunks.append(chunk)
        size += len(chunk)
        over = limit is not None and size > limit
    if not over:
        return b"".join(chunks)
    raise UserError(
        f"{flag} {project}: Label Studio's export is over {limit / 2**20:g} MB, serve's limit; raise it with serve "
        "--label-studio-max-export-mb, or train by hand from an export file"
    )


def _refused(project: Project, flag: str, status: int, location: Optional[str] = None) -> str:
    if 300 <= status < 400:
        return (
            f"{flag} {project}: {project.base} redirected to {location}, another address, which is never sent the "
            "token; give Label Studio's own address (the one its pages are at)"
        )
    if status in (401, 403):
        return (
            f"{flag} {project}: Label Studio refused the token in {TOKEN_VARIABLE} ({status}); copy the access token "
            "from Account & Settings of a user who is a member of the project"
        )
    if status == 404:
        return (
            f"{flag} {project}: Label Studio at {project.base} has no project {project.project} (404); the number is "
            "the one in the project's URL (/projects/NUMBER/)"
        )
    return f"{flag} {project}: Label Studio answered {status} to the export request"
