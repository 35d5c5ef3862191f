"""Namespace deletion as Kubernetes runs it: the namespace stays Terminating (deletionTimestamp,
spec.finalizers [kubernetes]) while the namespace controller removes its contents
(`pkg/controller/namespace/deletion/namespaced_resources_deleter.go`, which also writes the
NamespaceContentRemaining / NamespaceFinalizersRemaining conditions); the NamespaceLifecycle admission
plugin (`plugin/pkg/admission/namespace/lifecycle/admission.go`) refuses new content with 403; the
registry answers a re-create with 409 "object is being deleted: ... already exists"
(`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`, Create)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .helpers import pod_manifest, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _status(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        await call
    body: dict[str, Any] = json.loads(caught.value.body)
    assert body["code"] == caught.value.status
    return body


async def test_namespace_terminates_until_finalizer_held_content_is_gone(
    k8s_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "doomed"}})
    held = pod_manifest("held")
    held["metadata"]["finalizers"] = ["example.com/block"]
    await core.create_namespaced_pod("doomed", held)
    await core.create_namespaced_pod("doomed", pod_manifest("free"))

    deleted = await (await core.delete_namespace("doomed", _preload_content=False)).json()
    assert deleted["kind"] == "Namespace"  # answered with the namespace, which is still there
    assert deleted["status"]["phase"] == "Terminating" and deleted["metadata"]["deletionTimestamp"]

    def finalizers_remain(ns: client.V1Namespace) -> bool:
        conditions = {c.type: c for c in ns.status.conditions or []}
        remaining = conditions.get("NamespaceFinalizersRemaining")
        return remaining is not None and remaining.status == "True"

    ns = await wait_until(lambda: core.read_namespace("doomed"), finalizers_remain)
    conditions = {c.type: c for c in ns.status.conditions}
    assert conditions["NamespaceContentRemaining"].status == "True"
    assert conditions["NamespaceContentRemaining"].message == (
        "Some resources are remaining: pods. has 1 resource instances"
    )
    assert conditions["NamespaceFinalizersRemaining"].message == (
        "Some content in the namespace has finalizers remaining: example.com/block in 1 resource instances"
    )
    assert conditions["NamespaceDeletionContentFailure"].status == "False"
    pods = await core.list_namespaced_pod("doomed")
    assert [p.metadata.name for p in pods.items] == ["held"]
    assert pods.items[0].metadata.deletion_timestamp is not None

    refused = await _status(core.create_namespaced_pod("doomed", pod_manifest("late")))
    assert refused["code"] == 403 and refused["reason"] == "Forbidden"
    assert refused["message"] == (
        'pods "late" is forbidden: unable to create new content in namespace doomed '
        "because it is being terminated"
    )
    assert refused["details"]["causes"][0]["reason"] == "NamespaceTerminating"

    again = await _status(core.create_namespace({"metadata": {"name": "doomed"}}))
    assert again["code"] == 409 and again["reason"] == "AlreadyExists"
    assert again["message"] == 'object is being deleted: namespaces "doomed" already exists'

    await core.patch_namespaced_pod("held", "doomed", {"metadata": {"finalizers": None}})

    async def gone() -> bool:
        try:
            await core.read_namespace("doomed")
        except ApiException as exc:
            return exc.status == 404
        return False

    await wait_until(gone, bool)
    await core.create_namespace({"metadata": {"name": "doomed"}})
    assert (await core.list_namespaced_pod("doomed")).items == []  # nothing of the old one comes back


async def test_empty_namespace_goes_at_once_after_the_controller_runs(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "empty"}})
    await core.delete_namespace("empty")

    async def listed() -> list[str]:
        return [n.metadata.name for n in (await core.list_namespace()).items]

    await wait_until(listed, lambda names: "empty" not in names)
