"""The executor's Kubernetes Events: the Event each of the planner's rollout decisions means
(services/model/kube_events.py), written through events.k8s.io/v1, rate-limited per object and reason."""

from __future__ import annotations

from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.kinds import registry
from services.model.events import Envelope
from services.model.kube_events import (
    Create,
    EventLimiter,
    Regarding,
    UpdateSeries,
    event_body,
    intent_of,
    series_patch,
)
from services.model.sidecarset_streams import SIDECARSET_GROUP, SIDECARSET_PLURAL, SIDECARSET_VERSION
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION

log = structlog.get_logger("executor")


def regarding_of(stream: str) -> Regarding | None:
    """The workload whose decisions stream ``stream`` is (services/kinds/registry.py), or None."""
    found = registry.decisions_workload(stream)
    return None if found is None else Regarding(found[0].name, found[1], found[2])


MERGE_PATCH = "application/merge-patch+json"


class KubeEventWriter:
    def __init__(self, api: client.ApiClient, interval: float, instance: str) -> None:
        self.events = client.EventsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.limiter = EventLimiter(interval)
        self.instance = instance

    async def handle(self, envelope: Envelope) -> str:
        """Write (or count) the Event ``envelope`` means; returns what was done."""
        intent = intent_of(envelope, regarding_of(envelope.stream))
        if intent is None:
            return "none"
        step = self.limiter.offer(intent)
        if step is None:
            return "counted"
        if isinstance(step, UpdateSeries):
            try:
                await self.events.patch_namespaced_event(
                    step.name, step.namespace, series_patch(step),
                    _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                )  # fmt: skip
                return "series"
            except ApiException as error:
                if error.status != 404:
                    raise
                return "gone"  # deleted (expired): the next one after the window is written anew
        assert isinstance(step, Create)
        regarding = step.intent.regarding
        uid, api_version = await self._uid(regarding)
        body = event_body(step.intent, uid, api_version, self.instance)
        try:
            await self.events.create_namespaced_event(body["metadata"]["namespace"], body)  # type: ignore[arg-type]
        except ApiException as error:
            if error.status != 409:  # a redelivered decision: its Event is written already
                raise
        return "created"

    async def _uid(self, regarding: Regarding) -> tuple[str | None, str]:
        """The regarded object's uid (kubectl describe finds Events by it) and apiVersion."""
        try:
            if regarding.kind == "SidecarSet":
                api_version = f"{SIDECARSET_GROUP}/{SIDECARSET_VERSION}"
                obj: Any = await self.custom.get_cluster_custom_object(
                    SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, regarding.name
                )
            else:
                api_version = f"{CLONESET_GROUP}/{CLONESET_VERSION}"
                obj = await self.custom.get_namespaced_custom_object(
                    CLONESET_GROUP, CLONESET_VERSION, regarding.namespace, CLONESET_PLURAL, regarding.name
                )
        except ApiException as error:
            if error.status != 404:
                raise
            return None, api_version
        return ((obj or {}).get("metadata") or {}).get("uid"), api_version
