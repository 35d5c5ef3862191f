"""Looking for OpenKruise's controller at start, and the selection of managed objects that follows
(``services.model.management``).

Two probes, each a GET of one object by name (the RBAC grants exactly these, deploy/base/rbac.yaml):

- the Deployment ``kruise-system/kruise-controller-manager`` (how OpenKruise's Helm chart and its
  kustomize config install kruise-manager);
- the MutatingWebhookConfiguration ``kruise-mutating-webhook-configuration``, which kruise-manager writes
  at start whatever namespace it runs in.

200 is presence, 404 absence (an API server that does not serve the resource answers 404 too); anything
else (403, a timeout) leaves the question open and is reported as such, never as absence.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.infra.settings import Settings
from services.model.management import KruiseEvidence, Resolved, Selection, refuse_all_beside_kruise

log = structlog.get_logger("kruise")

KRUISE_NAMESPACE = "kruise-system"
KRUISE_DEPLOYMENT = "kruise-controller-manager"
KRUISE_MUTATING_WEBHOOK = "kruise-mutating-webhook-configuration"
PROBE_TIMEOUT_SECONDS = 10.0


async def find_kruise(api: client.ApiClient) -> KruiseEvidence:
    apps = client.AppsV1Api(api)
    admissions = client.AdmissionregistrationV1Api(api)
    probes: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        (
            f"Deployment {KRUISE_NAMESPACE}/{KRUISE_DEPLOYMENT}",
            lambda: apps.read_namespaced_deployment(
                KRUISE_DEPLOYMENT, KRUISE_NAMESPACE, _request_timeout=PROBE_TIMEOUT_SECONDS
            ),
        ),
        (
            f"MutatingWebhookConfiguration {KRUISE_MUTATING_WEBHOOK}",
            lambda: admissions.read_mutating_webhook_configuration(
                KRUISE_MUTATING_WEBHOOK, _request_timeout=PROBE_TIMEOUT_SECONDS
            ),
        ),
    ]
    found: list[str] = []
    unknown: list[str] = []
    for what, probe in probes:
        try:
            await probe()
        except ApiException as error:
            if error.status != 404:
                unknown.append(f"{what}: HTTP {error.status} {error.reason}")
            continue
        except Exception as error:  # the API server is unreachable: we cannot tell
            unknown.append(f"{what}: {error!r}")
            continue
        found.append(what)
    return KruiseEvidence(found=tuple(found), unknown=tuple(unknown))


async def resolve_selection(settings: Settings, service: str) -> Selection:
    """The selection this service uses: the settings', refused ``all`` beside kruise-manager; logged.
    ValueError for a malformed ROLLBOOK_MANAGE."""
    wanted = Selection.parse(settings.manage, settings.manage_namespaces)
    api = await kube.api_client(settings)
    try:
        evidence = await find_kruise(api)
    finally:
        await api.close()
    resolved: Resolved = refuse_all_beside_kruise(wanted, evidence)
    fields = {
        "service": service,
        "mode": resolved.selection.mode.value,
        "namespaces": sorted(resolved.selection.namespaces),
        "kruise_found": list(evidence.found),
        "detail": resolved.message,
    }
    if resolved.refused_all:
        log.error("manage_all_refused", **fields)
    elif evidence.unknown:
        log.warning("manage_selection", unknown=list(evidence.unknown), **fields)
    else:
        log.info("manage_selection", **fields)
    return resolved.selection
