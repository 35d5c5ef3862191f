"""An action on the workload itself (setPodsToDelete, the pruned scaleStrategy.podsToDelete written back to
the CloneSet) names the CloneSet as its ``workload``, not as a pod; requests recorded before (schema v1,
the CloneSet's name in ``pod``) read as the same request."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from services.kinds import registry
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.actions import ActionKind
from services.model.events import SCHEMA_VERSIONS, ObjectObserved, PodActionRequested, new_event
from services.model.upcasting import DEFAULT_DECODER
from services.planner.kinds import CLONESET, Round, next_step
from tests.planner.builders import cloneset

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def write_back_request() -> PodActionRequested:
    """The request of a round on a CloneSet whose podsToDelete names a pod it does not have."""
    obj = cloneset("web", replicas=0, scale={"podsToDelete": ["web-gone"]})
    obj["metadata"]["uid"] = "cs-uid"
    state = WorkloadState("default", "web")
    state.fold(
        new_event(
            ObjectObserved(
                kind="CloneSet",
                namespace="default",
                name="web",
                uid="cs-uid",
                resource_version="1",
                change="ADDED",
                object=obj,
            ),
            stream=registry.CLONESET.observed_stream("default", "web"),
            stream_version=1,
            occurred_at=T0,
        )
    )
    step = next_step(CLONESET, state)
    assert isinstance(step, Round)
    requests = [d for d in step.decisions if isinstance(d, PodActionRequested)]
    assert [r.action for r in requests] == [ActionKind.SET_PODS_TO_DELETE]
    return requests[0]


def test_the_pods_to_delete_write_back_names_the_cloneset_as_its_workload() -> None:
    request = write_back_request()
    assert (request.workload, request.pod, request.target) == ("web", "", "web")
    assert request.details == {"podsToDelete": []}
    assert SCHEMA_VERSIONS["PodActionRequested"] == 2


def test_a_request_recorded_with_the_cloneset_in_pod_reads_as_todays() -> None:
    request = write_back_request()
    v1: dict[str, Any] = msgspec.to_builtins(request)
    v1["pod"] = v1.pop("workload")  # how schema v1 recorded it
    read = DEFAULT_DECODER.decode("PodActionRequested", 1, msgspec.json.encode(v1))
    assert read == request


def test_a_pod_action_is_recorded_as_before_and_reads_unchanged() -> None:
    request = PodActionRequested(
        action_id="a1", action=ActionKind.DELETE_POD, namespace="default", pod="web-0", details={"uid": "u"}
    )
    encoded = msgspec.json.encode(request)
    assert b"workload" not in encoded  # a pod action's record has the v1 shape
    assert request.target == "web-0"
    assert DEFAULT_DECODER.decode("PodActionRequested", 1, encoded) == request
    assert DEFAULT_DECODER.decode("PodActionRequested", 2, encoded) == request
