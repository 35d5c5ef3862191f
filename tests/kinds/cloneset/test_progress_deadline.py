"""progressDeadlineSeconds: the Progressing condition with OpenKruise's reasons
(pkg/controller/cloneset/cloneset_status.go ``calculateProgressingStatus``), time as input."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from services.kinds.cloneset.rules.decisions import _deadline_exceeded
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.podstate import parse_time
from services.kinds.cloneset.rules.progress_deadline import progressing
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.events import RolloutProgressDeadlineExceeded
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod, with_image

T0 = parse_time("2026-11-30T12:00:00Z") or 0.0


def _progressing(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Progressing")


def _status(**counts: Any) -> dict[str, Any]:
    base = {
        "replicas": 4,
        "updatedReplicas": 4,
        "updatedAvailableReplicas": 4,
        "expectedUpdatedReplicas": 4,
        "currentRevision": "r2",
        "updateRevision": "r2",
    }
    return {**base, **counts}


def _run(status: dict[str, Any], previous: list[dict[str, Any]], now: float, paused: bool = False) -> Any:
    return progressing(
        previous,
        status,
        deadline_seconds=600,
        replicas=4,
        paused=paused,
        now=now,
        now_text=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        parse_time=parse_time,
    )


MOVING = {"currentRevision": "r1", "updatedReplicas": 2, "updatedAvailableReplicas": 1}
PARTITIONED = {
    "currentRevision": "r1",
    "updatedReplicas": 3,
    "updatedAvailableReplicas": 3,
    "expectedUpdatedReplicas": 3,
}


@pytest.mark.parametrize(
    ("status", "paused", "reason", "value"),
    [
        (_status(), False, "CloneSetAvailable", "True"),
        (_status(**MOVING), True, "CloneSetPaused", "True"),
        (_status(**PARTITIONED), False, "ProgressPartitionAvailable", "True"),
        (_status(**MOVING), False, "CloneSetUpdated", "True"),
    ],
)
def test_rows_in_order(status: dict[str, Any], paused: bool, reason: str, value: str) -> None:
    result = _run(status, [], T0, paused)
    condition = result.conditions[-1]
    assert (condition["type"], condition["reason"], condition["status"]) == ("Progressing", reason, value)
    assert (result.requeue_after is not None) == (reason == "CloneSetUpdated")


def test_deadline_runs_from_leaving_available_and_is_sticky() -> None:
    moving = _status(currentRevision="r1", updatedReplicas=1, updatedAvailableReplicas=0)
    started = _run(moving, [], T0)
    assert started.requeue_after == 601  # strictly past the deadline
    condition = started.conditions[-1]
    assert condition["lastUpdateTime"] == condition["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    # Progress (more pods updated) does not reset the clock.
    more = _status(currentRevision="r1", updatedReplicas=3, updatedAvailableReplicas=2)
    later = _run(more, started.conditions, T0 + 300)
    assert later.conditions == started.conditions and later.requeue_after == 301
    at_deadline = _run(more, started.conditions, T0 + 600)
    assert at_deadline.conditions[-1]["reason"] == "CloneSetUpdated"  # not strictly before yet
    passed = _run(more, started.conditions, T0 + 601)
    exceeded = passed.conditions[-1]
    assert (exceeded["status"], exceeded["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert exceeded["message"] == "CloneSet revision r2 has timed out progressing"
    assert passed.requeue_after is None
    # Sticky until available (or paused, or partition available), even with a new revision.
    new_revision = _status(currentRevision="r1", updateRevision="r3", updatedReplicas=0)
    still = _run({**new_revision, "updatedAvailableReplicas": 0}, passed.conditions, T0 + 700)
    assert still.conditions[-1]["reason"] == "ProgressDeadlineExceeded"
    done = _run(_status(), passed.conditions, T0 + 900)
    assert (done.conditions[-1]["status"], done.conditions[-1]["reason"]) == ("True", "CloneSetAvailable")


def test_off_removes_the_condition() -> None:
    previous = [{"type": "Progressing", "status": "True", "reason": "CloneSetUpdated"}, {"type": "Other"}]
    for off in (None, 2**31 - 1):
        result = progressing(
            previous, _status(), deadline_seconds=off, replicas=4, paused=False, now=T0, now_text="",
            parse_time=parse_time,
        )  # fmt: skip
        assert result.conditions == [{"type": "Other"}] and result.requeue_after is None


def test_planner_reports_the_deadline_and_keeps_rolling() -> None:
    v1 = cloneset(replicas=2, progressDeadlineSeconds=60, strategy={"maxUnavailable": 1})
    pods = [running_pod(v1, i) for i in IDS[:2]]
    v2 = with_image(v1, "nginx:2")
    v2["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    revs = [revision_record(v1, 1)]
    first = plan(plan_input(v2, pods, revs, now="2026-11-30T12:00:00Z"))
    assert first.status is not None and _progressing(first.status)["reason"] == "CloneSetUpdated"
    assert first.requeue_after_seconds == 61
    stalled = copy.deepcopy(v2)
    stalled["status"] = first.status
    late = plan(plan_input(stalled, pods, revs + first.revisions, now="2026-11-30T12:01:01Z"))
    assert late.status is not None and _progressing(late.status)["reason"] == "ProgressDeadlineExceeded"
    assert late.actions  # informational: the rollout goes on


def test_validation_of_progress_deadline_seconds() -> None:
    bad = plan(plan_input(cloneset(progressDeadlineSeconds=5, minReadySeconds=5), []))
    assert bad.rejected is not None and bad.rejected.field == "spec.progressDeadlineSeconds"
    assert (
        plan(plan_input(cloneset(progressDeadlineSeconds=2**31 - 1, minReadySeconds=5), [])).rejected is None
    )


def test_the_round_that_sees_the_deadline_pass_records_a_rollout_event() -> None:
    state = WorkloadState("default", "sample")
    state.cloneset = cloneset(progressDeadlineSeconds=600)
    state.active_rollout = "default/sample@sample-r2"
    before = {"type": "Progressing", "status": "True", "reason": "CloneSetUpdated", "lastUpdateTime": "T"}
    state.last_status = {"conditions": [before]}
    after = {**before, "status": "False", "reason": "ProgressDeadlineExceeded", "lastUpdateTime": "T2"}
    event = _deadline_exceeded(state, {"conditions": [after]}, "sample-r2")
    assert event == RolloutProgressDeadlineExceeded(
        rollout_id="default/sample@sample-r2",
        revision="sample-r2",
        progress_deadline_seconds=600,
        progressing_since="T",
    )
    state.last_status = {"conditions": [after]}
    assert _deadline_exceeded(state, {"conditions": [after]}, "sample-r2") is None  # once
