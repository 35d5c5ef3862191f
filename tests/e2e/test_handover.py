"""Hand-over from OpenKruise in the middle of an in-place update, end to end: a stand-in for OpenKruise's
controller (tests/e2e/kruise_standin.py) leaves each pod of a CloneSet at a different step of its graced
in-place update, with OpenKruise's own marks (its revision names, ``apps.kruise.io/inplace-update-grace``
holding an ``InPlaceUpdateSpec``, ``apps.kruise.io/inplace-update-state``, ``lifecycle.apps.kruise.io/state``,
the ``InPlaceUpdateReady`` condition). Then rollbook's planner and executor start: the rollout completes,
every pod runs the new image, and no pod is ever reported updated (Ready, at a new revision, lifecycle
Normal) while its containers run the old image."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, watch

from tests.e2e.cluster import GROUP, PLURAL, VERSION, image_of
from tests.e2e.kruise_standin import GATE, LIFECYCLE_LABEL, REVISION_LABEL, STATE_ANNOTATION, KruiseStandIn
from tests.plugins.simcluster import api_client_for
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "handover"
OLD, NEW = "nginx:1.25", "nginx:1.26"
GRACE_ANNOTATION = "apps.kruise.io/inplace-update-grace"
GRACE_SECONDS = 2
CLONESET: dict[str, Any] = {
    "apiVersion": "apps.kruise.io/v1alpha1",
    "kind": "CloneSet",
    "metadata": {"name": NAME, "labels": {"app": NAME}},
    "spec": {
        "replicas": 5,
        "selector": {"matchLabels": {"app": NAME}},
        "template": {
            "metadata": {"labels": {"app": NAME}},
            "spec": {
                "readinessGates": [{"conditionType": GATE}],
                "containers": [{"name": "main", "image": OLD}],
            },
        },
        "updateStrategy": {
            "type": "InPlaceIfPossible",
            "maxUnavailable": 5,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": GRACE_SECONDS},
        },
    },
}


@pytest_asyncio.fixture(loop_scope="session")
async def api(simcluster: Any) -> AsyncIterator[client.ApiClient]:
    api = await api_client_for(simcluster)
    async with api:
        yield api
        with contextlib.suppress(client.ApiException):
            await client.CustomObjectsApi(api).delete_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, NAME
            )


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def running_images(pod: dict[str, Any]) -> set[str]:
    return {s.get("image", "") for s in (pod.get("status") or {}).get("containerStatuses") or []}


def reported_updated_on_old_image(pod: dict[str, Any], old_revision: str) -> bool:
    """In service as an updated pod (Ready, Normal, not at OpenKruise's old revision) while a container
    still runs the old image."""
    labels = pod["metadata"].get("labels") or {}
    return (
        labels.get(REVISION_LABEL) != old_revision
        and labels.get(LIFECYCLE_LABEL) == "Normal"
        and _condition(pod, "Ready") == "True"
        and OLD in running_images(pod)
    )


async def mid_grace(kruise: KruiseStandIn, pod: str) -> None:
    """OpenKruise's round that starts a graced update: out of service, then the revision labels, lifecycle
    Updating and the in-place state with the grace record pending; the images are not patched yet."""
    await kruise.start_in_place(pod)
    revision = kruise.update_revision
    timestamp = kruise.cloneset["metadata"]["creationTimestamp"]
    state = {
        "revision": revision,
        "updateTimestamp": timestamp,
        "lastContainerStatuses": None,
        "updateImages": True,
    }
    grace = {"revision": revision, "containerImages": {"main": NEW}, "graceSeconds": GRACE_SECONDS}
    patch = {
        "metadata": {
            "labels": {
                REVISION_LABEL: revision,
                "pod-template-hash": revision.rsplit("-", 1)[-1],
                LIFECYCLE_LABEL: "Updating",
            },
            "annotations": {STATE_ANNOTATION: json.dumps(state), GRACE_ANNOTATION: json.dumps(grace)},
        }
    }
    response: Any = await kruise.core.patch_namespaced_pod(pod, "default", patch, _preload_content=False)
    await kruise.observed(json.loads(await response.read()))


async def test_rollbook_continues_an_openkruise_in_place_update_at_every_step(
    stack: Stack, api: client.ApiClient
) -> None:
    await stack.start("auditor", "watcher")
    kruise = KruiseStandIn(api, stack.settings.database_url, NAME)
    await kruise.create(CLONESET)
    await kruise.write_status()
    for instance in ("a1", "b2", "c3", "d4", "e5"):
        await kruise.create_pod(instance)
    await kruise.write_status()
    old_revision = kruise.update_revision
    await kruise.set_image(NEW)
    await kruise.write_status()
    untouched, leaving, graced, patched, finished = sorted(await kruise.pods())
    await kruise.start_in_place(leaving)  # InPlaceUpdateReady False, nothing else yet
    await mid_grace(kruise, graced)  # labels at the new revision, images old, grace pending
    await kruise.start_in_place(patched)
    await kruise.patch_in_place(patched)  # images patched, the kubelet restarting
    await kruise.update_in_place(finished)
    response: Any = await kruise.core.patch_namespaced_pod(  # OpenKruise's Updated, before it moves to Normal
        finished, "default", {"metadata": {"labels": {LIFECYCLE_LABEL: "Updated"}}}, _preload_content=False
    )
    await kruise.observed(json.loads(await response.read()))
    await kruise.write_status()
    before = await kruise.pods()
    assert (
        OLD in running_images(before[graced])
        and before[graced]["metadata"]["labels"][REVISION_LABEL] != old_revision
    )

    seen: list[dict[str, Any]] = []

    async def record_pods() -> None:
        stream = watch.Watch().stream(
            kruise.core.list_namespaced_pod, "default", label_selector=f"app={NAME}", _preload_content=False
        )
        async for event in stream:
            seen.append(copy.deepcopy(event["raw_object"]))

    recording = asyncio.create_task(record_pods())
    try:
        await stack.start("planner", "executor")

        async def completed() -> dict[str, Any] | None:
            pods = await kruise.pods()
            cloneset = await kruise.custom.get_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, NAME
            )
            status = cloneset.get("status") or {}
            done = (
                len(pods) == 5
                and all(running_images(p) == {NEW} and image_of(p) == NEW for p in pods.values())
                and all(_condition(p, "Ready") == "True" for p in pods.values())
                and all(p["metadata"]["labels"].get(LIFECYCLE_LABEL) == "Normal" for p in pods.values())
                and status.get("observedGeneration") == cloneset["metadata"]["generation"]
                and status.get("updatedReplicas") == status.get("updatedReadyReplicas") == 5
                and status.get("currentRevision") == status.get("updateRevision")
            )
            return {"pods": pods, "status": status} if done else None

        result = await wait_for(completed, within=120, what="the handed-over rollout to complete")
    finally:
        recording.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recording

    # OpenKruise's name for the template's revision is kept: the pods it labelled counted as updated.
    assert result["status"]["updateRevision"] == kruise.update_revision
    pods = result["pods"]
    assert set(pods) == {untouched, leaving, graced, patched, finished}, "updated in place: no pod replaced"
    for name, pod in pods.items():
        assert pod["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert GRACE_ANNOTATION not in (pod["metadata"].get("annotations") or {}), name
        assert _condition(pod, GATE) == "True"
    offending = [
        (p["metadata"]["name"], p["metadata"]["resourceVersion"])
        for p in seen
        if reported_updated_on_old_image(p, old_revision)
    ]
    assert seen and offending == [], offending
    assert stack.dead() == []
