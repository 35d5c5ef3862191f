"""A pod action whose details no kind reads (services/kinds/<kind>/actions.py) is never carried out: the
executor refuses it before taking it, so the bus dead-letters it with the reason, and nothing is reported
or written to the cluster. Today's shape of the same action is carried out (the control)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import REGISTRY

from services.executor.service import Executor
from services.infra.bus import Unacceptable
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, PodActionRequested, new_event
from services.simcluster import SimCluster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def request(workload: str, action: str, details: dict[str, Any]) -> tuple[Envelope, PodActionRequested]:
    payload = PodActionRequested(
        action_id=f"{workload}-{uuid.uuid4().hex[:8]}",
        action=action,
        namespace="default",
        pod=f"{workload}-0",
        details=details,
    )
    envelope = new_event(
        payload,
        stream=CLONESET.decisions_stream("default", workload),
        stream_version=2,
        occurred_at=datetime.now(UTC),
        event_id=uuid.uuid4(),
    )
    return envelope, payload


def pod_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    }


async def pod_exists(api: client.ApiClient, name: str) -> bool:
    try:
        await client.CoreV1Api(api).read_namespaced_pod(name, "default")
        return True
    except ApiException as error:
        if error.status == 404:
            return False
        raise


def refused() -> float:
    return REGISTRY.get_sample_value("rollbook_executor_refused_total", {"type": "PodActionRequested"}) or 0.0


@pytest.mark.parametrize(
    ("action", "details", "reason"),
    [
        ("createPod", {"pod": "x", "obj": {}}, "invalid details of createPod: Object missing required field"),
        ("createPod", {"object": "a pod"}, "invalid details of createPod: Expected `object`, got `str`"),
        ("explodePod", {"object": pod_body("x")}, "unknown action 'explodePod'"),
    ],
)
async def test_an_action_no_kind_reads_is_refused_with_its_reason(
    settings: Settings,
    event_store: EventStore,
    simcluster: SimCluster,
    k8s_client: client.ApiClient,
    action: str,
    details: dict[str, Any],
    reason: str,
) -> None:
    workload = f"bad{uuid.uuid4().hex[:8]}"
    envelope, payload = request(workload, action, details)
    before = refused()
    with pytest.raises(Unacceptable, match=reason.replace("`", ".").replace("(", ".").replace(")", ".")):
        await Executor(settings, event_store, k8s_client).execute(envelope, payload)
    assert refused() == before + 1
    assert not await pod_exists(k8s_client, f"{workload}-0") and not await pod_exists(k8s_client, "x")
    assert await event_store.read_stream(CLONESET.actions_stream("default", workload)) == []


async def test_the_same_action_in_its_shape_is_carried_out(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"good{uuid.uuid4().hex[:8]}"
    envelope, payload = request(workload, "createPod", {"object": pod_body(f"{workload}-0")})
    await Executor(settings, event_store, k8s_client).execute(envelope, payload)
    assert await pod_exists(k8s_client, f"{workload}-0")
    [outcome] = await event_store.read_stream(CLONESET.actions_stream("default", workload))
    assert outcome.envelope.type == "PodActionSucceeded"
