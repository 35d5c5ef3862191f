"""Real values for a recorded action. The trail holds redacted bodies (docs/events.md, "Redaction"): a
pod the planner asks to create, or an in-place patch that changes env, carries digests where the template
had literal values. The executor restores them from the objects the action was built from, read from the
API server now, and refuses when none holds them any more:

1. the workload's template, if its revision hash (finished from the FNV of the live template's revision
   data, any collision count up to the live ``status.collisionCount``) is the action's recorded revision;
2. else a live pod of that revision (label ``controller-revision-hash``), which holds the same values;
3. the pod acted on (a patch may repeat a value it already holds, e.g. its grace annotation).

A digest none of them restores: the template has moved on since the round that planned the action. The
action fails (not retryable) with that reason; the next round plans from the new template."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.model.redaction import RedactionPolicy, digest_map, restore
from services.model.revision_hash import hash_from_fnv, template_fnv
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION

REVISION_LABEL = "controller-revision-hash"


class TemplateMovedOn(Exception):
    """The recorded action's redacted values can no longer be restored."""


def revision_hash_of(cloneset: dict[str, Any], revision: str) -> bool:
    """Whether the live CloneSet's template is the revision named ``revision`` (long or short form)."""
    template = (cloneset.get("spec") or {}).get("template")
    if not isinstance(template, dict):
        return False
    wanted = revision.rsplit("-", 1)[-1]
    fnv = template_fnv(template)
    collisions = int((cloneset.get("status") or {}).get("collisionCount") or 0)
    return any(hash_from_fnv(fnv, count) == wanted for count in range(collisions + 1))


async def restore_cloneset_action(
    policy: RedactionPolicy,
    api: client.ApiClient,
    namespace: str,
    workload: str,
    pod: str,
    revision: str | None,
    details: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    """``details`` with its digests replaced by the real values, and the digests it restored (digest ->
    real value, to scrub them from an error the API server answers); raises TemplateMovedOn."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    sources: list[Any] = []
    restored: Any = details
    missing: list[str] = []
    live_revision = "unknown"

    digests: dict[str, str] = {}

    async def attempt(source: Any) -> bool:
        nonlocal restored, missing, digests
        sources.append(source)
        digests = digest_map(policy, sources)
        restored, missing = restore(details, digests)
        return not missing

    try:
        cloneset = await custom.get_namespaced_custom_object(
            CLONESET_GROUP, CLONESET_VERSION, namespace, CLONESET_PLURAL, workload
        )
        live_revision = str((cloneset.get("status") or {}).get("updateRevision") or "unknown")
        if revision and revision_hash_of(cloneset, revision) and await attempt(cloneset["spec"]["template"]):
            return restored, digests  # type: ignore[return-value]
    except ApiException as error:
        if error.status != 404:
            raise
    if revision:
        selector = f"{REVISION_LABEL}={revision.rsplit('-', 1)[-1]}"
        listing = await kube.raw_json(
            await core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
        )
        for item in listing.get("items") or []:
            if await attempt({"metadata": item.get("metadata") or {}, "spec": item.get("spec") or {}}):
                return restored, digests  # type: ignore[return-value]
    if pod:
        try:
            live = await kube.raw_json(await core.read_namespaced_pod(pod, namespace, _preload_content=False))
            if await attempt(live):
                return restored, digests  # type: ignore[return-value]
        except ApiException as error:
            if error.status != 404:
                raise
    raise TemplateMovedOn(
        f"the action carries {len(set(missing))} redacted value(s) of revision {revision or '(none)'} that "
        f"neither CloneSet {namespace}/{workload}'s template (now {live_revision}) nor a live pod of that "
        "revision holds: the template has moved on since it was planned; the next round plans from it"
    )
