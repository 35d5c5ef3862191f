"""An action on an existing pod names the resourceVersion it was computed from (``details.resourceVersion``)
when the executor's first write from that version is known without reading the pod: the round's first
action on the pod, on a pod observed with a version that lacks every condition the action writes
(services/model/pod_writes.py). The executor then writes without reading first."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.kinds.cloneset.rules.decisions import decisions_for
from services.kinds.cloneset.rules.model import (
    Action,
    CreatePod,
    DeletePod,
    MarkReady,
    PatchPod,
    Plan,
    UpdateInPlace,
)
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.events import PodActionRequested
from services.model.pod_writes import observed_version

NOT_READY = {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}
READY = {"type": "InPlaceUpdateReady", "status": "True", "reason": "InPlaceUpdateCompleted"}
IMAGE = {"spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]}}


def pod(
    name: str = "web-a", version: str | None = "41", conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if version is not None:
        metadata["resourceVersion"] = version
    return {"metadata": metadata, "status": {"conditions": conditions or []}}


@pytest.mark.parametrize(
    ("details", "observed", "expected"),
    [
        ({"patch": IMAGE}, pod(), "41"),  # a patch with no condition
        (
            {"patch": IMAGE, "notReady": {**NOT_READY, "lastTransitionTime": "t1"}},
            pod(conditions=[READY]),
            "41",
        ),
        # the condition is there already: the executor would leave it out, which it learns by reading
        (
            {"patch": IMAGE, "notReady": NOT_READY},
            pod(conditions=[{**NOT_READY, "lastTransitionTime": "t0"}]),
            None,
        ),
        ({"condition": READY}, pod(conditions=[NOT_READY]), "41"),
        ({"condition": READY}, pod(conditions=[READY]), None),
        ({"patch": IMAGE}, pod(version=None), None),  # observed without a version
        ({"patch": IMAGE}, pod(version=""), None),
        ({"patch": IMAGE}, None, None),  # not observed
    ],
)
def test_the_version_an_action_may_write_at(
    details: dict[str, Any], observed: dict[str, Any] | None, expected: str | None
) -> None:
    assert observed_version(details, observed) == expected


def state(*pods: dict[str, Any]) -> WorkloadState:
    cloneset = {"metadata": {"name": "web", "namespace": "default", "generation": 1}, "spec": {"replicas": 3}}
    workload = WorkloadState("default", "web", cloneset=cloneset, now=datetime(2026, 1, 1, tzinfo=UTC))
    workload.pods = {p["metadata"]["name"]: p for p in pods}
    return workload


def requests(workload: WorkloadState, actions: list[Action]) -> list[PodActionRequested]:
    planned = Plan(
        update_revision=None,
        current_revision=None,
        partition=None,
        status={},
        actions=actions,
        requeue_after_seconds=None,
        rejected=None,
    )
    return [d for d in decisions_for(workload, planned) if isinstance(d, PodActionRequested)]


def test_only_the_rounds_first_action_on_an_existing_pod_names_its_version() -> None:
    workload = state(pod("web-a", "41", [NOT_READY]), pod("web-b", "42"), pod("web-c", "43"))
    actions: list[Action] = [
        MarkReady(pod="web-a", condition=READY),
        # the same pod again: the mark before it moves the version, so this one would only conflict
        PatchPod(pod="web-a", patch={"metadata": {"labels": {"x": "y"}}}),
        UpdateInPlace(pod="web-b", revision="web-2", patch=IMAGE, not_ready=NOT_READY),
        DeletePod(pod="web-c", with_pvcs=False),  # a uid precondition already, no read to save
        CreatePod(
            pod="web-d", revision="web-1", instance_id="d", object=pod("web-d", None)
        ),  # nothing to observe yet
    ]
    versions = [(r.action, r.pod, r.details.get("resourceVersion")) for r in requests(workload, actions)]
    assert versions == [
        ("markReady", "web-a", "41"),
        ("patchPod", "web-a", None),
        ("updateInPlace", "web-b", "42"),
        ("deletePod", "web-c", None),
        ("createPod", "web-d", None),
    ]
