"""Garbage collection of dangling dependents and the response shapes clients negotiate.

- A dependent whose owner uid exists nowhere is deleted by kube-controller-manager's garbage collector
  (`pkg/controller/garbagecollector/garbagecollector.go`, attemptToDeleteItem: no solid owner, dangling
  references -> delete; a solid owner left -> only the dangling reference is removed).
- Table rows embed the object as `includeObject` says (None, Metadata - the default - or Object;
  `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go`), which `kubectl get --sort-by` needs.
- `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` returns only metadata, and an
  Accept the server cannot produce is 406 NotAcceptable (`.../handlers/negotiation`).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster

from .helpers import pod_manifest, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")

MISSING_UID = "6d3c1f0e-9a8b-4c7d-8e6f-5a4b3c2d1e0f"


def _owned(name: str, *uids: str) -> dict[str, Any]:
    body = pod_manifest(name)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": f"owner-{i}", "uid": uid} for i, uid in enumerate(uids)
    ]
    return body


async def test_dependent_of_a_missing_owner_is_collected(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    owner = await core.create_namespaced_pod("default", pod_manifest("solid-owner"))
    await core.create_namespaced_pod("default", _owned("orphan", MISSING_UID))
    await core.create_namespaced_pod("default", _owned("half-owned", MISSING_UID, owner.metadata.uid))

    async def names() -> set[str]:
        return {p.metadata.name for p in (await core.list_namespaced_pod("default")).items}

    await wait_until(names, lambda found: "orphan" not in found)
    kept = await wait_until(
        lambda: core.read_namespaced_pod("half-owned", "default"),
        lambda pod: len(pod.metadata.owner_references or []) == 1,
    )
    assert kept.metadata.owner_references[0].uid == owner.metadata.uid  # only the dangling ref went


async def test_owner_in_another_namespace_is_no_owner(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "elsewhere"}})
    owner = await core.create_namespaced_pod("elsewhere", pod_manifest("far-owner"))
    await core.create_namespaced_pod("default", _owned("cross-ns", owner.metadata.uid))

    async def gone() -> bool:
        try:
            await core.read_namespaced_pod("cross-ns", "default")
        except ApiException as exc:
            return exc.status == 404
        return False

    await wait_until(gone, bool)


async def _get(sim: SimCluster, path: str, accept: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(sim.url + path, headers={"Accept": accept}) as r,
    ):
        return r.status, await r.json()


async def test_table_include_object(simcluster: SimCluster, k8s_client: client.ApiClient) -> None:
    await client.CoreV1Api(k8s_client).create_namespaced_pod("default", pod_manifest("tabled"))
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, body = await _get(simcluster, "/api/v1/namespaces/default/pods?includeObject=Object", table)
    assert status == 200 and body["kind"] == "Table"
    row = body["rows"][0]["object"]
    assert row["kind"] == "Pod" and row["spec"]["containers"][0]["image"] == "nginx:1.25"
    _, body = await _get(simcluster, "/api/v1/namespaces/default/pods", table)
    assert body["rows"][0]["object"]["kind"] == "PartialObjectMetadata"  # the default: Metadata
    _, body = await _get(simcluster, "/api/v1/namespaces/default/pods?includeObject=None", table)
    assert "object" not in body["rows"][0]


async def test_partial_object_metadata_and_not_acceptable(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    await client.CoreV1Api(k8s_client).create_namespaced_pod("default", pod_manifest("meta-only"))
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    status, body = await _get(simcluster, "/api/v1/namespaces/default/pods", accept)
    assert status == 200 and body["kind"] == "PartialObjectMetadataList"
    assert body["items"][0] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": body["items"][0]["metadata"],
    }
    assert body["items"][0]["metadata"]["name"] == "meta-only"
    single = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    status, body = await _get(simcluster, "/api/v1/namespaces/default/pods/meta-only", single)
    assert status == 200 and body["kind"] == "PartialObjectMetadata" and "spec" not in body
    status, body = await _get(
        simcluster, "/api/v1/namespaces/default/pods", "application/vnd.kubernetes.protobuf"
    )
    assert status == 406 and body["reason"] == "NotAcceptable"
    status, body = await _get(
        simcluster, "/api/v1/namespaces/default/pods", "application/json;as=Unknown;g=x;v=v1"
    )
    assert status == 406
