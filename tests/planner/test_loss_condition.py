"""The EventsLost CloneSet condition: the auditor's record of events a database failover lost for good,
folded from the actions stream, named in the status the planner plans (docs/reliability.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.kinds.cloneset.rules.decisions import decisions_for
from services.kinds.cloneset.rules.model import Plan
from services.kinds.cloneset.rules.status import EVENTS_LOST, loss_condition
from services.model.events import StatusPlanned, StoreLossDetected
from tests.kinds.cloneset.test_workload_state import NAME, NS, T0, Log, folded

LOST_SUCCESS = {
    "event_id": "00000000-0000-0000-0000-000000000001",
    "stream": f"CloneSet/{NS}/{NAME}/actions",
    "version": 3,
    "type": "PodActionSucceeded",
    "rollout_id": f"{NS}/{NAME}@r2#1",
    "position_before": 40,
    "reason": "its stream version is held by another event now",
}
APPLIED = {"action_id": "a1", "action": "updateInPlace", "pod": "web-0", "pod_uid": "u0", "rollout_id": None}


def loss(*, unrecoverable: list[dict[str, Any]], applied: list[dict[str, Any]]) -> StoreLossDetected:
    return StoreLossDetected(
        detected_at=T0 + timedelta(seconds=30),
        recovered=[{**LOST_SUCCESS, "event_id": "00000000-0000-0000-0000-000000000002", "position": 51}],
        unrecoverable=unrecoverable,
        actions_applied=applied,
        workloads=[f"CloneSet/{NS}/{NAME}"],
    )


def planned_conditions(events: list[Any]) -> list[dict[str, Any]] | None:
    plan = Plan(
        update_revision=None,
        current_revision=None,
        partition=None,
        actions=[],
        status={"replicas": 1, "conditions": [{"type": "Rejected", "status": "True"}]},
        requeue_after_seconds=None,
        rejected=None,
    )
    statuses = [d for d in decisions_for(folded(events), plan) if isinstance(d, StatusPlanned)]
    return statuses[0].status["conditions"] if statuses else None


def test_a_loss_for_good_is_named_in_the_planned_status() -> None:
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.outcome(loss(unrecoverable=[LOST_SUCCESS], applied=[APPLIED]), T0 + timedelta(seconds=31)),
    ]
    conditions = planned_conditions(events)
    assert conditions is not None
    assert conditions[0] == {"type": "Rejected", "status": "True"}
    assert conditions[1] == {
        "type": EVENTS_LOST,
        "status": "True",
        "reason": "DatabaseFailover",
        "message": "a database failover lost 1 event(s) of this CloneSet for good; carried out, their record"
        " gone: updateInPlace web-0 (a1) (rollbook audit verify names them)",
        "lastTransitionTime": "2026-01-01T00:00:30Z",
    }


def test_a_loss_that_was_all_recovered_sets_no_condition() -> None:
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.outcome(loss(unrecoverable=[], applied=[]), T0 + timedelta(seconds=31)),
    ]
    conditions = planned_conditions(events)
    assert conditions == [{"type": "Rejected", "status": "True"}]


def test_the_condition_names_a_few_actions_and_counts_the_rest() -> None:
    applied = [{**APPLIED, "action_id": f"a{i}", "pod": f"web-{i}"} for i in range(7)]
    condition = loss_condition([loss(unrecoverable=[LOST_SUCCESS] * 7, applied=applied)])
    assert condition is not None
    assert "lost 7 event(s)" in condition["message"]
    assert "updateInPlace web-4 (a4) and 2 more" in condition["message"]
    assert "web-5" not in condition["message"]
    assert loss_condition([]) is None
