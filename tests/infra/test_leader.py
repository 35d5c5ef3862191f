"""Leader election (services/infra/leader.py) in one process against a simcluster over HTTP: the first
candidate works at once, a second stands by (ready) until the first releases its Lease on a clean stop,
and a leader that cannot renew (its renewals hang, or someone else took the Lease) stops its work and
raises LeadershipLost instead of working on without the Lease."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from services.infra.leader import LeadershipLost, _election_record, run_while_leading
from services.infra.runtime import ServiceRuntime
from services.infra.settings import Settings
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig
from tests.plugins.stack import wait_for

LEASE = "rollbook-planner"


class Candidate:
    """One service process's election, in-process: its runtime, and a log of its work starting/stopping."""

    def __init__(self, settings: Settings, name: str, log: list[str]) -> None:
        self.name = name
        self.runtime = ServiceRuntime(settings, "planner")
        self.log = log

        async def work() -> None:
            log.append(f"{name} working")
            await self.runtime.stopping.wait()
            log.append(f"{name} stopped")

        self.task = asyncio.create_task(run_while_leading(self.runtime, settings, "planner", work))

    def detail(self) -> dict[str, Any]:
        return dict(self.runtime._details["leader"]())

    async def ready(self) -> bool:
        response = await self.runtime._readyz(None)  # type: ignore[arg-type]
        return response.status == 200


@pytest_asyncio.fixture
async def leases(k8s_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(k8s_client)


@pytest_asyncio.fixture
async def candidates() -> AsyncIterator[list[Candidate]]:
    running: list[Candidate] = []
    yield running
    for candidate in running:
        candidate.runtime.request_stop()
    await asyncio.gather(*(c.task for c in running), return_exceptions=True)


def election_settings(simcluster: SimCluster, **timing: Any) -> Settings:
    return Settings(kubeconfig=str(simcluster.kubeconfig_path), **timing)


async def holder(leases: client.CoordinationV1Api) -> str | None:
    try:
        lease = await leases.read_namespaced_lease(LEASE, "default")
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return lease.spec.holder_identity if lease.spec else None


async def test_one_candidate_works_the_other_stands_by_ready_until_the_lease_is_released(
    simcluster: SimCluster, leases: client.CoordinationV1Api, candidates: list[Candidate]
) -> None:
    # A Lease of 60 s: the standby can only take over within the test's bound if the leader releases it.
    settings = election_settings(
        simcluster, leader_lease_duration=60, leader_renew_deadline=40.0, leader_retry_period=1.0
    )
    log: list[str] = []
    first = Candidate(settings, "first", log)
    candidates.append(first)
    await wait_for(lambda: _async(log == ["first working"]), within=10, what="the first candidate working")
    assert await holder(leases) == first.detail()["identity"]

    second = Candidate(settings, "second", log)
    candidates.append(second)
    await wait_for(second.ready, within=10, what="the standby ready")
    assert second.detail() == {
        "lease": f"default/{LEASE}",
        "identity": second.detail()["identity"],
        "leading": False,
        "holder": first.detail()["identity"],
    }
    assert first.detail()["leading"] is True
    assert log == ["first working"]

    first.runtime.request_stop()  # SIGTERM
    await first.task  # a clean exit
    await wait_for(
        lambda: _async(log[-1] == "second working"), within=20, what="the standby taking over at once"
    )
    assert log == ["first working", "first stopped", "second working"]
    assert await holder(leases) == second.detail()["identity"]
    assert second.detail()["leading"] is True


async def test_a_leader_whose_renewals_hang_stops_its_work_and_exits(
    simcluster: SimCluster, candidates: list[Candidate]
) -> None:
    settings = election_settings(
        simcluster, leader_lease_duration=4, leader_renew_deadline=2.0, leader_retry_period=1.0
    )
    log: list[str] = []
    leader = Candidate(settings, "leader", log)
    candidates.append(leader)
    await wait_for(lambda: _async(log == ["leader working"]), within=10, what="the leader working")
    # The API server stops answering in time: each renewal would hang for a minute.
    simcluster.set_faults(FaultConfig(latency_seconds=60.0))
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(leader.task, 30)
    assert log == ["leader working", "leader stopped"]
    assert leader.detail()["leading"] is False
    assert not await leader.ready()


async def test_a_leader_whose_lease_was_taken_stops_its_work_and_exits(
    simcluster: SimCluster, leases: client.CoordinationV1Api, candidates: list[Candidate]
) -> None:
    settings = election_settings(
        simcluster, leader_lease_duration=4, leader_renew_deadline=2.0, leader_retry_period=1.0
    )
    log: list[str] = []
    leader = Candidate(settings, "leader", log)
    candidates.append(leader)
    await wait_for(lambda: _async(log == ["leader working"]), within=10, what="the leader working")
    lease = await leases.read_namespaced_lease(LEASE, "default")
    lease.spec.holder_identity = "another-host/1/0"
    await leases.replace_namespaced_lease(LEASE, "default", lease)
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(leader.task, 30)
    assert log == ["leader working", "leader stopped"]
    assert await holder(leases) == "another-host/1/0"  # not released: it is not ours


async def held_by_a_killed_process(leases: client.CoordinationV1Api, identity: str, duration: int) -> None:
    """The Lease as a leader killed with SIGKILL leaves it: held, just renewed, never released."""
    now = datetime.datetime.now(datetime.UTC)
    await leases.create_namespaced_lease(
        "default",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=LEASE),
            spec=client.V1LeaseSpec(
                holder_identity=identity, lease_duration_seconds=duration, acquire_time=now, renew_time=now
            ),
        ),
    )


async def test_a_restarted_instance_takes_its_killed_predecessors_lease_at_once(
    simcluster: SimCluster, leases: client.CoordinationV1Api, candidates: list[Candidate]
) -> None:
    # A Lease of 60 s: only a successor that recognises the Lease as its own takes it within the bound.
    timing: dict[str, Any] = {
        "leader_lease_duration": 60,
        "leader_renew_deadline": 40.0,
        "leader_retry_period": 1.0,
    }
    await held_by_a_killed_process(leases, "rollbook-watcher-0", duration=60)
    log: list[str] = []
    # Another replica (another pod) stands by: the Lease is not its own and has not expired.
    other = Candidate(election_settings(simcluster, instance="rollbook-watcher-1", **timing), "other", log)
    candidates.append(other)
    await wait_for(other.ready, within=10, what="the other replica standing by")
    assert other.detail()["holder"] == "rollbook-watcher-0"

    # The killed one's restart: the same instance (the pod's name, which a container restart keeps).
    restarted = Candidate(
        election_settings(simcluster, instance="rollbook-watcher-0", **timing), "restarted", log
    )
    candidates.append(restarted)
    await wait_for(
        lambda: _async(log == ["restarted working"]), within=10, what="the restarted instance working"
    )
    assert restarted.detail()["identity"] == "rollbook-watcher-0"
    assert await holder(leases) == "rollbook-watcher-0"
    assert other.detail()["leading"] is False


async def _async(value: bool) -> bool:
    return value


@pytest.mark.parametrize(
    "spec",
    [
        {
            "holderIdentity": "host/1/abc",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-12-01T23:55:00.123456Z",
            "renewTime": "2026-12-01T23:56:01.000001Z",
            "leaseTransitions": 2,
        },
        {"holderIdentity": "host/1/abc", "leaseDurationSeconds": 15, "renewTime": "2026-12-01T23:56:01Z"},
        {"leaseDurationSeconds": 1, "acquireTime": "2026-12-01T23:55:00+02:00"},
        {},
    ],
)
def test_the_lease_read_as_json_gives_the_election_record_the_library_makes_of_its_model(
    spec: dict[str, Any],
) -> None:
    # The election compares records and re-parses their times: the raw JSON read must give exactly the
    # record kubernetes-asyncio's LeaseLock makes of the V1Lease its generated client returns.
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE},
        "spec": spec,
    }

    class Answer:
        data = json.dumps(lease).encode()

    async def from_model() -> Any:
        async with client.ApiClient() as api:
            model = api.deserialize(Answer(), "V1Lease")
            return LeaseLock(LEASE, "default", "me", api).election_record(model)

    expected = asyncio.run(from_model())
    assert vars(_election_record(spec)) == vars(expected)
