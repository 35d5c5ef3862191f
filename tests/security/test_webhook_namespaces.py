"""The pod webhook never sees the cluster's own namespaces: a webhook outage (failurePolicy Fail) or a
hostile SidecarSet must not reach kube-system's pods. Both configurations (the one `rollbook webhook`
registers and deploy/'s) exclude kube-system, kube-public and kube-node-lease by the
``kubernetes.io/metadata.name`` label the API server sets on every namespace, so relabelling a namespace
cannot bring it back in; the selector is evaluated as simcluster's admission evaluates it."""

from __future__ import annotations

from typing import Any

import pytest

from services.model.labels import matches
from services.webhook.register import POD_WEBHOOK_NAME, mutating_configuration, url_client_config
from tests.deploy.manifests import of_kind, render

SYSTEM = ("kube-system", "kube-public", "kube-node-lease")


def pod_webhooks() -> list[tuple[str, dict[str, Any]]]:
    registered = mutating_configuration(url_client_config("https://127.0.0.1:9443", "/mutate-pod", b"ca"))
    found = [("registered", h) for h in registered["webhooks"] if h["name"] == POD_WEBHOOK_NAME]
    for overlay in ("standalone", "with-openkruise"):
        for configuration in of_kind(render(overlay), "MutatingWebhookConfiguration"):
            found += [(overlay, h) for h in configuration["webhooks"] if h["name"] == POD_WEBHOOK_NAME]
    return found


@pytest.mark.parametrize(
    "where,hook", pod_webhooks(), ids=lambda value: value if isinstance(value, str) else ""
)
def test_the_pod_webhook_skips_the_system_namespaces(where: str, hook: dict[str, Any]) -> None:
    selector = hook["namespaceSelector"]
    for namespace in SYSTEM:
        # Whatever other labels an admin adds, the name label keeps it out.
        labels = {"kubernetes.io/metadata.name": namespace, "team": "platform"}
        assert not matches(selector, labels), (where, namespace)
    assert matches(selector, {"kubernetes.io/metadata.name": "default"}), where
    assert matches(selector, {"kubernetes.io/metadata.name": "team-a", "team": "a"}), where
