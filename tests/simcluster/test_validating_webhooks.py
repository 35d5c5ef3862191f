"""Validating admission webhooks: ValidatingWebhookConfigurations are served like the mutating ones, and
their webhooks are called over HTTP after mutation and before the object is stored; a denial is answered
as kube-apiserver answers it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .helpers import pod_manifest, serving
from .test_admission_gc import sidecar_webhook, webhook_config  # noqa: F401 - a fixture

pytestmark = pytest.mark.asyncio(loop_scope="session")

Reviews = list[dict[str, Any]]


@pytest_asyncio.fixture(loop_scope="session")
async def validator() -> AsyncIterator[tuple[str, Reviews]]:
    """A real validating webhook: refuses objects labelled `verdict: deny` (with the code in label
    `code`, when there is one) and records every review it got."""
    reviews: Reviews = []

    async def validate(request: web.Request) -> web.Response:
        review = await request.json()
        reviews.append(review["request"])
        labels = (review["request"]["object"].get("metadata") or {}).get("labels") or {}
        verdict = labels.get("verdict")
        answer: dict[str, Any] = {
            "uid": review["request"]["uid"],
            "allowed": verdict not in ("deny", "silent"),
        }
        if verdict == "deny":
            answer["status"] = {"message": f"{review['request']['name']} is labelled deny"}
            if "code" in labels:
                answer["status"]["code"] = int(labels["code"])
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )

    async with serving("/validate", validate) as url:
        yield url, reviews


def validating_config(
    name: str,
    url: str,
    *,
    failure_policy: str = "Fail",
    operations: tuple[str, ...] = ("CREATE", "UPDATE"),
    group: str = "",
    resource: str = "pods",
    version: str = "v1",
    selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
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
                        "operations": list(operations),
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "resources": [resource],
                    }
                ],
            }
        ],
    }


def status_of(caught: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(caught.value.body)
    return body


async def test_configurations_are_discoverable_and_crud(k8s_client: client.ApiClient) -> None:
    resources = await client.AdmissionregistrationV1Api(k8s_client).get_api_resources()
    assert "validatingwebhookconfigurations" in [r.name for r in resources.resources]
    admissions = client.AdmissionregistrationV1Api(k8s_client)
    created = await admissions.create_validating_webhook_configuration(
        validating_config("crud", "http://127.0.0.1:9/validate", failure_policy="Ignore")
    )
    read = await admissions.read_validating_webhook_configuration("crud")
    assert read.metadata.uid == created.metadata.uid and read.webhooks[0].failure_policy == "Ignore"
    read.webhooks[0].timeout_seconds = 7
    replaced = await admissions.replace_validating_webhook_configuration("crud", read)
    assert replaced.webhooks[0].timeout_seconds == 7
    listed = await admissions.list_validating_webhook_configuration()
    assert [c.metadata.name for c in listed.items] == ["crud"]
    await admissions.delete_validating_webhook_configuration("crud")
    assert not (await admissions.list_validating_webhook_configuration()).items


async def test_denial_is_refused_with_the_webhooks_message_and_nothing_is_stored(
    k8s_client: client.ApiClient, validator: tuple[str, Reviews]
) -> None:
    url, reviews = validator
    core = client.CoreV1Api(k8s_client)
    await client.AdmissionregistrationV1Api(k8s_client).create_validating_webhook_configuration(
        validating_config("guard", url)
    )
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("bad", {"verdict": "deny"}))
    assert caught.value.status == 403  # no status.code in the answer: Forbidden, as kube-apiserver does
    status = status_of(caught)
    assert status["reason"] == "Forbidden"
    assert (
        status["message"] == 'admission webhook "guard.rollbook.dev" denied the request: bad is labelled deny'
    )
    assert not (await core.list_namespaced_pod("default", label_selector="verdict=deny")).items

    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("coded", {"verdict": "deny", "code": "422"}))
    assert caught.value.status == 422  # the webhook's own status.code

    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("silent", {"verdict": "silent"}))
    assert caught.value.status == 403
    assert (
        status_of(caught)["message"]
        == 'admission webhook "guard.rollbook.dev" denied the request without explanation'
    )

    allowed = await core.create_namespaced_pod("default", pod_manifest("good", {"verdict": "allow"}))
    assert allowed.metadata.name == "good"
    review = reviews[-1]
    assert review["operation"] == "CREATE" and review["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert review["namespace"] == "default" and review["oldObject"] is None


async def test_validation_sees_the_mutated_object_and_updates_of_custom_resources(
    k8s_client: client.ApiClient,
    validator: tuple[str, Reviews],
    sidecar_webhook: tuple[str, Reviews],  # noqa: F811 - the fixture imported above
) -> None:
    validate_url, reviews = validator
    mutate_url, _ = sidecar_webhook
    admissions = client.AdmissionregistrationV1Api(k8s_client)
    await admissions.create_mutating_webhook_configuration(webhook_config("inject", mutate_url))
    await admissions.create_validating_webhook_configuration(validating_config("pods", validate_url))
    await admissions.create_validating_webhook_configuration(
        validating_config(
            "sidecarsets", validate_url, group="apps.kruise.io", version="v1alpha1", resource="sidecarsets"
        )
    )
    await client.CoreV1Api(k8s_client).create_namespaced_pod("default", pod_manifest("mutated"))
    pod_review = reviews[-1]
    assert pod_review["object"]["metadata"]["labels"]["injected"] == "true"  # the mutating patch ran first
    assert [c["name"] for c in pod_review["object"]["spec"]["containers"]] == ["app", "log", "sidecar"]

    custom = client.CustomObjectsApi(k8s_client)
    sidecarset = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet",
        "metadata": {"name": "guarded"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await custom.create_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets", sidecarset)
    assert reviews[-1]["resource"] == {
        "group": "apps.kruise.io",
        "version": "v1alpha1",
        "resource": "sidecarsets",
    }
    with pytest.raises(ApiException) as caught:
        await custom.patch_cluster_custom_object(
            "apps.kruise.io",
            "v1alpha1",
            "sidecarsets",
            "guarded",
            {"metadata": {"labels": {"verdict": "deny"}}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 403 and "guarded is labelled deny" in status_of(caught)["message"]
    update = reviews[-1]
    assert update["operation"] == "UPDATE" and update["oldObject"]["metadata"]["name"] == "guarded"
    stored = await custom.get_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets", "guarded")
    assert "verdict" not in (stored["metadata"].get("labels") or {})  # the refused update was not stored


async def test_rules_and_selectors_choose_which_writes_are_validated(
    k8s_client: client.ApiClient, validator: tuple[str, Reviews]
) -> None:
    url, reviews = validator
    admissions = client.AdmissionregistrationV1Api(k8s_client)
    await admissions.create_validating_webhook_configuration(
        validating_config(
            "create-only", url, operations=("CREATE",), selector={"matchLabels": {"checked": "yes"}}
        )
    )
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("unchecked", {"verdict": "deny"}))  # selector
    assert not reviews
    await core.create_namespaced_pod("default", pod_manifest("checked", {"checked": "yes"}))
    assert len(reviews) == 1
    await core.patch_namespaced_pod("checked", "default", {"metadata": {"labels": {"verdict": "deny"}}})
    assert len(reviews) == 1  # UPDATE is not in the rule


async def test_failure_policy_when_the_webhook_is_unreachable(k8s_client: client.ApiClient) -> None:
    admissions = client.AdmissionregistrationV1Api(k8s_client)
    core = client.CoreV1Api(k8s_client)
    unreachable = "http://127.0.0.1:9/validate"
    await admissions.create_validating_webhook_configuration(
        validating_config("lenient", unreachable, failure_policy="Ignore")
    )
    assert (
        await core.create_namespaced_pod("default", pod_manifest("tolerated"))
    ).metadata.name == "tolerated"
    await admissions.create_validating_webhook_configuration(validating_config("strict", unreachable))
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("refused"))
    assert caught.value.status == 500
    assert 'failed calling webhook "strict.rollbook.dev"' in status_of(caught)["message"]
    assert [p.metadata.name for p in (await core.list_namespaced_pod("default")).items] == ["tolerated"]
