"""Running the webhook: TLS, list+watch caches, the HTTPS server, the injection recorder, registration."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import structlog
from kubernetes_asyncio import client

from services.infra import kube
from services.infra.kruise import resolve_selection
from services.infra.redaction_key import load_policy
from services.infra.settings import Settings
from services.webhook import register as registration
from services.webhook.cache import (
    NamespaceLabels,
    SidecarSetCache,
    namespace_list_watch,
    sidecarset_list_watch,
)
from services.webhook.recorder import EventSink, InjectionRecorder, LogSink
from services.webhook.revisions import RevisionSource, load_pinned
from services.webhook.server import RunningServer, WebhookState, start_server
from services.webhook.tls import DEFAULT_HOSTS, ServingCertificate, generate_self_signed, load_certificate

log = structlog.get_logger("rollbook.webhook")


@dataclass(frozen=True)
class WebhookOptions:
    host: str = "127.0.0.1"
    port: int = 0
    cert_dir: Path | None = None  # where a generated CA/serving cert goes (default: <data_dir>/webhook-tls)
    cert_file: Path | None = None  # operator-provided serving certificate ...
    key_file: Path | None = None
    ca_file: Path | None = None
    hosts: tuple[str, ...] = DEFAULT_HOSTS  # names/IPs of a generated certificate
    register: bool = True  # register URL-based webhook configurations pointing at this server
    failure_policy: str = "Ignore"
    sync_timeout_seconds: float = 30.0


@dataclass
class RunningWebhook:
    server: RunningServer
    certificate: ServingCertificate
    state: WebhookState
    api: client.ApiClient

    @property
    def base_url(self) -> str:
        return self.server.base_url


def excluded_namespaces(settings: Settings) -> frozenset[str]:
    return frozenset(n.strip() for n in settings.sidecarset_excluded_namespaces.split(",") if n.strip())


def _certificate(settings: Settings, options: WebhookOptions) -> ServingCertificate:
    if options.cert_file and options.key_file:
        return load_certificate(options.cert_file, options.key_file, options.ca_file)
    directory = options.cert_dir or settings.data_path / "webhook-tls"
    return generate_self_signed(directory, options.hosts)


async def _load_revisions(
    source: RevisionSource, sidecarsets: SidecarSetCache, loaded: asyncio.Event
) -> None:
    await load_pinned(source, sidecarsets.snapshot)
    loaded.set()


@contextlib.asynccontextmanager
async def run_webhook(
    settings: Settings,
    options: WebhookOptions,
    sink: EventSink | None = None,
    revisions: RevisionSource | None = None,
) -> AsyncIterator[RunningWebhook]:
    """Start everything, wait for the caches, register; undo it all on exit. ``revisions``: where the
    recorded revisions of SidecarSets pinning one are read (the event store; None refuses their pods)."""
    selection = await resolve_selection(settings, "webhook")
    api = await kube.api_client(settings)
    sidecarsets, namespaces = SidecarSetCache(selection), NamespaceLabels()
    watches = [sidecarset_list_watch(api, sidecarsets), namespace_list_watch(api, namespaces)]
    tasks = [asyncio.create_task(w.run(), name=f"list-watch-{w.kind}") for w in watches]
    recorder = InjectionRecorder(sink or LogSink())
    recorder.start()
    revisions_loaded = asyncio.Event()
    if revisions is None:
        revisions_loaded.set()
    state = WebhookState(
        sidecarsets=sidecarsets,
        namespaces=namespaces,
        recorder=recorder,
        excluded_namespaces=excluded_namespaces(settings),
        revisions=revisions,
        revisions_unavailable=settings.sidecarset_revisions_unavailable,
        revisions_loaded=revisions_loaded.is_set,
        sort_containers_by_name=settings.sidecarset_sort_containers_by_name,
        policy=load_policy(settings) if revisions is not None else None,
        synced=lambda: all(w.synced.is_set() for w in watches),
        served=lambda: {w.kind: w.served for w in watches},
    )
    certificate = _certificate(settings, options)
    server: RunningServer | None = None
    try:
        await asyncio.wait_for(
            asyncio.gather(*(w.synced.wait() for w in watches)), options.sync_timeout_seconds
        )
        if revisions is not None:
            tasks.append(asyncio.create_task(_load_revisions(revisions, sidecarsets, revisions_loaded)))
        server = await start_server(state, certificate, host=options.host, port=options.port)
        if options.register:
            await registration.register(
                api, server.base_url, certificate.ca_bundle, failure_policy=options.failure_policy
            )
        log.info("webhook_started", url=server.base_url, sidecarsets=len(sidecarsets.snapshot()))
        yield RunningWebhook(server=server, certificate=certificate, state=state, api=api)
    finally:
        if server is not None:
            if options.register:
                with contextlib.suppress(Exception):
                    await registration.unregister(api)
            await server.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await recorder.stop()
        await api.close()
