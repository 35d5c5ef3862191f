"""Who may read the trail over HTTP: the bearer token every request for trail data must carry (the
auditor's ``/history``; ``rollbook ui`` when it listens beyond the loopback). ``/healthz``, ``/readyz`` and
``/metrics`` stay open: they carry no recorded string.

``settings.api_auth`` chooses how a token is checked:

- ``token`` (the default; `rollbook up`, compose): the token is the content of one file,
  ``settings.api_token_file`` (empty: ``<data_dir>/api-token``), generated at first use with 0600
  permissions. Nothing prints it; ``rollbook api-token`` does, when asked.
- ``kubernetes`` (deploy/): the token is a Kubernetes bearer token (a ServiceAccount's, a user's). The
  API server says whose it is (TokenReview) and whether RBAC lets them ``get`` the ``history`` resource
  of the ``rollbook.io`` group (SubjectAccessReview); deploy/base/rbac.yaml has the
  ``rollbook-history-reader`` ClusterRole to bind. Answers are kept ``REVIEW_CACHE_SECONDS``.

A request without a token is 401; with a token that does not authenticate, 401; with one whose holder may
not read, 403.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from services.infra.settings import Settings

if TYPE_CHECKING:
    from aiohttp import web

log = structlog.get_logger("api_auth")

MODES = ("token", "kubernetes")
# What a reader must be allowed, in the kubernetes mode: `get` on rollbook.io/history (cluster scope).
HISTORY_GROUP = "rollbook.io"
HISTORY_RESOURCE = "history"
HISTORY_VERB = "get"
REVIEW_CACHE_SECONDS = 10.0
REVIEW_CACHE_SIZE = 1024
TOKEN_BYTES = 32


@dataclass(frozen=True)
class Decision:
    status: int  # 200 allowed, 401 not authenticated, 403 not allowed
    reason: str
    user: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


class Authenticator(Protocol):
    async def check(self, token: str) -> Decision: ...

    async def close(self) -> None: ...


def token_path(settings: Settings) -> Path:
    return Path(settings.api_token_file) if settings.api_token_file else settings.data_path / "api-token"


def ensure_token(path: Path) -> str:
    """The token in ``path``, written first (0600, a new random token) when there is none. Two processes
    racing to create it agree: the file is created exclusively, the loser reads the winner's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def read_token(path: Path) -> str:
    token = path.read_text().strip()
    if not token:
        raise ValueError(f"{path} holds no API token")
    return token


def bearer(authorization: str) -> str:
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class FileToken:
    """``token`` mode: the one token of the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = ensure_token(path)

    async def check(self, token: str) -> Decision:
        if secrets.compare_digest(token.encode(), self.token.encode()):
            return Decision(200, "the API token", "api-token")
        return Decision(401, "invalid bearer token")

    async def close(self) -> None:
        return None


class KubernetesReview:
    """``kubernetes`` mode: TokenReview, then SubjectAccessReview, through kubernetes-asyncio."""

    def __init__(self, api: Any, *, owned: bool = False) -> None:
        from kubernetes_asyncio import client

        self.api = api
        self.owned = owned  # made here: closed with close()
        self.authentication = client.AuthenticationV1Api(api)
        self.authorization = client.AuthorizationV1Api(api)
        self._cache: dict[bytes, tuple[float, Decision]] = {}

    async def check(self, token: str) -> Decision:
        key = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        decision = await self._review(token)
        if len(self._cache) >= REVIEW_CACHE_SIZE:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= REVIEW_CACHE_SIZE:
                self._cache.clear()
        self._cache[key] = (now + REVIEW_CACHE_SECONDS, decision)
        return decision

    async def close(self) -> None:
        if self.owned:
            await self.api.close()

    async def _review(self, token: str) -> Decision:
        from kubernetes_asyncio.client import (
            V1ResourceAttributes,
            V1SubjectAccessReview,
            V1SubjectAccessReviewSpec,
            V1TokenReview,
            V1TokenReviewSpec,
        )

        review = await self.authentication.create_token_review(
            V1TokenReview(spec=V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return Decision(401, "the API server does not authenticate this token")
        user = status.user
        access = await self.authorization.create_subject_access_review(
            V1SubjectAccessReview(
                spec=V1SubjectAccessReviewSpec(
                    user=user.username,
                    groups=user.groups,
                    uid=user.uid,
                    extra=user.extra,
                    resource_attributes=V1ResourceAttributes(
                        group=HISTORY_GROUP, resource=HISTORY_RESOURCE, verb=HISTORY_VERB
                    ),
                )
            )
        )
        if access.status is not None and access.status.allowed:
            return Decision(200, "allowed by RBAC", user.username or "")
        return Decision(
            403,
            f"{user.username} may not {HISTORY_VERB} {HISTORY_RESOURCE}.{HISTORY_GROUP}",
            user.username or "",
        )


async def authenticator(settings: Settings, api: Any | None = None) -> Authenticator:
    """The check ``settings.api_auth`` names; ``api`` is the kubernetes-asyncio client the kubernetes
    mode sends its reviews with (made from the settings when not given)."""
    if settings.api_auth == "token":
        return FileToken(token_path(settings))
    if settings.api_auth == "kubernetes":
        if api is not None:
            return KubernetesReview(api)
        from services.infra.kube import api_client

        return KubernetesReview(await api_client(settings), owned=True)
    raise ValueError(f"ROLLBOOK_API_AUTH: expected one of {', '.join(MODES)}, got {settings.api_auth!r}")


def guard(check: Authenticator, open_paths: frozenset[str] | None = None) -> Any:
    """An aiohttp middleware: every request needs an allowed bearer token, except those for
    ``open_paths`` (default ``OPEN_PATHS``). Refusals are JSON ``{"error": reason}``: 401 (with
    ``WWW-Authenticate``) or 403."""
    from aiohttp import web

    unguarded = OPEN_PATHS if open_paths is None else open_paths

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in unguarded:
            return await handler(request)
        token = bearer(request.headers.get("Authorization", ""))
        if not token:
            return _refused(Decision(401, "a bearer token is required (Authorization: Bearer <token>)"))
        try:
            decision = await check.check(token)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the API server unreachable: nobody is let in
            log.warning("api_auth_unavailable", error=repr(error))
            return web.json_response({"error": "the token cannot be checked now"}, status=503)
        if not decision.allowed:
            log.info("api_request_refused", path=request.path, status=decision.status, reason=decision.reason)
            return _refused(decision)
        return await handler(request)

    return middleware


OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def _refused(decision: Decision) -> web.Response:
    from aiohttp import web

    response = web.json_response({"error": decision.reason}, status=decision.status)
    if decision.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="rollbook"'
    return response
