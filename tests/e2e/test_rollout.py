"""Rollouts and repairs end to end: in-place with partition, ReCreate, a pod deleted from outside."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import RolloutStarted, RoundPlanned
from services.replay.operations import recorded_from_round_input, what_if_rollout
from services.replay.reads import workload_events
from services.replay.whatif import what_if
from tests.e2e.cluster import (
    Cluster,
    image_of,
    instance_id,
    is_ready,
    pod_ip,
    restart_count,
    seed_cloneset,
    with_image,
)
from tests.plugins.stack import Stack, wait_for

# One stack for the module (each test in a namespace of its own): none stops or restarts a service.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
NAME = "sample-data"


async def settled(cluster: Cluster, count: int, image: str | None = None, updated: int | None = None) -> Any:
    """The pods once ``count`` are ready, ``updated`` of them on ``image`` and the status agrees."""
    pods = await cluster.pods(NAME)
    if len(pods) != count or not all(is_ready(p) for p in pods.values()):
        return None
    if image is not None and updated is not None:
        if sum(image_of(p) == image for p in pods.values()) != updated:
            return None
        status = (await cluster.cloneset(NAME)).get("status") or {}
        if status.get("updatedReplicas") != updated or status.get("readyReplicas") != count:
            return None
    return pods


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    return shared_cluster


async def start(stack: Stack, cluster: Cluster, strategy: dict[str, Any]) -> dict[str, Any]:
    await stack.ensure(*SERVICES)
    await cluster.create_cloneset(seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy))
    pods: dict[str, Any] = await wait_for(lambda: settled(cluster, 5), what="5 ready pods")
    return pods


async def test_in_place_rollout_with_partition(stack: Stack, cluster: Cluster) -> None:
    strategy = {
        "type": "InPlaceIfPossible",
        "partition": 2,
        "maxUnavailable": "20%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    before = await start(stack, cluster, strategy)
    pvcs_before = {n: p["metadata"]["uid"] for n, p in (await cluster.pvcs(NAME)).items()}

    await cluster.patch_cloneset(
        NAME, with_image(seed_cloneset("cloneset-sample-data.yaml"), "nginx:mainline")
    )
    at_partition = await wait_for(
        lambda: settled(cluster, 5, "nginx:mainline", 3), within=60, what="3 of 5 pods updated in place"
    )
    updated = {n for n, p in at_partition.items() if image_of(p) == "nginx:mainline"}
    assert len(updated) == 3
    for name, pod in at_partition.items():
        assert pod["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert pod_ip(pod) == pod_ip(before[name])
        assert restart_count(pod) == restart_count(before[name]) + (1 if name in updated else 0)

    await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"partition": 0}}})
    done = await wait_for(lambda: settled(cluster, 5, "nginx:mainline", 5), within=60, what="all 5 updated")
    for name, pod in done.items():
        assert pod["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert pod_ip(pod) == pod_ip(before[name])
        assert restart_count(pod) == restart_count(before[name]) + 1
    assert {n: p["metadata"]["uid"] for n, p in (await cluster.pvcs(NAME)).items()} == pvcs_before
    assert stack.dead() == []
    await _what_if_starts_at_the_stored_round_input(stack.settings, cluster.namespace)


async def _what_if_starts_at_the_stored_round_input(settings: Settings, namespace: str) -> None:
    """The planner stored the input of the round that started the rollout, its SHA-256 the round's, so
    what-if starts there; and answers as it does from every event."""
    store = await EventStore.connect(settings.database_url)
    try:
        events = await workload_events(store, namespace, NAME)
        started = [e.envelope for e in events if isinstance(e.envelope.payload, RolloutStarted)]
        assert len(started) == 1 and isinstance(started[0].payload, RolloutStarted)
        rollout = started[0].payload.rollout_id
        stored = await store.round_input(started[0].causation_id)
        round_planned = next(
            e.envelope.payload for e in events if e.envelope.event_id == started[0].causation_id
        )
        assert isinstance(round_planned, RoundPlanned) and stored is not None
        assert hashlib.sha256(stored).hexdigest() == round_planned.input_sha256
        assert await recorded_from_round_input(store, namespace, NAME, rollout) is not None
        overrides = {"maxUnavailable": "100%"}
        assert await what_if_rollout(store, rollout, overrides) == what_if(
            namespace, NAME, events, rollout, overrides
        )
    finally:
        await store.close()


async def test_recreate_rollout_replaces_pods_and_pvcs(stack: Stack, cluster: Cluster) -> None:
    before = await start(stack, cluster, {"type": "ReCreate", "maxUnavailable": "20%"})
    pvcs_before = {p["metadata"]["uid"] for p in (await cluster.pvcs(NAME)).values()}

    await cluster.patch_cloneset(
        NAME, with_image(seed_cloneset("cloneset-sample-data.yaml"), "nginx:mainline")
    )
    done = await wait_for(lambda: settled(cluster, 5, "nginx:mainline", 5), within=90, what="all 5 recreated")
    uids_before = {p["metadata"]["uid"] for p in before.values()}
    assert not uids_before & {p["metadata"]["uid"] for p in done.values()}
    pvcs_after = await cluster.pvcs(NAME)
    assert len(pvcs_after) == 5
    assert not pvcs_before & {p["metadata"]["uid"] for p in pvcs_after.values()}
    assert {instance_id(p) for p in done.values()} == {instance_id(p) for p in pvcs_after.values()}
    assert stack.dead() == []


async def test_pod_deleted_from_outside_comes_back_with_its_pvc(stack: Stack, cluster: Cluster) -> None:
    before = await start(stack, cluster, {"type": "ReCreate"})
    victim = sorted(before)[0]
    pvcs_before = {n: p["metadata"]["uid"] for n, p in (await cluster.pvcs(NAME)).items()}
    await cluster.delete_pod(victim)

    async def replaced() -> Any:
        pods = await settled(cluster, 5)
        if pods and victim in pods and pods[victim]["metadata"]["uid"] != before[victim]["metadata"]["uid"]:
            return pods
        return None

    pods = await wait_for(replaced, within=60, what=f"{victim} recreated")
    assert instance_id(pods[victim]) == instance_id(before[victim])
    assert {n: p["metadata"]["uid"] for n, p in (await cluster.pvcs(NAME)).items()} == pvcs_before
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pods[victim]["spec"]["volumes"]
        if v.get("persistentVolumeClaim")
    ]
    assert claims and all(c in pvcs_before for c in claims)
    assert stack.dead() == []
