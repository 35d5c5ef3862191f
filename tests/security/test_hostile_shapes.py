"""Hostile shapes, as a user who may create a CloneSet would try them: one nested 1,100 levels deep
(the API server stores it: its pod template keeps unknown fields, and kube-apiserver's JSON decoder allows
10,000 levels). Before, it stopped the watcher for every workload (msgspec's RecursionError killed the
watch task, which relisted and met it again). Now it is recorded as ObservationRejected, never planned,
and the other CloneSet rolls out as usual. simcluster stores what kube-apiserver stores and answers a
deeper body with a 400, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
import pytest_asyncio

from services.simcluster import SimCluster
from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on
from tests.plugins.simcluster import api_client_for
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
CLONESETS = "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets"


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(simcluster: SimCluster) -> AsyncIterator[Cluster]:
    api = await api_client_for(simcluster)
    async with api:
        yield Cluster(api)


def nested_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def deep_cloneset_body(name: str, levels: int) -> bytes:
    """A CloneSet whose pod template holds an unknown field nesting ``levels`` lists (encoded by hand:
    no JSON encoder of this process need go that deep)."""
    body = seed_cloneset("cloneset-sample-data.yaml", replicas=2)
    body["metadata"].update(name=name, namespace="default")
    body["spec"]["template"]["deep"] = "HOLE"
    return msgspec.json.encode(body).replace(b'"HOLE"', nested_json(levels))


async def _post(sim: SimCluster, body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            sim.url + CLONESETS, data=body, headers={"Content-Type": "application/json"}
        ) as response:
            return response.status, await response.text()


async def test_simcluster_stores_what_kube_apiserver_stores_and_refuses_deeper_with_a_400(
    simcluster: SimCluster,
) -> None:
    status, text = await _post(simcluster, deep_cloneset_body("deep-9990", 9_990))
    assert status == 201, text[:500]
    async with aiohttp.ClientSession() as session:
        async with session.get(simcluster.url + CLONESETS + "/deep-9990") as response:
            assert response.status == 200
            assert nested_json(9_990) in await response.read()
    status, text = await _post(simcluster, deep_cloneset_body("deep-10001", 10_001))
    assert status == 400, text[:500]
    assert "over the 10000-level limit" in text


async def test_a_cloneset_nested_1100_deep_is_rejected_while_others_roll(
    stack: Stack, cluster: Cluster, simcluster: SimCluster
) -> None:
    await stack.start(*SERVICES)
    status, text = await _post(simcluster, deep_cloneset_body("deep", 1_100))
    assert status == 201, text[:500]
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 1}
    normal = seed_cloneset("cloneset-sample-data.yaml", replicas=3, updateStrategy=strategy)
    normal["metadata"]["name"] = NAME
    await cluster.create_cloneset(normal)
    await wait_for(lambda: all_on(cluster, "nginx:alpine", 3), within=90, what="3 ready pods")
    await cluster.patch_cloneset(NAME, with_image(normal, "nginx:mainline"))
    await wait_for(lambda: all_on(cluster, "nginx:mainline", 3), within=90, what="the rollout beside it done")

    async def rejection() -> Any:
        return await fetch(
            stack.settings.database_url,
            "SELECT payload FROM events WHERE type = 'ObservationRejected' AND stream = $1",
            "CloneSet/default/deep/observed",
        )

    [row] = await wait_for(rejection, within=30, what="ObservationRejected for the deep CloneSet")
    payload = msgspec.json.decode(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
    assert payload["depth"] > 1_100 and payload["depth_limit"] == stack.settings.max_object_depth
    assert "ROLLBOOK_MAX_OBJECT_DEPTH" in payload["reason"]
    assert await cluster.pods("deep") == {}  # never observed, so never planned
    assert stack.dead() == []
    for service in SERVICES:
        assert (await stack.get_json(service, "/healthz"))["status"] == "ok"
