"""rollbook's webhook server (services/webhook) running next to a simcluster, with the cluster's
``rollbook-system/rollbook-webhook`` Service routed to it: what the API server calls for CloneSet
conversion (``/convert``) when rollbook's CRD from deploy/ is installed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from services.simcluster import SimCluster
from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder, PendingEvent
from services.webhook.server import RunningServer, WebhookState, start_server
from services.webhook.tls import generate_self_signed

NAMESPACE, SERVICE = "rollbook-system", "rollbook-webhook"  # deploy/base/webhook.yaml


class RecordedEvents:
    """The event sink: what the webhook would append to the event store."""

    def __init__(self) -> None:
        self.events: list[PendingEvent] = []

    async def append(self, event: PendingEvent) -> None:
        self.events.append(event)


@asynccontextmanager
async def rollbook_webhook(sim: SimCluster, directory: Path) -> AsyncIterator[RunningServer]:
    state = WebhookState(
        sidecarsets=SidecarSetCache(),
        namespaces=NamespaceLabels(),
        recorder=InjectionRecorder(RecordedEvents()),
    )
    server = await start_server(state, generate_self_signed(directory))
    sim.route_service(NAMESPACE, SERVICE, server.base_url)
    try:
        yield server
    finally:
        await server.stop()
