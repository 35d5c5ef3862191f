"""Member slots of partitioned ownership (services/infra/partition_leases.py) against a simcluster over
HTTP: each replica claims the first free or expired member Lease, rollbook-planner-member-<k> with k below
``partition_member_slots``; one more replica than slots takes no partition and is not ready until a slot
frees up; and no replica touches a Lease outside the names the Role grants (deploy/base/rbac.yaml)."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from services.infra import kube
from services.infra.partition_leases import (
    member_lease_names,
    partition_lease_names,
    run_owning_partitions,
)
from services.infra.runtime import ServiceRuntime
from services.infra.settings import Settings
from services.simcluster import SimCluster
from tests.plugins.stack import wait_for


class Replica:
    """One planner process's partition ownership, in-process, with the partitions it works on."""

    def __init__(self, settings: Settings, *, stopping_takes: float = 0.0) -> None:
        """``stopping_takes``: seconds a partition's work takes to stop when handed over."""
        self.runtime = ServiceRuntime(settings, "planner")
        self.working: set[int] = set()
        self.lost: list[int] = []  # partitions whose work was stopped because their Lease lapsed

        async def acquired(partition: int) -> None:
            self.working.add(partition)

        async def dropped(partition: int, graceful: bool) -> None:
            if graceful:
                await asyncio.sleep(stopping_takes)
            else:
                self.lost.append(partition)
            self.working.discard(partition)

        self.task = asyncio.create_task(
            run_owning_partitions(self.runtime, settings, "planner", acquired=acquired, dropped=dropped)
        )

    async def readyz(self) -> dict[str, Any]:
        response = await self.runtime._readyz(None)  # type: ignore[arg-type]
        body: dict[str, Any] = json.loads(response.body)
        return body

    async def member(self) -> str | None:
        details = (await self.readyz()).get("details", {})
        return details.get("partitions", {}).get("member") if details else None


@pytest_asyncio.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    running: list[Replica] = []
    yield running
    for replica in running:
        replica.runtime.request_stop()
    await asyncio.gather(*(r.task for r in running), return_exceptions=True)


def slot_settings(simcluster: SimCluster, slots: int) -> Settings:
    return Settings(
        kubeconfig=str(simcluster.kubeconfig_path),
        bus_partitions=2,
        partition_member_slots=slots,
        leader_lease_duration=4,
        leader_renew_deadline=3.0,
        leader_retry_period=1.0,
    )


async def lease_names(k8s_client: client.ApiClient) -> set[str]:
    listed = await client.CoordinationV1Api(k8s_client).list_namespaced_lease("default")
    return {lease.metadata.name for lease in listed.items}


async def test_replicas_claim_the_first_free_slots_and_one_too_many_waits_unready_for_one(
    simcluster: SimCluster, k8s_client: client.ApiClient, replicas: list[Replica]
) -> None:
    settings = slot_settings(simcluster, slots=2)
    first = Replica(settings)
    replicas.append(first)
    await wait_for(first.member, within=10, what="the first replica's member slot")
    second = Replica(settings)
    replicas.append(second)
    await wait_for(second.member, within=10, what="the second replica's member slot")
    assert (await first.member(), await second.member()) == (
        "default/rollbook-planner-member-0",
        "default/rollbook-planner-member-1",
    )

    third = Replica(settings)
    replicas.append(third)

    async def third_refused() -> bool:
        body = await third.readyz()
        return "no member Lease free" in body.get("reason", "")

    await wait_for(third_refused, within=10, what="the third replica not ready for want of a slot")
    await wait_for(
        lambda: _async(first.working | second.working == {0, 1}), within=10, what="both partitions worked"
    )
    assert third.working == set()

    first.runtime.request_stop()  # a clean stop deletes its member Lease: the slot is free at once
    await first.task
    await wait_for(third.member, within=10, what="the waiting replica claiming the freed slot")
    assert await third.member() == "default/rollbook-planner-member-0"
    assert (await third.readyz())["status"] == "ready"
    allowed = set(partition_lease_names("planner", 2) + member_lease_names("planner", 2))
    assert await lease_names(k8s_client) <= allowed


async def test_a_dead_replicas_slot_is_taken_over_once_expired(
    simcluster: SimCluster, k8s_client: client.ApiClient, replicas: list[Replica]
) -> None:
    # A replica that died holding the only slot: its Lease stays, held, never renewed again.
    now = datetime.datetime.now(datetime.UTC)
    await client.CoordinationV1Api(k8s_client).create_namespaced_lease(
        "default",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="rollbook-planner-member-0"),
            spec=client.V1LeaseSpec(
                holder_identity="dead/1/gone", lease_duration_seconds=4, acquire_time=now, renew_time=now
            ),
        ),
    )
    replica = Replica(slot_settings(simcluster, slots=1))
    replicas.append(replica)

    async def refused() -> bool:
        return "no member Lease free" in (await replica.readyz()).get("reason", "")

    await wait_for(refused, within=5, what="the replica waiting for the held slot")
    await wait_for(replica.member, within=15, what="the expired slot taken over")
    assert await replica.member() == "default/rollbook-planner-member-0"
    await wait_for(lambda: _async(replica.working == {0, 1}), within=10, what="the partitions worked")


async def _async(value: Any) -> Any:
    return value


async def test_a_restarted_instance_takes_its_predecessors_partitions_back_at_once(
    simcluster: SimCluster, k8s_client: client.ApiClient, replicas: list[Replica]
) -> None:
    # A planner killed with SIGKILL (ROLLBOOK_INSTANCE=planner-0): its member slot and both partitions
    # stay held under its name, just renewed, for 60 s. Slot 0 was freed by another replica's clean stop.
    now = datetime.datetime.now(datetime.UTC)
    for name in ("rollbook-planner-member-1", "rollbook-planner-p0", "rollbook-planner-p1"):
        await client.CoordinationV1Api(k8s_client).create_namespaced_lease(
            "default",
            client.V1Lease(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1LeaseSpec(
                    holder_identity="planner-0", lease_duration_seconds=60, acquire_time=now, renew_time=now
                ),
            ),
        )
    settings = msgspec.structs.replace(
        slot_settings(simcluster, slots=2),
        instance="planner-0",
        leader_lease_duration=60,
        leader_renew_deadline=40.0,
    )
    restarted = Replica(settings)
    replicas.append(restarted)
    # Both partitions at once (not after 60 s), and the whole share: the predecessor's member Lease is
    # not counted as a second live replica (which would halve the share) but deleted.
    await wait_for(
        lambda: _async(restarted.working == {0, 1}), within=10, what="the partitions worked at once"
    )
    assert await restarted.member() == "default/rollbook-planner-member-0"
    assert "rollbook-planner-member-1" not in await lease_names(k8s_client)
    assert (await restarted.readyz())["details"]["partitions"]["live_replicas"] == 1


async def test_replicas_at_their_share_read_no_partition_lease_they_do_not_own(
    simcluster: SimCluster, replicas: list[Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every attempt lists the namespace's Leases (the member count); a replica at its share cannot take
    # another partition, so reading the other replica's partition Leases one by one on top of that only
    # costs it, and the API server, CPU: they are observed from the list.
    reads: list[str] = []
    request_json = kube.request_json

    async def counting(api: client.ApiClient, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and "/leases/rollbook-planner-p" in path:
            reads.append(path.rsplit("/", 1)[1])
        return await request_json(api, method, path, *args, **kwargs)

    monkeypatch.setattr(kube, "request_json", counting)
    settings = slot_settings(simcluster, slots=2)
    first = Replica(settings)
    replicas.append(first)
    await wait_for(lambda: _async(first.working == {0, 1}), within=10, what="the first replica's partitions")
    second = Replica(settings)
    replicas.append(second)
    await wait_for(
        lambda: _async(first.working == {0} and second.working == {1}), within=15, what="one partition each"
    )
    reads.clear()
    await asyncio.sleep(4 * settings.leader_retry_period)  # four attempts of each replica
    assert reads == []
    assert (first.working, second.working) == ({0}, {1})  # and both keep renewing their own

    # The list still observes them: once the second replica is gone (its Lease released or expired),
    # the first takes its partition back.
    second.runtime.request_stop()
    await second.task
    await wait_for(lambda: _async(first.working == {0, 1}), within=15, what="the partition taken back")


async def test_a_slow_hand_over_keeps_the_partitions_kept_and_the_one_leaving_renewed(
    simcluster: SimCluster, k8s_client: client.ApiClient, replicas: list[Replica]
) -> None:
    # A planner whose partition's work takes longer to stop than the renew deadline (a round in hand on a
    # loaded machine): while it stops, the partition it keeps, and the one it hands over, are renewed.
    # Were the hand-over awaited by the attempts, neither would be, and both would be lost: the kept
    # partition's work stopped for nothing, the leaving one's Lease lapsed under running work.
    settings = slot_settings(simcluster, slots=2)
    first = Replica(settings, stopping_takes=2 * settings.leader_renew_deadline)
    replicas.append(first)
    await wait_for(lambda: _async(first.working == {0, 1}), within=10, what="the first replica's partitions")
    second = Replica(settings)
    replicas.append(second)

    async def handing_over() -> bool:
        details = (await first.readyz())["details"]["partitions"]
        return bool(details["owned"] == [0] and details.get("handing_over") == [1])

    await wait_for(handing_over, within=10, what="the first replica handing partition 1 over (/readyz)")
    await wait_for(
        lambda: _async(first.working == {0} and second.working == {1}),
        within=4 * settings.leader_renew_deadline,
        what="one partition each",
    )
    assert first.lost == []
    assert second.lost == []
