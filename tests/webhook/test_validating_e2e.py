"""End to end: the webhook registers its ValidatingWebhookConfiguration on simcluster, and the API server
refuses a SidecarSet whose container names clash with another SidecarSet's that can select the same pods,
on create and on update, with a message naming both. Everything goes through the Kubernetes API over HTTP
(kubernetes-asyncio); no kubectl."""

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
    [hook] = configuration.webhooks
    assert hook.name == register.SIDECARSET_WEBHOOK_NAME and hook.failure_policy == "Fail"
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
    assert status == 422  # the webhook's status.code
    assert message.startswith(DENIED)
    assert "'more-tools'" in message and "'test-sidecarset'" in message and "'tools'" in message
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
    assert status == 422 and message.startswith(DENIED)
    assert "'unlabelled-tools'" in message and "'test-sidecarset'" in message
    stored = await custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "unlabelled-tools")
    assert stored["spec"]["selector"] == unlabelled
