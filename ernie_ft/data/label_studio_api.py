"""Training from a Label Studio project: ``--train label-studio://HOST:PORT/PROJECT`` fetches the project's export
through Label Studio's REST API (``GET /api/projects/PROJECT/export?exportType=JSON``: its annotated tasks), with the
access token in the environment variable ``LABEL_STUDIO_API_KEY``, and saves it as a file that trains as any Label
Studio export (``annotations.load``).

The token is sent as ``Authorization: Token ...`` (Label Studio's legacy tokens); a personal access token (a JWT,
Label Studio's default since 1.16) is first exchanged for an access token at ``/api/token/refresh`` and sent as
``Bearer``. An unreachable host, a refused token (401) and a missing project (404) are each one error naming the URL
and what to do.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from ernie_ft.errors import UserError

SCHEME = "label-studio://"
TOKEN_VARIABLE = "LABEL_STUDIO_API_KEY"
TIMEOUT = 120.0
"""Seconds to wait for Label Studio's answer (an export of a large project takes a while)."""


@dataclass(frozen=True)
class Project:
    """A project named by ``label-studio://HOST:PORT/PROJECT``."""

    host: str
    port: int
    project: int

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{SCHEME}{self.host}:{self.port}/{self.project}"


def is_project(value) -> bool:
    """Whether a data path names a Label Studio project instead of a file."""
    return isinstance(value, str) and value.startswith(SCHEME)


def parse(value: str, flag: str) -> Project:
    """The project of ``label-studio://HOST:PORT/PROJECT`` (``flag``: the flag it came from, for the error)."""
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


def _request(project: Project, path: str, authorization: Optional[str], flag: str, body: Optional[dict] = None):
    headers = {"Accept": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(project.base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise UserError(_refused(project, flag, e.code)) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(
            f"{flag} {project}: cannot reach Label Studio at {project.base} ({reason}); is it running, and are the "
            "host and port the ones in its address?"
        ) from None
    except ValueError:
        raise UserError(f"{flag} {project}: {project.base}{path} did not answer JSON; is it Label Studio?") from None


def _refused(project: Project, flag: str, status: int) -> str:
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
