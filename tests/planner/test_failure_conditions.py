"""FailedScale / FailedUpdate CloneSet conditions from the executors' outcomes (docs/plan.md, "Status")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.kinds.cloneset.rules.decisions import decisions_for
from services.kinds.cloneset.rules.model import Plan
from services.kinds.cloneset.rules.status import (
    FAILED_SCALE,
    FAILED_UPDATE,
    ActionOutcome,
    failure_conditions,
    with_failure_conditions,
)
from services.kinds.registry import CLONESET
from services.model.events import PodActionFailed, PodActionSucceeded, RoundPlanned, StatusPlanned
from tests.kinds.cloneset.test_workload_state import NAME, NS, T0, Log, folded

ERROR = 'HTTP 422 Unprocessable Entity: pods "web-0" is invalid'


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def failed(action: str, target: str, seconds: int, reason: str = ERROR) -> ActionOutcome:
    return ActionOutcome(action, target, True, at(seconds), reason)


def succeeded(action: str, target: str, seconds: int) -> ActionOutcome:
    return ActionOutcome(action, target, False, at(seconds))


def true(kind: str, reason: str, message: str, since: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": since}


def false(kind: str, reason: str, message: str, since: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


SCALE_FAILING = true(FAILED_SCALE, "CreatePodFailed", f"createPod web-0: {ERROR}", "2026-01-01T00:00:05Z")
UPDATE_FAILING = true(
    FAILED_UPDATE, "UpdateInPlaceFailed", f"updateInPlace web-1: {ERROR}", "2026-01-01T00:00:07Z"
)

CASES: list[tuple[str, list[dict[str, Any]], list[ActionOutcome], list[dict[str, Any]]]] = [
    ("nothing happened", [], [], []),
    ("successes only, never failed: no condition", [], [succeeded("createPod", "web-0", 1)], []),
    (
        "a create failed: FailedScale at the failure's time",
        [],
        [succeeded("createPod", "web-1", 3), failed("createPod", "web-0", 5)],
        [SCALE_FAILING],
    ),
    (
        "a PVC create is a scale step, named by the PVC",
        [],
        [failed("createPVC", "data-web-0", 5)],
        [true(FAILED_SCALE, "CreatePVCFailed", f"createPVC data-web-0: {ERROR}", "2026-01-01T00:00:05Z")],
    ),
    (
        "a delete failed: FailedScale",
        [],
        [failed("deletePod", "web-0", 5, "HTTP 403 Forbidden: no")],
        [
            true(
                FAILED_SCALE,
                "DeletePodFailed",
                "deletePod web-0: HTTP 403 Forbidden: no",
                "2026-01-01T00:00:05Z",
            )
        ],
    ),
    (
        "an in-place update failed: FailedUpdate",
        [],
        [failed("updateInPlace", "web-1", 7)],
        [UPDATE_FAILING],
    ),
    (
        "a readiness mark failed: FailedUpdate",
        [],
        [failed("markNotReady", "web-1", 7)],
        [true(FAILED_UPDATE, "MarkNotReadyFailed", f"markNotReady web-1: {ERROR}", "2026-01-01T00:00:07Z")],
    ),
    (
        "a recreate's specified-delete patch failed: FailedUpdate",
        [],
        [failed("recreatePod", "web-1", 7)],
        [true(FAILED_UPDATE, "RecreatePodFailed", f"recreatePod web-1: {ERROR}", "2026-01-01T00:00:07Z")],
    ),
    (
        "a podsToDelete write-back failed: neither (OpenKruise only logs it)",
        [],
        [failed("setPodsToDelete", "web", 5)],
        [],
    ),
    (
        "both classes failed: FailedScale then FailedUpdate",
        [],
        [failed("updateInPlace", "web-1", 7), failed("createPod", "web-0", 5)],
        [SCALE_FAILING, UPDATE_FAILING],
    ),
    (
        "still failing: the transition time stays, the message is the latest error",
        [SCALE_FAILING],
        [failed("createPod", "web-2", 30, "HTTP 409 Conflict: taken")],
        [
            true(
                FAILED_SCALE,
                "CreatePodFailed",
                "createPod web-2: HTTP 409 Conflict: taken",
                "2026-01-01T00:00:05Z",
            )
        ],
    ),
    (
        "a failure and a success in the same round: still failing",
        [SCALE_FAILING],
        [succeeded("createPod", "web-0", 20), failed("createPod", "web-2", 21)],
        [true(FAILED_SCALE, "CreatePodFailed", f"createPod web-2: {ERROR}", "2026-01-01T00:00:05Z")],
    ),
    (
        "the retry succeeded: False at the success's time",
        [SCALE_FAILING, UPDATE_FAILING],
        [succeeded("createPod", "web-0", 20), succeeded("createPod", "web-2", 21)],
        [
            false(FAILED_SCALE, "CreatePodSucceeded", "createPod web-0 succeeded", "2026-01-01T00:00:20Z"),
            UPDATE_FAILING,
        ],
    ),
    (
        "a scale success does not clear FailedUpdate, nor an update success FailedScale",
        [SCALE_FAILING, UPDATE_FAILING],
        [succeeded("deletePod", "web-3", 20)],
        [
            false(FAILED_SCALE, "DeletePodSucceeded", "deletePod web-3 succeeded", "2026-01-01T00:00:20Z"),
            UPDATE_FAILING,
        ],
    ),
    (
        "no new outcome of a class keeps its condition",
        [UPDATE_FAILING, {"type": "Rejected", "status": "True"}],
        [succeeded("createPod", "web-0", 20)],
        [UPDATE_FAILING],
    ),
    (
        "False stays False on more successes, True again on the next failure",
        [false(FAILED_SCALE, "CreatePodSucceeded", "createPod web-0 succeeded", "2026-01-01T00:00:20Z")],
        [succeeded("createPod", "web-4", 40), failed("deletePod", "web-4", 50)],
        [true(FAILED_SCALE, "DeletePodFailed", f"deletePod web-4: {ERROR}", "2026-01-01T00:00:50Z")],
    ),
]


@pytest.mark.parametrize(
    ("previous", "outcomes", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_failure_conditions(
    previous: list[dict[str, Any]], outcomes: list[ActionOutcome], expected: list[dict[str, Any]]
) -> None:
    assert failure_conditions(previous, outcomes) == expected


def test_condition_time_is_utc_whole_seconds() -> None:
    outcome = ActionOutcome("createPod", "web-0", True, datetime(2026, 1, 1, 2, 0, 5, 999, tzinfo=UTC), "x")
    assert failure_conditions([], [outcome])[0]["lastTransitionTime"] == "2026-01-01T02:00:05Z"


def test_status_keeps_other_conditions_and_replaces_its_own() -> None:
    rejected = {"type": "Rejected", "status": "True"}
    stale = {"type": FAILED_SCALE, "status": "True", "message": "old"}
    status = {"replicas": 2, "conditions": [stale, rejected]}
    assert with_failure_conditions(status, [UPDATE_FAILING]) == {
        "replicas": 2,
        "conditions": [rejected, UPDATE_FAILING],
    }
    assert with_failure_conditions(status, []) == {"replicas": 2, "conditions": [rejected]}
    untouched = {"replicas": 2}
    assert with_failure_conditions(untouched, []) is untouched


# --- through the planner service's fold and decisions ------------------------------------------------


def _round(log: Log, through: dict[str, int], seconds: int) -> Any:
    return log.add(
        CLONESET.decisions_stream(NS, NAME),
        RoundPlanned(through=through, now=at(seconds), input_sha256="0" * 64),
        at(seconds),
    )


def _planned_conditions(state: Any) -> list[dict[str, Any]] | None:
    plan = Plan(
        update_revision=None,
        current_revision=None,
        partition=None,
        actions=[],
        status={"replicas": 1, "conditions": [{"type": "Rejected", "status": "True"}]},
        requeue_after_seconds=None,
        rejected=None,
    )
    statuses = [d for d in decisions_for(state, plan) if isinstance(d, StatusPlanned)]
    return statuses[0].status["conditions"] if statuses else None


def test_the_status_decision_reports_a_failure_then_its_retry_succeeding() -> None:
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.request("a1", "createPod", "web-0"),
        log.request("a2", "updateInPlace", "web-1"),
        log.outcome(PodActionFailed(action_id="a1", reason=ERROR), at(5)),
        log.outcome(PodActionSucceeded(action_id="a2"), at(6)),
    ]
    state = folded(events)
    assert [o.action for o in state.outcomes_since_last_round()] == ["createPod", "updateInPlace"]
    conditions = _planned_conditions(state)
    assert conditions == [{"type": "Rejected", "status": "True"}, SCALE_FAILING]

    # The round that saw the failure is recorded (with its status) and retries the create.
    through = state.through()
    events += [_round(log, through, 5)]
    events += [
        log.add(
            CLONESET.decisions_stream(NS, NAME),
            StatusPlanned(
                kind="CloneSet", namespace=NS, name=NAME, status={"replicas": 1, "conditions": conditions}
            ),
            at(5),
        ),
        log.request("a3", "createPod", "web-0", at(5)),
    ]
    state = folded(events)
    assert state.outcomes_since_last_round() == []
    assert _planned_conditions(state) is None  # nothing new: the same status is not planned again

    events.append(log.outcome(PodActionSucceeded(action_id="a3"), at(9)))
    events.append(log.observe("Pod", "web-0", "u1", action="a3", at=at(9)))
    state = folded(events)
    assert _planned_conditions(state) == [
        {"type": "Rejected", "status": "True"},
        false(FAILED_SCALE, "CreatePodSucceeded", "createPod web-0 succeeded", "2026-01-01T00:00:09Z"),
    ]
    # Order independence: the outcome stream folded before the decisions gives the same conditions.
    by_stream = sorted(
        events,
        key=lambda e: [
            CLONESET.observed_stream(NS, NAME),
            CLONESET.actions_stream(NS, NAME),
            CLONESET.decisions_stream(NS, NAME),
        ].index(e.stream),
    )
    assert _planned_conditions(folded(by_stream)) == _planned_conditions(state)
