"""Who may do what on the bus: one NATS identity per role, each limited to the subjects it needs
(docs/security-bus.md), and the client side of connecting as one (user and password, optional TLS).

Identities::

    auditor    the relay (the only publisher of <prefix>.ev.>), the audit consumer, creates and updates
               rollbook's two streams, publishes checkpoints
    planner    its partition durables planner-p<N> (reads wake-ups), their dead letters; no event subject
    executor   its durables executor, executor-kube-events and executor-status-p<N>, their dead
               letters; no event subject
    operator   read-only: stream and consumer info, the checkpoints (`rollbook audit verify`), and taking a
               checkpoint (`rollbook audit checkpoint`); no event subject, no consumer of the event stream
    admin      everything (the stream's owner: deletes and purges); held by the operator, used by
               `rollbook selfcheck` and the demo's cleanup, never by a service

The watcher and the webhook append to the store only and hold no identity. A password is a file named
after its identity in ``settings.nats_credentials_dir`` (0600, in a 0700 directory); the user name is the
identity. Each identity's replies come to an inbox prefix of its own (``_INBOX_<identity>``), so none can
read the replies (JetStream deliveries included) sent to another.

``server_config`` renders the nats-server configuration (JSON, which nats-server reads as its config
format) for the embedded servers; deploy/ and docker-compose.yml carry the same permissions.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.infra.settings import Settings

AUDITOR = "auditor"
PLANNER = "planner"
EXECUTOR = "executor"
OPERATOR = "operator"
ADMIN = "admin"
IDENTITIES = (AUDITOR, PLANNER, EXECUTOR, OPERATOR, ADMIN)
# Identities that create and update rollbook's streams; the others wait for the stream to exist.
STREAM_MANAGERS = frozenset({AUDITOR, ADMIN})
# Where ``rollbook up`` and the demo keep the passwords of the embedded nats-server, under the data dir.
CREDENTIALS_DIR_NAME = "nats-credentials"
# The user nats-server's route connections authenticate as (a cluster's nodes among themselves).
ROUTE_USER = "route"
API = "$JS.API"


class CredentialsError(RuntimeError):
    """A configured credential file is missing or unreadable (the message names it, never its content)."""


def inbox_prefix(identity: str) -> str:
    return f"_INBOX_{identity}"


def _consumer_rights(stream: str, prefix: str, durables: list[str]) -> list[str]:
    """What running durable pull consumers needs: create (every form the API has), info, fetch, ack, and
    publish their dead letters."""
    rights: list[str] = []
    for durable in durables:
        rights += [
            f"{API}.CONSUMER.CREATE.{stream}.{durable}",
            f"{API}.CONSUMER.CREATE.{stream}.{durable}.>",
            f"{API}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
            f"{API}.CONSUMER.INFO.{stream}.{durable}",
            f"{API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
            f"{prefix}.dlq.{durable}",
        ]
    return rights


def permissions(identity: str, settings: Settings) -> dict[str, Any]:
    """The nats-server permissions of ``identity`` (publish allow list, subscribe allow list)."""
    stream, prefix = settings.stream_name, settings.subject_prefix
    checkpoints, checkpoint_subject = f"{stream}_CHECKPOINTS", f"{prefix}-checkpoints"
    partitions = range(settings.bus_partitions)
    if identity == ADMIN:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    publish = [f"{API}.INFO", f"{API}.STREAM.INFO.{stream}"]
    if identity == AUDITOR:
        publish += [
            f"{prefix}.ev.>",
            f"{API}.STREAM.CREATE.{stream}",
            f"{API}.STREAM.UPDATE.{stream}",
            f"{API}.STREAM.MSG.GET.{stream}",
            f"{API}.DIRECT.GET.{stream}",
            f"{API}.DIRECT.GET.{stream}.>",
            f"{API}.STREAM.CREATE.{checkpoints}",
            f"{API}.STREAM.INFO.{checkpoints}",
            checkpoint_subject,
            f"{prefix}.dlq.auditor",  # what the audit cannot decode
            # The audit's durable consumer of earlier versions: its ack floor is taken over, then it goes.
            f"{API}.CONSUMER.INFO.{stream}.auditor",
            f"{API}.CONSUMER.DELETE.{stream}.auditor",
        ]
    elif identity == PLANNER:
        publish += [
            f"{API}.CONSUMER.DELETE.{stream}.planner",  # the single durable of earlier versions
            *_consumer_rights(stream, prefix, [f"planner-p{p}" for p in partitions]),
        ]
    elif identity == EXECUTOR:
        publish += [
            f"{API}.CONSUMER.DELETE.{stream}.executor-status",  # the status durable of earlier versions
            *_consumer_rights(
                stream,
                prefix,
                # executor-kube-events: the Kubernetes Events it writes (services/executor/service.py)
                ["executor", "executor-kube-events", *(f"executor-status-p{p}" for p in partitions)],
            ),
        ]
    elif identity == OPERATOR:
        publish += [
            f"{API}.STREAM.NAMES",
            f"{API}.STREAM.LIST",
            f"{API}.CONSUMER.NAMES.{stream}",
            f"{API}.CONSUMER.LIST.{stream}",
            f"{API}.CONSUMER.INFO.{stream}.*",
            # The checkpoints: read them (an ephemeral ordered consumer), take one.
            f"{API}.STREAM.INFO.{checkpoints}",
            f"{API}.STREAM.CREATE.{checkpoints}",
            f"{API}.STREAM.MSG.GET.{checkpoints}",
            f"{API}.CONSUMER.CREATE.{checkpoints}",
            f"{API}.CONSUMER.CREATE.{checkpoints}.>",
            f"{API}.CONSUMER.DELETE.{checkpoints}.*",
            f"$JS.FC.{checkpoints}.>",
            checkpoint_subject,
        ]
    else:
        raise ValueError(f"unknown NATS identity {identity!r}; one of {', '.join(IDENTITIES)}")
    return {"publish": {"allow": publish}, "subscribe": {"allow": [f"{inbox_prefix(identity)}.>"]}}


def ensure_credentials(directory: Path) -> dict[str, str]:
    """The password of every identity (and the route user) in ``directory``, made on first use: random,
    one file each, 0600 in a 0700 directory. Never logged."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    passwords: dict[str, str] = {}
    for name in (*IDENTITIES, ROUTE_USER):
        path = directory / name
        if not path.exists():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
        path.chmod(0o600)
        passwords[name] = path.read_text().strip()
    return passwords


# How often JetStream flushes its files to disk. nats-server's default (2 minutes) acknowledges messages a
# power loss of the whole cluster can take back (docs/reliability.md, "When NATS loses what it held");
# "always" flushes each write before it is acknowledged, at the cost measured there.
JETSTREAM_SYNC_INTERVAL = "always"


def server_config(
    settings: Settings,
    passwords: Mapping[str, str],
    *,
    cluster: Mapping[str, Any] | None = None,
    clients: bool = True,
    sync_interval: str = JETSTREAM_SYNC_INTERVAL,
) -> str:
    """nats-server configuration (JSON) with one user per identity and its permissions (unless
    ``clients`` is false: a server any client may use, as CI's); ``cluster`` (name, listen, routes) adds
    route connections authenticated as ``ROUTE_USER``. TLS for clients and routes when
    ``settings.nats_tls_cert`` / ``nats_tls_key`` are set (clients must then present a certificate signed
    by ``nats_tls_ca``). JetStream flushes to disk at ``sync_interval`` ("always", or a duration such
    as "2m", nats-server's default)."""
    config: dict[str, Any] = {"jetstream": {"sync_interval": sync_interval}}
    if clients:
        users = [
            {
                "user": identity,
                "password": passwords[identity],
                "permissions": permissions(identity, settings),
            }
            for identity in IDENTITIES
        ]
        config["authorization"] = {"users": users}
    tls = _server_tls(settings)
    if tls:
        config["tls"] = tls
    if cluster is not None:
        route = passwords[ROUTE_USER]
        config["cluster"] = {
            "name": cluster["name"],
            "listen": cluster["listen"],
            "authorization": {"user": ROUTE_USER, "password": route},
            "routes": [url.replace("://", f"://{ROUTE_USER}:{route}@", 1) for url in cluster["routes"]],
            **({"tls": tls} if tls else {}),
        }
    return json.dumps(config, indent=2)


def _server_tls(settings: Settings) -> dict[str, Any]:
    if not (settings.nats_tls_cert and settings.nats_tls_key):
        return {}
    tls: dict[str, Any] = {"cert_file": settings.nats_tls_cert, "key_file": settings.nats_tls_key}
    if settings.nats_tls_ca:
        tls["ca_file"] = settings.nats_tls_ca
        tls["verify"] = True
    return tls


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), replacing it."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def password_file(settings: Settings, identity: str) -> Path | None:
    """The password file of ``identity`` in ``settings.nats_credentials_dir``, None when no directory is
    configured (a NATS server without authentication)."""
    if not settings.nats_credentials_dir:
        return None
    return Path(settings.nats_credentials_dir) / identity


def connect_options(settings: Settings, identity: str) -> dict[str, Any]:
    """nats-py ``connect`` arguments for ``identity``: user and password when a credentials directory is
    configured, its own inbox prefix, and a TLS context when a CA or client certificate is set."""
    if identity not in IDENTITIES:
        raise ValueError(f"unknown NATS identity {identity!r}; one of {', '.join(IDENTITIES)}")
    options: dict[str, Any] = {"inbox_prefix": inbox_prefix(identity)}
    path = password_file(settings, identity)
    if path is not None:
        try:
            password = path.read_text().strip()
        except OSError as error:
            raise CredentialsError(
                f"cannot read the NATS password of identity {identity!r} at {path}: {error.strerror}"
            ) from None
        options["user"] = identity
        options["password"] = password
    context = tls_context(settings)
    if context is not None:
        options["tls"] = context
    return options


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The client's TLS context: verify the server with ``nats_tls_ca`` (else the system's CAs), present
    ``nats_tls_cert`` / ``nats_tls_key`` when set. None when no TLS setting is given."""
    if not (settings.nats_tls_ca or settings.nats_tls_cert):
        return None
    context = ssl.create_default_context(cafile=settings.nats_tls_ca or None)
    if settings.nats_tls_cert:
        context.load_cert_chain(settings.nats_tls_cert, settings.nats_tls_key or None)
    return context
