"""Mutating admission webhooks over HTTP, and garbage collection of dependents."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.webhook.tls import generate_self_signed

from .helpers import pod_manifest, serving, wait_until
from .test_rest import cloneset_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def sidecar_webhook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A real webhook server that injects a sidecar container and a label; records the reviews it got."""
    reviews: list[dict[str, Any]] = []

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        reviews.append(review)
        operations = [
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "sidecar", "image": "envoy:1.30"}},
            {"op": "add", "path": "/metadata/labels/injected", "value": "true"},
        ]
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(operations).encode()).decode(),
                },
            }
        )

    async with serving("/mutate", mutate) as url:
        yield url, reviews


def webhook_config(name: str, url: str, failure_policy: str = "Fail", selector: dict | None = None) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.rollbook.dev",
                "clientConfig": {"url": url},
                "failurePolicy": failure_policy,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "timeoutSeconds": 2,
                "objectSelector": selector or {},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }


async def test_webhook_patch_is_applied_at_create(
    k8s_client: client.ApiClient, sidecar_webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    url, reviews = sidecar_webhook
    admission = client.AdmissionregistrationV1Api(k8s_client)
    core = client.CoreV1Api(k8s_client)
    await admission.create_mutating_webhook_configuration(
        webhook_config("sidecar", url, selector={"matchLabels": {"inject": "yes"}})
    )
    created = await core.create_namespaced_pod("default", pod_manifest("injected", {"inject": "yes"}))
    assert [c.name for c in created.spec.containers] == ["app", "log", "sidecar"]
    assert created.metadata.labels["injected"] == "true"
    review = reviews[-1]["request"]
    assert review["operation"] == "CREATE" and review["kind"]["kind"] == "Pod"
    assert review["object"]["metadata"]["name"] == "injected"
    # The object selector keeps the webhook away from other pods.
    plain = await core.create_namespaced_pod("default", pod_manifest("plain"))
    assert [c.name for c in plain.spec.containers] == ["app", "log"] and len(reviews) == 1


async def test_webhook_failure_policy(k8s_client: client.ApiClient) -> None:
    admission = client.AdmissionregistrationV1Api(k8s_client)
    core = client.CoreV1Api(k8s_client)
    unreachable = "http://127.0.0.1:9/mutate"
    await admission.create_mutating_webhook_configuration(webhook_config("lenient", unreachable, "Ignore"))
    created = await core.create_namespaced_pod("default", pod_manifest("tolerated"))
    assert created.metadata.name == "tolerated"
    await admission.create_mutating_webhook_configuration(webhook_config("strict", unreachable, "Fail"))
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("refused"))
    assert caught.value.status == 500 and "failed calling webhook" in json.loads(caught.value.body)["message"]


async def _cloneset_with_dependents(k8s_client: client.ApiClient, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(k8s_client)
    core = client.CoreV1Api(k8s_client)
    owner = await custom.create_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", cloneset_manifest(name)
    )
    ref = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "name": name,
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for i in range(2):
        pod = pod_manifest(f"{name}-{i}", {"app": name})
        pod["metadata"]["ownerReferences"] = [ref]
        await core.create_namespaced_pod("default", pod)
        await core.create_namespaced_persistent_volume_claim(
            "default",
            {
                "metadata": {"name": f"data-{name}-{i}", "labels": {"app": name}, "ownerReferences": [ref]},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
        )
    return owner


async def test_deleting_owner_collects_pods_and_pvcs(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    custom = client.CustomObjectsApi(k8s_client)
    await _cloneset_with_dependents(k8s_client, "gc")
    await custom.delete_namespaced_custom_object("apps.kruise.io", "v1alpha1", "default", "clonesets", "gc")
    await wait_until(
        lambda: core.list_namespaced_pod("default", label_selector="app=gc"), lambda r: not r.items
    )
    await wait_until(
        lambda: core.list_namespaced_persistent_volume_claim("default", label_selector="app=gc"),
        lambda r: not r.items,
    )


async def test_orphan_propagation_keeps_dependents(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    custom = client.CustomObjectsApi(k8s_client)
    await _cloneset_with_dependents(k8s_client, "orphans")
    await custom.delete_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", "orphans", propagation_policy="Orphan"
    )
    pods = await core.list_namespaced_pod("default", label_selector="app=orphans")
    assert len(pods.items) == 2 and all(not p.metadata.owner_references for p in pods.items)


async def test_foreground_deletion_waits_for_dependents(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    custom = client.CustomObjectsApi(k8s_client)
    await _cloneset_with_dependents(k8s_client, "fg")
    deleting = await custom.delete_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", "fg", propagation_policy="Foreground"
    )
    assert "foregroundDeletion" in deleting["metadata"]["finalizers"]

    async def cloneset_gone() -> bool:
        try:
            await custom.get_namespaced_custom_object(
                "apps.kruise.io", "v1alpha1", "default", "clonesets", "fg"
            )
        except ApiException as exc:
            return exc.status == 404
        return False

    await wait_until(cloneset_gone, lambda gone: gone)
    assert not (await core.list_namespaced_pod("default", label_selector="app=fg")).items


async def test_https_webhook_verified_against_ca_bundle(k8s_client: client.ApiClient, tmp_path: Path) -> None:
    """Real clusters call webhooks over HTTPS, trusting the configuration's caBundle."""
    certificate = generate_self_signed(tmp_path, ("127.0.0.1",))

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        patch = [{"op": "add", "path": "/metadata/annotations", "value": {"tls": "verified"}}]
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                },
            }
        )

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.server_context())
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        config = webhook_config(
            "tls", f"https://127.0.0.1:{port}/mutate", selector={"matchLabels": {"tls": "on"}}
        )
        config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(certificate.ca_bundle).decode()
        await client.AdmissionregistrationV1Api(k8s_client).create_mutating_webhook_configuration(config)
        created = await client.CoreV1Api(k8s_client).create_namespaced_pod(
            "default", pod_manifest("tls", {"tls": "on"})
        )
        assert created.metadata.annotations == {"tls": "verified"}
    finally:
        await runner.cleanup()
