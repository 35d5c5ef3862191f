"""The executor's typed actions (services/kinds/<kind>/actions.py) hold exactly what the planner records:
every action kind the planners request today decodes from its details and encodes back to the same bytes,
and every PodActionRequested of the recorded trails round-trips unchanged. A request no kind reads is
refused with its reason."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from services.kinds import registry
from services.kinds.cloneset import actions as cloneset_actions
from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.decisions import decisions_for
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import InvalidAction, requested_action
from services.kinds.sidecarset.actions import UpdateSidecarInPlace
from services.model.actions import ActionKind
from services.model.events import ObjectObserved, PodActionRequested, new_event
from tests.kinds.sidecarset.test_decisions import decide as sidecarset_decide
from tests.kinds.sidecarset.test_decisions import state_with
from tests.kinds.sidecarset.test_upgrade import NEW, pod, sidecarset
from tests.planner.builders import cloneset

TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CONDITION = {"type": "InPlaceUpdateReady", "status": "False"}
PATCH = {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}


def _observed(state: WorkloadState, version: int, kind: str, obj: dict[str, Any]) -> None:
    metadata = obj["metadata"]
    state.fold(
        new_event(
            ObjectObserved(
                kind=kind,
                namespace="default",
                name=metadata["name"],
                uid=metadata["uid"],
                resource_version=str(version),
                change="ADDED",
                object=obj,
            ),
            stream=registry.CLONESET.observed_stream("default", "web"),
            stream_version=version,
            occurred_at=T0,
        )
    )


def _pod(name: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
        },
    }


def cloneset_requests() -> list[PodActionRequested]:
    """The requests the CloneSet planner records for a plan holding every plan action kind (with and
    without the observed version, with and without claims), and the podsToDelete write-back."""
    state = WorkloadState("default", "web")
    obj = cloneset("web", replicas=3)
    _observed(state, 1, "CloneSet", obj)
    for version, name in enumerate(["web-a", "web-b", "web-c"], start=2):
        _observed(state, version, "Pod", _pod(name, version))
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-web-d"}}
    _observed(state, 5, "PersistentVolumeClaim", {**claim, "metadata": {**claim["metadata"], "uid": "pvc-1"}})
    actions: list[model.Action] = [
        model.CreatePVC(pod="web-d", pvc="data-web-d", object=claim, reason="claim first"),
        model.CreatePod(pod="web-d", revision="r2", instance_id="d", object={"metadata": {"name": "web-d"}}),
        model.CreatePod(pod="web-e", revision="r2", instance_id="e", object={"metadata": {}}, pvcs=[claim]),
        model.DeletePod(pod="web-a", with_pvcs=True, pvcs=["data-web-d"], reason="scale in"),
        model.DeletePod(pod="web-gone", with_pvcs=False),
        model.DeletePVC(pod="web-d", pvc="data-web-d"),
        model.UpdateInPlace(
            pod="web-b",
            revision="r2",
            patch=PATCH,
            change="Rebuild",
            restart_containers=["nginx"],
            not_ready=CONDITION,
        ),  # fmt: skip
        model.ResizePod(pod="web-b", revision="r2", resources={"nginx": {"requests": {"cpu": "1"}}}),
        model.RecreatePod(pod="web-c", revision="r2", patch={"metadata": {"labels": {"x": "y"}}}),
        model.MarkNotReady(pod="web-c", condition=CONDITION, patch={"metadata": {}}, revision="r2"),
        model.MarkReady(pod="web-a", condition=CONDITION),
        model.PatchPod(pod="web-b", patch={"metadata": {"labels": {"state": "Normal"}}}),
    ]
    plan = model.Plan(
        update_revision="r2",
        current_revision="r1",
        partition=None,
        actions=actions,
        status=None,
        requeue_after_seconds=None,
        rejected=None,
        pods_to_delete=["web-gone"],
    )
    requests = [d for d in decisions_for(state, plan) if isinstance(d, PodActionRequested)]
    assert {r.action for r in requests} == set(cloneset_actions.ACTIONS)
    return requests


def sidecarset_requests() -> list[PodActionRequested]:
    state = state_with(sidecarset(NEW), [pod("a"), pod("b", age=1)])
    requests = [d for d in sidecarset_decide(state) if isinstance(d, PodActionRequested)]
    assert requests and {r.action for r in requests} == {ActionKind.UPDATE_SIDECAR_IN_PLACE}
    return requests


def test_every_action_the_planners_request_encodes_back_to_the_same_bytes() -> None:
    requests = cloneset_requests() + sidecarset_requests()
    assert {r.action for r in requests} == set(registry.ACTIONS)
    for request in requests:
        action = requested_action(request)
        assert type(action) is registry.ACTIONS[request.action]
        assert msgspec.json.encode(action) == msgspec.json.encode(request.details), request.action


def test_the_executor_reads_the_fields_it_acts_on() -> None:
    by_action: dict[str, Any] = {}
    for request in cloneset_requests():
        by_action.setdefault(request.action, requested_action(request))
    delete = by_action[ActionKind.DELETE_POD]
    assert isinstance(delete, cloneset_actions.DeletePod)
    assert delete.with_pvcs and delete.pvcs == ["data-web-d"] and delete.pvc_uids == {"data-web-d": "pvc-1"}
    assert cloneset_actions.uid_of(delete) == "uid-web-a"
    update = by_action[ActionKind.UPDATE_IN_PLACE]
    assert isinstance(update, cloneset_actions.UpdateInPlace)
    assert update.patch == PATCH and update.not_ready == CONDITION
    assert cloneset_actions.observed_version(update) == "3"  # web-b as observed, the round's first on it
    sidecar = requested_action(sidecarset_requests()[0])
    assert isinstance(sidecar, UpdateSidecarInPlace) and sidecar.sidecar_set == "test-sidecarset"


def _recorded_requests() -> list[tuple[str, int, dict[str, Any]]]:
    found = []
    for path in sorted(TRAILS.glob("rules-v*.json.gz")):
        for event in json.loads(gzip.decompress(path.read_bytes()))["events"]:
            if event["type"] == "PodActionRequested":
                found.append((path.name, event["stream_version"], event["payload"]))
    return found


def test_every_recorded_request_round_trips_through_its_type() -> None:
    """The stored payload is JSONB (its text has the keys in Postgres's order), so old trails compare in
    canonical key order: the same keys and values, nothing added or lost."""
    recorded = _recorded_requests()
    assert len(recorded) > 200
    for name, version, payload in recorded:
        request = msgspec.convert(payload, PodActionRequested)
        action = requested_action(request)
        again = msgspec.json.encode(action, order="sorted")
        assert again == msgspec.json.encode(payload["details"], order="sorted"), (name, version)


@pytest.mark.parametrize(
    ("action", "details", "reason"),
    [
        ("explodePod", {}, "unknown action 'explodePod'"),
        (
            "createPod",
            {"pod": "web-0"},
            "invalid details of createPod: Object missing required field `object`",
        ),
        ("deletePVC", {"pvc": 7}, "invalid details of deletePVC: Expected `str`, got `int` - at `$.pvc`"),
        ("createPod", {"action": "deletePod", "object": {}}, "invalid details of createPod: Invalid value"),
        ("updateSidecarInPlace", {"patch": {}}, "missing required field `sidecarSet`"),
    ],
)
def test_a_request_no_kind_reads_is_refused_with_its_reason(
    action: str, details: dict[str, Any], reason: str
) -> None:
    request = PodActionRequested(
        action_id="a", action=action, namespace="default", pod="web-0", details=details
    )
    with pytest.raises(InvalidAction) as refused:
        requested_action(request)
    assert reason in str(refused.value)
