"""Fault injection: failed writes (seeded), added latency, watch streams cut after N events."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import FaultConfig, SimConfig
from services.simcluster.resources import PODS

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import pod_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def outcomes(make_simcluster: MakeSimCluster, faults: FaultConfig, writes: int) -> list[int]:
    sim = await make_simcluster(SimConfig(faults=faults, kubelet=False))
    results = []
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        for i in range(writes):
            try:
                await core.create_namespaced_pod("default", pod_manifest(f"f{i}"))
                results.append(201)
            except ApiException as exc:
                results.append(exc.status)
                body = json.loads(exc.body)
                assert body["kind"] == "Status" and body["code"] == exc.status
                if exc.status == 429:
                    assert exc.headers is not None and exc.headers["Retry-After"] == "1"
        listed = await core.list_namespaced_pod("default")  # reads are never failed
        assert len(listed.items) == results.count(201)
    return results


async def test_write_errors_are_seeded_and_a_share_of_writes(make_simcluster: MakeSimCluster) -> None:
    faults = FaultConfig(write_error_rate=0.5, seed=7)
    first = await outcomes(make_simcluster, faults, 40)
    again = await outcomes(make_simcluster, faults, 40)
    assert first == again  # same seed, same failures
    assert {500, 429, 201} == set(first)
    assert 8 <= first.count(201) <= 32


async def test_latency_is_added_to_requests(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(faults=FaultConfig(latency_seconds=0.1), kubelet=False))
    async with await api_client_for(sim) as api_client:
        started = time.monotonic()
        await client.CoreV1Api(api_client).list_namespaced_pod("default")
        assert time.monotonic() - started >= 0.1


async def test_watch_streams_are_cut_after_n_events(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(faults=FaultConfig(watch_cut_after_events=3), kubelet=False))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        for i in range(5):
            await core.create_namespaced_pod("default", pod_manifest(f"c{i}"))
        events = [
            e async for e in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=5)
        ]
        assert len(events) == 3  # the server ended the stream early


@pytest.mark.parametrize(
    ("spared", "lease_writes_fail"), [(FaultConfig().spared_resources, False), ((), True)]
)
async def test_write_errors_spare_leases_unless_told_otherwise(
    make_simcluster: MakeSimCluster, spared: tuple[str, ...], lease_writes_fail: bool
) -> None:
    """Leader election Leases are spared by default, so write errors aimed at the controllers' writes do
    not also end the planner's and watcher's leadership."""
    faults = FaultConfig(write_error_rate=1.0, spared_resources=spared)
    sim = await make_simcluster(SimConfig(faults=faults, kubelet=False))
    async with await api_client_for(sim) as api_client:
        with pytest.raises(ApiException):
            await client.CoreV1Api(api_client).create_namespaced_pod("default", pod_manifest("p"))
        leases = client.CoordinationV1Api(api_client)
        body = {"metadata": {"name": "rollbook-planner"}, "spec": {"holderIdentity": "a"}}
        try:
            await leases.create_namespaced_lease("default", body)
            failed = False
        except ApiException:
            failed = True
    assert failed is lease_writes_fail


async def _lost(make_simcluster: MakeSimCluster, mode: str) -> Any:
    return await make_simcluster(
        SimConfig(faults=FaultConfig(lost_response_rate=1.0, lost_response_modes=(mode,)), kubelet=False)
    )


async def test_create_whose_answer_is_lost_commits_and_its_retry_is_already_exists(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await _lost(make_simcluster, "error")
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        with pytest.raises(ApiException) as first:
            await core.create_namespaced_pod("default", pod_manifest("once"))
        assert first.value.status == 500
        with pytest.raises(ApiException) as retry:
            await core.create_namespaced_pod("default", pod_manifest("once"))
        assert retry.value.status == 409 and json.loads(retry.value.body)["reason"] == "AlreadyExists"
        assert [p.metadata.name for p in (await core.list_namespaced_pod("default")).items] == ["once"]
    assert sim.faults.lost_responses == 1  # the refused retry committed nothing: its 409 is answered


async def test_patch_retried_after_a_timeout_lands_twice(make_simcluster: MakeSimCluster) -> None:
    sim = await _lost(make_simcluster, "timeout")
    sim.set_faults(FaultConfig())
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        await core.create_namespaced_pod("default", pod_manifest("twice"))
        await core.patch_namespaced_pod(
            "twice", "default", [{"op": "add", "path": "/metadata/finalizers", "value": []}]
        )
        sim.set_faults(FaultConfig(lost_response_rate=1.0, lost_response_modes=("timeout",)))
        add = [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/x"}]
        for _ in range(2):  # the client retries what it believes failed
            with pytest.raises(ApiException) as timed_out:
                await core.patch_namespaced_pod("twice", "default", add)
            assert timed_out.value.status == 504
            assert json.loads(timed_out.value.body)["reason"] == "Timeout"
        sim.set_faults(FaultConfig())
        pod = await core.read_namespaced_pod("twice", "default")
        assert pod.metadata.finalizers == ["example.com/x", "example.com/x"]


async def test_cut_connection_after_the_write(make_simcluster: MakeSimCluster) -> None:
    sim = await _lost(make_simcluster, "reset")
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        with pytest.raises(aiohttp.ClientError):
            await core.create_namespaced_pod("default", pod_manifest("cut"))
        assert sim.store.find(PODS, "default", "cut") is not None
