"""Who may use ``serve``, and where it may reach (docs/security.md).

- ``BasicAuth``: HTTP Basic authentication, on when ``BASIC_AUTH_USER`` and ``BASIC_AUTH_PASS`` are both set (the
  variables Label Studio's ML backend SDK reads; Label Studio's model connection sends them from its "Basic
  Authentication" fields). ``BasicAuthMiddleware`` answers every route but the probes (``OPEN_PATHS``) 401 without
  them.
- ``LabelStudioAccess``: the one Label Studio that "Start training" fetches projects from, fixed when serve starts
  (``--label-studio-url`` or ``LABEL_STUDIO_URL``, the token from ``LABEL_STUDIO_API_KEY`` only: a flag would show it
  in ``ps``), with the largest export it reads. Without it, training from Label Studio is off.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import urlsplit

from ernie_ft.data import label_studio_api
from ernie_ft.errors import UserError
from ernie_ft.serving.schemas import error_body

USER_VARIABLE, PASSWORD_VARIABLE = "BASIC_AUTH_USER", "BASIC_AUTH_PASS"
URL_VARIABLE = "LABEL_STUDIO_URL"
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""What answers without credentials: whether the process is up and the model ready (what a load balancer's or
Kubernetes' probe asks; they name no model and take no input). Label Studio's ``/label-studio/health`` is not among
them: Label Studio sends its credentials there too, and a 401 there is how it tells a wrong password apart."""
MAX_EXPORT_MB = 200
"""``serve --label-studio-max-export-mb``'s default: a JSON export of tens of thousands of annotated texts."""
TRAINING_OFF = (
    "training from Label Studio is off: start serve with --label-studio-url URL (or LABEL_STUDIO_URL) and "
    f"{label_studio_api.TOKEN_VARIABLE} set, with one worker, to let Start training fetch the project and train"
)


@dataclass(frozen=True)
class BasicAuth:
    """The user name and password every request but the probes must carry (``Authorization: Basic ...``)."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Optional[BasicAuth]:
        """From ``BASIC_AUTH_USER`` and ``BASIC_AUTH_PASS``: None when neither is set; one alone is an error."""
        user, password = environ.get(USER_VARIABLE, ""), environ.get(PASSWORD_VARIABLE, "")
        if bool(user) != bool(password):
            given, missing = (USER_VARIABLE, PASSWORD_VARIABLE) if user else (PASSWORD_VARIABLE, USER_VARIABLE)
            raise UserError(f"{given} is set but {missing} is not: set both for basic authentication, or neither")
        return cls(user, password) if user else None

    def allows(self, header: Optional[bytes]) -> bool:
        """Whether an ``Authorization`` header carries these credentials (compared in constant time; UTF-8 as
        browsers send them, or Latin-1 as Python's requests, which Label Studio uses, sends them)."""
        scheme, _, encoded = (header or b"").partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            user, colon, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        except ValueError:
            return False
        matches = False
        for encoding in ("utf-8", "latin-1"):
            try:
                want_user, want_password = self.user.encode(encoding), self.password.encode(encoding)
            except UnicodeEncodeError:
                continue
            same = hmac.compare_digest(user, want_user) & hmac.compare_digest(password, want_password)
            matches = matches or same
        return bool(colon) and matches


class BasicAuthMiddleware:
    """ASGI middleware: 401 with ``WWW-Authenticate: Basic`` for a request without ``auth``'s credentials, before
    its body is read; ``OPEN_PATHS`` answer without."""

    def __init__(self, app, auth: BasicAuth):
        self.app, self.auth = app, auth

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        if self.auth.allows(dict(scope.get("headers") or []).get(b"authorization")):
            return await self.app(scope, receive, send)
        message = f"this server needs a user name and password (HTTP Basic authentication: {USER_VARIABLE})"
        challenge = (b"www-authenticate", b'Basic realm="ernie_ft", charset="UTF-8"')
        await send_error(send, 401, "authorization", message, [challenge])


async def send_error(send, status: int, field_name: str, message: str, headers: list = ()) -> None:
    """Answer ``status`` with the error body naming ``field_name`` (``schemas.error_body``) from ASGI middleware."""
    body = json.dumps(error_body(field_name, message)).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class LabelStudioAccess:
    """The Label Studio that "Start training" fetches a project's export from: ``url`` (``http://HOST:PORT`` or
    ``https://HOST[:PORT]``; https is kept, its certificate checked), its access token, and the largest export read."""

    url: str
    token: str = field(repr=False)
    max_export_bytes: int = MAX_EXPORT_MB << 20

    def __post_init__(self):
        if not _plain_address(self.url):
            raise UserError(
                f"Label Studio's address {self.url!r} (--label-studio-url or {URL_VARIABLE}): expected "
                "http://HOST:PORT or https://HOST[:PORT], the address its pages are at, without a path"
            )
        if self.max_export_bytes <= 0:
            raise UserError(f"--label-studio-max-export-mb must be positive, not {self.max_export_bytes / 2**20:g}")

    @classmethod
    def from_environ(
        cls, url: Optional[str], environ: Mapping[str, str], max_export_mb: float = MAX_EXPORT_MB
    ) -> Optional[LabelStudioAccess]:
        """``serve --label-studio-url URL`` (``url``), else ``LABEL_STUDIO_URL``, with the token in
        ``LABEL_STUDIO_API_KEY``: None when neither names an address (training from Label Studio is off)."""
        given = url or environ.get(URL_VARIABLE, "").strip()
        if not given:
            return None
        token = environ.get(label_studio_api.TOKEN_VARIABLE, "").strip()
        if not token:
            where = f"--label-studio-url {url}" if url else f"{URL_VARIABLE}={given}"
            raise UserError(
                f"{where}: set {label_studio_api.TOKEN_VARIABLE} to a Label Studio access token (Account & Settings "
                "> Access Token) to train from its projects"
            )
        return cls(given.rstrip("/"), token, int(max_export_mb * (1 << 20)))

    def project(self, number: int) -> label_studio_api.Project:
        """Project ``number`` of this Label Studio, as ``label_studio_api.fetch_export`` reads it."""
        address = urlsplit(self.url)
        port = address.port or (443 if address.scheme == "https" else 80)
        return label_studio_api.Project(address.hostname, port, number, address.scheme, self.max_export_bytes)

    def is_at(self, hostname) -> bool:
        """Whether ``hostname`` (what Label Studio's ``/setup`` calls itself) is this address."""
        other = label_studio_api.origin(str(hostname).rstrip("/"))
        return other is not None and other == label_studio_api.origin(self.url)


def _plain_address(url: str) -> bool:
    """Whether ``url`` is ``http(s)://HOST[:PORT]`` with nothing else (no path, query, user name)."""
    try:
        address = urlsplit(url)
        address.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return False
    extra = address.path.strip("/") or address.query or address.fragment or address.username
    return address.scheme in ("http", "https") and bool(address.hostname) and not extra
