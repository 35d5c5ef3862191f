"""Looking for kruise-manager at start (services/infra/kruise.py) against simcluster, over HTTP: absent,
present (its webhook configuration), and an API server that cannot be reached."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from services.infra.kruise import KRUISE_MUTATING_WEBHOOK, resolve_selection
from services.infra.settings import Settings
from services.model.management import ManageMode, Selection
from services.simcluster import SimCluster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def kruise_webhook_configuration() -> dict[str, object]:
    """What kruise-manager writes at start (trimmed to one webhook)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": KRUISE_MUTATING_WEBHOOK},
        "webhooks": [
            {
                "name": "mcloneset.kb.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"url": "https://127.0.0.1:1/mutate-apps-kruise-io-v1alpha1-cloneset"},
                "failurePolicy": "Ignore",
                "rules": [
                    {
                        "apiGroups": ["apps.kruise.io"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["clonesets"],
                    }
                ],
            }
        ],
    }


async def test_without_kruise_manager_all_is_kept(simcluster: SimCluster) -> None:
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path), manage="all")
    with capture_logs() as logs:
        selection = await resolve_selection(settings, "planner")
    assert selection == Selection(ManageMode.ALL)
    [line] = [entry for entry in logs if entry["event"] == "manage_selection"]
    assert line["mode"] == "all" and line["kruise_found"] == [] and line["log_level"] == "info"


async def test_beside_kruise_manager_all_is_refused_and_logged(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    await client.AdmissionregistrationV1Api(k8s_client).create_mutating_webhook_configuration(
        kruise_webhook_configuration()
    )
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path), manage="all", manage_namespaces="team-a")
    with capture_logs() as logs:
        selection = await resolve_selection(settings, "webhook")
    assert selection == Selection(ManageMode.LABELLED, frozenset({"team-a"}))
    [line] = [entry for entry in logs if entry["event"] == "manage_all_refused"]
    assert line["log_level"] == "error" and line["service"] == "webhook"
    assert line["kruise_found"] == [f"MutatingWebhookConfiguration {KRUISE_MUTATING_WEBHOOK}"]
    assert "refusing ROLLBOOK_MANAGE=all" in line["detail"]


async def test_an_unreachable_api_server_is_not_taken_for_absence(simcluster: SimCluster) -> None:
    # The same kubeconfig pointing at a port nobody listens on: both probes fail, and the log says that we
    # could not tell (the configured mode stays, with a warning), never that kruise-manager is absent.
    text = simcluster.kubeconfig_path.read_text()
    assert simcluster.url in text
    broken = simcluster.kubeconfig_path.with_name("unreachable-kubeconfig")
    broken.write_text(text.replace(simcluster.url, "http://127.0.0.1:9"))
    with capture_logs() as logs:
        selection = await resolve_selection(Settings(kubeconfig=str(broken), manage="all"), "planner")
    assert selection.mode is ManageMode.ALL
    [line] = [entry for entry in logs if entry["event"] == "manage_selection"]
    assert line["log_level"] == "warning" and len(line["unknown"]) == 2
    assert "could not tell" in line["detail"]
