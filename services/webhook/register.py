"""The webhook configurations that make the API server call us, and their registration.

- ``MutatingWebhookConfiguration``: pod CREATE -> /mutate-pod.
- ``ValidatingWebhookConfiguration``: SidecarSet CREATE/UPDATE -> /validate-sidecarset; CloneSet
  (v1alpha1 and v1beta1) CREATE/UPDATE -> /validate-cloneset.

``client_config`` is either URL-based (simcluster, a webhook running outside the cluster) or
service-based (a real cluster; see deploy/base/webhook.yaml). Registration goes through kubernetes-asyncio's
AdmissionregistrationV1Api: create, or replace when it exists.
"""

from __future__ import annotations

import base64
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.model.management import MANAGE_LABEL, OPT_OUT, SHADOW

log = structlog.get_logger("rollbook.webhook.register")

CONFIGURATION_NAME = "rollbook-sidecarset"
POD_WEBHOOK_NAME = "mutate-pod.sidecarset.rollbook.io"
SIDECARSET_WEBHOOK_NAME = "validate-sidecarset.sidecarset.rollbook.io"
SIDECARSET_MUTATING_WEBHOOK_NAME = "mutate-sidecarset.sidecarset.rollbook.io"
CLONESET_WEBHOOK_NAME = "validate-cloneset.cloneset.rollbook.io"
# Namespaces labelled like this are never sent to the pod webhook (OpenKruise skips `control-plane`).
OPT_OUT_LABEL = "rollbook.io/sidecar-injection"
# Namespaces whose pods never reach the pod webhook, matched by the label the API server puts on every
# namespace (its name), so no later label can bring them back in.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# SidecarSets labelled out of rollbook's management (services/model/management.py) never reach the
# SidecarSet webhooks: a webhook outage cannot block them. deploy/with-openkruise narrows it to opted-in.
SIDECARSET_OBJECT_SELECTOR: dict[str, Any] = {
    "matchExpressions": [{"key": MANAGE_LABEL, "operator": "NotIn", "values": [OPT_OUT, SHADOW]}]
}


def url_client_config(base_url: str, path: str, ca_bundle: bytes) -> dict[str, Any]:
    return {"url": base_url.rstrip("/") + path, "caBundle": base64.b64encode(ca_bundle).decode()}


def service_client_config(
    namespace: str, name: str, path: str, ca_bundle: bytes, port: int = 443
) -> dict[str, Any]:
    return {
        "service": {"namespace": namespace, "name": name, "path": path, "port": port},
        "caBundle": base64.b64encode(ca_bundle).decode(),
    }


def mutating_configuration(
    client_config: dict[str, Any],
    *,
    name: str = CONFIGURATION_NAME,
    failure_policy: str = "Ignore",
    timeout_seconds: int = 5,
    sidecarset_client_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Pod CREATE (``client_config``), and SidecarSet CREATE/UPDATE for the hash annotations
    (``sidecarset_client_config``, when given). ``Ignore``: a webhook outage must never stop pod creation,
    and the annotations are informative."""
    configuration: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "rollbook"}},
        "webhooks": [
            {
                "name": POD_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": failure_policy,
                "sideEffects": "NoneOnDryRun",  # injection events are recorded, except for dry runs
                "timeoutSeconds": timeout_seconds,
                "reinvocationPolicy": "Never",
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "control-plane", "operator": "DoesNotExist"},
                        {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["disabled"]},
                        # The cluster's own namespaces, by the label the API server sets on every one.
                        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)},
                    ]
                },
            }
        ],
    }
    if sidecarset_client_config is not None:
        configuration["webhooks"].append(
            {
                "name": SIDECARSET_MUTATING_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": sidecarset_client_config,
                "rules": [_SIDECARSET_RULE],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "reinvocationPolicy": "Never",
                "objectSelector": SIDECARSET_OBJECT_SELECTOR,
            }
        )
    return configuration


_SIDECARSET_RULE: dict[str, Any] = {
    "apiGroups": ["apps.kruise.io"],
    "apiVersions": ["v1alpha1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["sidecarsets"],
    "scope": "Cluster",
}


_CLONESET_RULE: dict[str, Any] = {
    "apiGroups": ["apps.kruise.io"],
    "apiVersions": ["v1alpha1", "v1beta1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["clonesets"],
    "scope": "Namespaced",
}


def validating_configuration(
    client_config: dict[str, Any],
    *,
    name: str = CONFIGURATION_NAME,
    timeout_seconds: int = 5,
    cloneset_client_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SidecarSet CREATE/UPDATE. ``Fail``: a conflicting SidecarSet must not slip in while we are down.
    CloneSet CREATE/UPDATE (``cloneset_client_config``, when given): a spec the planner would reject is
    refused at the door. ``Ignore``: a webhook outage must not block CloneSets; what slips in meanwhile
    the planner still rejects (a SpecRejected and the Rejected condition)."""
    configuration = _validating_sidecarset(client_config, name=name, timeout_seconds=timeout_seconds)
    if cloneset_client_config is not None:
        configuration["webhooks"].append(
            {
                "name": CLONESET_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": cloneset_client_config,
                "rules": [_CLONESET_RULE],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "objectSelector": SIDECARSET_OBJECT_SELECTOR,
            }
        )
    return configuration


def _validating_sidecarset(
    client_config: dict[str, Any], *, name: str, timeout_seconds: int
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "rollbook"}},
        "webhooks": [
            {
                "name": SIDECARSET_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [_SIDECARSET_RULE],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "objectSelector": SIDECARSET_OBJECT_SELECTOR,
            }
        ],
    }


async def _create_or_replace(create: Any, read: Any, replace: Any, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    try:
        await create(body=body)
    except ApiException as err:
        if err.status != 409:
            raise
        existing = await read(name=name)
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": existing.metadata.resource_version},
        }
        await replace(name=name, body=body)


async def register(
    api: client.ApiClient,
    base_url: str,
    ca_bundle: bytes,
    *,
    name: str = CONFIGURATION_NAME,
    failure_policy: str = "Ignore",
) -> None:
    """Register (or update) both URL-based configurations pointing at ``base_url``."""
    admissions = client.AdmissionregistrationV1Api(api)
    await _create_or_replace(
        admissions.create_mutating_webhook_configuration,
        admissions.read_mutating_webhook_configuration,
        admissions.replace_mutating_webhook_configuration,
        mutating_configuration(
            url_client_config(base_url, "/mutate-pod", ca_bundle),
            name=name,
            failure_policy=failure_policy,
            sidecarset_client_config=url_client_config(base_url, "/mutate-sidecarset", ca_bundle),
        ),
    )
    try:
        await _create_or_replace(
            admissions.create_validating_webhook_configuration,
            admissions.read_validating_webhook_configuration,
            admissions.replace_validating_webhook_configuration,
            validating_configuration(
                url_client_config(base_url, "/validate-sidecarset", ca_bundle),
                name=name,
                cloneset_client_config=url_client_config(base_url, "/validate-cloneset", ca_bundle),
            ),
        )
    except ApiException as err:
        if err.status != 404:
            raise
        # An API server that does not serve ValidatingWebhookConfigurations (simcluster and every real
        # cluster do): injection still works; SidecarSet conflicts are then only caught by
        # `rollbook inject` and the planner. Loud, because conflicting SidecarSets can now be applied.
        log.warning("validating_webhook_not_registered", reason="ValidatingWebhookConfiguration not served")


async def unregister(api: client.ApiClient, *, name: str = CONFIGURATION_NAME) -> None:
    admissions = client.AdmissionregistrationV1Api(api)
    for delete in (
        admissions.delete_mutating_webhook_configuration,
        admissions.delete_validating_webhook_configuration,
    ):
        try:
            await delete(name=name)
        except ApiException as err:
            if err.status != 404:  # already gone, or not served at all
                raise
