"""An idle CloneSet, end to end: a pod's readiness probe failing and passing again (a real change of its
ready state each time) stores two rows per change, the pod's observation and the planner's status round
(one ``StatusPlanned`` carrying its ``RoundPlanned``); the CloneSet as rollbook's executor left it (its
pod counts, written with field manager ``rollbook-executor``) is not stored again. The same counts
written by another field manager (OpenKruise's) are stored, and the trail still verifies."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from services.infra.store import EventStore, StoredEvent
from services.model.events import ObjectObserved, RoundPlanned, StatusPlanned
from services.model.rounds import round_of
from services.replay.operations import verify_target
from services.simcluster import SimCluster
from tests.e2e.cluster import GROUP, PLURAL, VERSION, Cluster, is_ready, seed_cloneset
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "sample"
NAMESPACE = "default"
SENTINEL = "test.rollbook.io/sentinel"


async def rows_after(store: EventStore, position: int) -> list[StoredEvent]:
    return [stored async for stored in store.read_all(position)]


async def sentinel(store: EventStore, cluster: Cluster, value: str) -> int:
    """Annotate the CloneSet and wait for the watcher to store that observation; its global position.
    The watcher handles the CloneSet's watch events in order, so every write before this one was handled
    (stored or not) by then."""
    await cluster.patch_cloneset(NAME, {"metadata": {"annotations": {SENTINEL: value}}})

    async def stored() -> int | None:
        async for event in store.read_all(0):
            payload = event.envelope.payload
            if (
                isinstance(payload, ObjectObserved)
                and payload.kind == "CloneSet"
                and (payload.object["metadata"].get("annotations") or {}).get(SENTINEL) == value
            ):
                return event.global_position
        return None

    position: int = await wait_for(stored, within=60, what=f"the watcher to store sentinel {value}")
    return position


def described(rows: list[StoredEvent]) -> list[tuple[str, Any]]:
    """(type, what it says) of each row: a pod's Ready, a status's readyReplicas, a CloneSet's."""
    out: list[tuple[str, Any]] = []
    for row in rows:
        payload = row.envelope.payload
        if isinstance(payload, ObjectObserved):
            status = payload.object.get("status") or {}
            if payload.kind == "Pod":
                ready = next(
                    (c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), None
                )
                out.append(("Pod", ready))
            else:
                out.append((payload.kind, status.get("readyReplicas")))
        elif isinstance(payload, StatusPlanned):
            out.append(
                (
                    "StatusPlanned+round" if round_of(payload) else "StatusPlanned",
                    payload.status["readyReplicas"],
                )
            )
        else:
            out.append((row.envelope.type, None))
    return out


async def test_an_idle_pods_ready_flap_stores_two_rows_per_change_and_another_managers_counts_are_stored(
    stack: Stack, cluster: Cluster, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    await stack.start("auditor", "watcher", "planner", "executor")
    await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", replicas=3))

    async def counted(ready: int) -> bool:
        status = (await cluster.cloneset(NAME)).get("status") or {}
        return status.get("readyReplicas") == ready == status.get("availableReplicas")

    async def steady() -> bool:
        pods = await cluster.pods(NAME)
        return len(pods) == 3 and all(is_ready(p) for p in pods.values()) and await counted(3)

    await wait_for(steady, within=120, what="3 ready pods, counted in the CloneSet's status")
    store = await EventStore.connect(stack.settings.database_url)
    try:
        start = await sentinel(store, cluster, "steady")
        flapped = sorted(await cluster.pods(NAME))[0]

        simcluster.fail_readiness(NAMESPACE, flapped)
        await wait_for(lambda: counted(2), within=60, what="the CloneSet's status to count 2 ready pods")
        down = await sentinel(store, cluster, "down")
        simcluster.fail_readiness(NAMESPACE, flapped, failing=False)
        await wait_for(
            lambda: counted(3), within=60, what="the CloneSet's status to count 3 ready pods again"
        )
        up = await sentinel(store, cluster, "up")

        rows = await rows_after(store, start)
        flap_down = [r for r in rows if r.global_position < down]
        flap_up = [r for r in rows if down < r.global_position < up]
        # Per real change: the pod's observation and the round that planned the status, as one row.
        assert described(flap_down) == [("Pod", "False"), ("StatusPlanned+round", 2)]
        assert described(flap_up) == [("Pod", "True"), ("StatusPlanned+round", 3)]
        assert not any(isinstance(r.envelope.payload, RoundPlanned) for r in flap_down + flap_up)

        # OpenKruise (another field manager) writes the same count: stored, it is not rollbook's write.
        await client.CustomObjectsApi(k8s_client).patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, NAME, {"status": {"readyReplicas": 2}},
            field_manager="kruise-manager", _content_type="application/merge-patch+json",
        )  # fmt: skip
        theirs = await sentinel(store, cluster, "theirs")
        written = [r for r in await rows_after(store, up) if r.global_position < theirs]
        assert ("CloneSet", 2) in described(written)

        report = await verify_target(store, f"{NAMESPACE}/{NAME}")
        assert report.clean, report.divergence and report.divergence.describe()
        assert report.rounds >= 3
    finally:
        await store.close()
