"""PATCH under concurrent writes, as kube-apiserver answers it: a patch that names no resourceVersion is
re-applied to the current object when another write lands between its read and its write (here: while an
admission webhook is deciding), so no writer sees a 409 it did not ask for; a patch that names a
resourceVersion is a precondition and fails with 409 when the object moved on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .helpers import pod_manifest, serving
from .test_validating_webhooks import validating_config

pytestmark = pytest.mark.asyncio(loop_scope="session")

MERGE_PATCH: Any = {"_content_type": "application/merge-patch+json"}


@pytest_asyncio.fixture(loop_scope="session")
async def racing_webhook(k8s_client: client.ApiClient) -> AsyncIterator[str]:
    """A validating webhook that, the first time it reviews an update of a pod, writes a label of its own
    on that pod through the API before it allows the update: the reviewed write then meets a newer
    object when it is stored."""
    core = client.CoreV1Api(k8s_client)
    raced: set[str] = set()

    async def validate(request: web.Request) -> web.Response:
        review = (await request.json())["request"]
        name = review["name"]
        if review["operation"] == "UPDATE" and name not in raced:
            raced.add(name)
            await core.patch_namespaced_pod(
                name, review["namespace"], {"metadata": {"labels": {"raced": "yes"}}}, **MERGE_PATCH
            )
        answer = {"uid": review["uid"], "allowed": True}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )

    async with serving("/validate", validate) as url:
        await client.AdmissionregistrationV1Api(k8s_client).create_validating_webhook_configuration(
            validating_config("racer", url, operations=("UPDATE",))
        )
        yield "racer"


async def test_a_patch_without_resource_version_is_reapplied_over_a_concurrent_write(
    k8s_client: client.ApiClient, racing_webhook: str
) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("web-0"))

    patched = await core.patch_namespaced_pod(
        "web-0", "default", {"metadata": {"labels": {"version": "2"}}}, **MERGE_PATCH
    )

    # Both writes are kept: the webhook's label and the patch re-applied on top of it.
    assert patched.metadata.labels == {"app": "web", "raced": "yes", "version": "2"}
    stored = await core.read_namespaced_pod("web-0", "default")
    assert stored.metadata.labels == patched.metadata.labels


async def test_a_patch_naming_the_resource_version_it_read_fails_when_the_object_moved_on(
    k8s_client: client.ApiClient, racing_webhook: str
) -> None:
    core = client.CoreV1Api(k8s_client)
    created = await core.create_namespaced_pod("default", pod_manifest("web-1"))

    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "web-1",
            "default",
            {
                "metadata": {
                    "resourceVersion": created.metadata.resource_version,
                    "labels": {"version": "2"},
                }
            },
            **MERGE_PATCH,
        )

    assert caught.value.status == 409
    stored = await core.read_namespaced_pod("web-1", "default")
    assert stored.metadata.labels == {"app": "web", "raced": "yes"}  # the racing write only
