"""End to end: the webhook registers its ValidatingWebhookConfiguration on simcluster, and the API server
refuses a SidecarSet whose container names clash with another SidecarSet's that can select the same pods,
on create and on update, with OpenKruise's message naming the other. Everything goes through the
Kubernetes API over HTTP (kubernetes-asyncio); no kubectl."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.webhook import register
from services.webhook.service import RunningWebhook
from tests.webhook.test_e2e_simcluster import GROUP, PLURAL, VERSION, apply_sidecarset, webhook  # noqa: F401
from tests.webhook.test_injection_rules import container, make_sidecarset, seed_sidecarset

DENIED = f'admission webhook "{register.SIDECARSET_WEBHOOK_NAME}" denied the request: '


async def refusal_of(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        await call
    body: dict[str, Any] = json.loads(caught.value.body)
    return caught.value.status, body["message"]


async def stored_names(api: client.ApiClient) -> set[str]:
    listed = await client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    return {item["metadata"]["name"] for item in listed["items"]}


async def test_validating_configuration_is_registered_for_sidecarset_writes(
    webhook: RunningWebhook,  # noqa: F811 - the fixture imported above
    k8s_client: client.ApiClient,
) -> None:
    configuration = await client.AdmissionregistrationV1Api(k8s_client).read_validating_webhook_configuration(
        register.CONFIGURATION_NAME
    )
    hooks = {h.name: h for h in configuration.webhooks}
    assert set(hooks) == {register.SIDECARSET_WEBHOOK_NAME, register.CLONESET_WEBHOOK_NAME}
    hook = hooks[register.SIDECARSET_WEBHOOK_NAME]
    assert hook.failure_policy == "Fail"
    assert hook.client_config.url.endswith("/validate-sidecarset")
    [rule] = hook.rules
    assert sorted(rule.operations) == ["CREATE", "UPDATE"] and rule.resources == ["sidecarsets"]
    assert rule.api_groups == [GROUP]


async def test_conflicting_sidecarset_is_refused_naming_both(
    webhook: RunningWebhook,  # noqa: F811 - the fixture imported above
    k8s_client: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    await apply_sidecarset(k8s_client, webhook, seed_sidecarset())

    # Selects app=nginx pods, which the seed's `app Exists` selector also selects, and declares `tools`.
    clash = make_sidecarset("more-tools", containers=[container("tools")])
    status, message = await refusal_of(
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body=clash)
    )
    assert status == 500  # the webhook's status.code, as OpenKruise's answers
    assert (
        message
        == DENIED
        + 'spec.containers: Invalid value: "tools": container tools already exist in test-sidecarset'
    )
    assert "more-tools" not in await stored_names(k8s_client)

    # Same pods, other container names: accepted.
    await apply_sidecarset(
        k8s_client, webhook, make_sidecarset("debug-tools", containers=[container("debug")])
    )
    # Same container name, but only for pods of another namespace than the seed's: accepted.
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset("public-tools", namespace="kube-public", containers=[container("tools")]),
    )
    assert {"test-sidecarset", "debug-tools", "public-tools"} <= await stored_names(k8s_client)

    # Same namespace and container name, but only for pods without an `app` label: accepted...
    unlabelled = {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset("unlabelled-tools", selector=unlabelled, containers=[container("tools")]),
    )
    # ...until an update widens its selector to pods the seed's SidecarSet selects: refused, and the stored
    # SidecarSet stays as it was.
    widened = {"spec": {"selector": {"matchExpressions": None, "matchLabels": {"app": "nginx"}}}}
    status, message = await refusal_of(
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, "unlabelled-tools", widened, _content_type="application/merge-patch+json"
        )
    )
    assert status == 500 and message.startswith(DENIED)
    assert message.endswith("container tools already exist in test-sidecarset")
    stored = await custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "unlabelled-tools")
    assert stored["spec"]["selector"] == unlabelled


CLONESET_DENIED = f'admission webhook "{register.CLONESET_WEBHOOK_NAME}" denied the request: '


def seed_cloneset(name: str, **strategy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]},
            },
            "updateStrategy": {"type": "InPlaceIfPossible", **strategy},
        },
    }


async def test_an_invalid_cloneset_is_refused_at_the_door_with_422_and_openkruises_message(
    webhook: RunningWebhook,  # noqa: F811 - the fixture imported above
    k8s_client: client.ApiClient,
) -> None:
    """The issue's cases: `partition: "abc%"` and `maxUnavailable: 0` with `maxSurge: 0` were stored (and
    `kubectl get` then showed pods "updated" to an image never rolled out); now the API server refuses them,
    on create and on update, and nothing is stored."""
    custom = client.CustomObjectsApi(k8s_client)
    hook = next(
        h
        for h in (
            await client.AdmissionregistrationV1Api(k8s_client).read_validating_webhook_configuration(
                register.CONFIGURATION_NAME
            )
        ).webhooks
        if h.name == register.CLONESET_WEBHOOK_NAME
    )
    assert hook.failure_policy == "Ignore" and hook.client_config.url.endswith("/validate-cloneset")
    assert sorted(hook.rules[0].api_versions) == ["v1alpha1", "v1beta1"]

    status, message = await refusal_of(
        custom.create_namespaced_custom_object(
            GROUP, "v1alpha1", "default", "clonesets", body=seed_cloneset("web-abc", partition="abc%")
        )
    )
    assert status == 422, message
    assert message == (
        CLONESET_DENIED + 'spec.updateStrategy.partition: Invalid value: "abc%": failed'
        " GetScaledValueFromIntOrPercent for partition: invalid value for IntOrString: invalid value"
        ' "abc%": strconv.Atoi: parsing "abc": invalid syntax'
    )
    await custom.create_namespaced_custom_object(
        GROUP, "v1alpha1", "default", "clonesets", body=seed_cloneset("web-ok", maxUnavailable=1)
    )
    status, message = await refusal_of(
        custom.patch_namespaced_custom_object(
            GROUP, "v1alpha1", "default", "clonesets", "web-ok",
            {"spec": {"updateStrategy": {"maxUnavailable": 0, "maxSurge": 0}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )
    )  # fmt: skip
    assert status == 422 and message.startswith(CLONESET_DENIED + "spec.updateStrategy.maxUnavailable: "), (
        message
    )
    assert message.endswith("maxUnavailable and maxSurge should not both be less than 1")
    listed = await custom.list_namespaced_custom_object(GROUP, "v1alpha1", "default", "clonesets")
    stored = {i["metadata"]["name"]: i for i in listed["items"]}
    assert "web-abc" not in stored and stored["web-ok"]["spec"]["updateStrategy"]["maxUnavailable"] == 1
