"""A CloneSet rollout that stops on purpose is recorded as paused, and as resumed when it moves again:
``updateStrategy.paused``, or a canary step done (the pods the partition allows are updated and ready)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.kinds.cloneset.rules.decisions import decisions_for
from services.kinds.cloneset.rules.model import Action, MarkReady, Plan
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model.events import Event, RolloutPaused, RolloutResumed, RolloutStarted

ROLLOUT = "default/web@web-new"


def state(*, paused_spec: bool = False, recorded_paused: bool = False, active: bool = True) -> WorkloadState:
    cloneset = {
        "metadata": {"name": "web", "namespace": "default", "generation": 2},
        "spec": {"replicas": 5, "updateStrategy": {"paused": paused_spec, "partition": 2}},
    }
    workload = WorkloadState("default", "web", cloneset=cloneset, now=datetime(2026, 1, 1, tzinfo=UTC))
    workload.update_revision = "web-new"
    workload.active_rollout = ROLLOUT if active else None
    workload.paused = recorded_paused
    return workload


def status(updated: int, ready: int, expected: int = 3) -> dict[str, Any]:
    return {
        "replicas": 5,
        "updatedReplicas": updated,
        "updatedReadyReplicas": ready,
        "expectedUpdatedReplicas": expected,
        "currentRevision": "web-old",
        "updateRevision": "web-new",
    }


def plan(status: dict[str, Any], actions: list[Action] | None = None) -> Plan:
    return Plan(
        update_revision="web-new",
        current_revision="web-old",
        partition=2,
        status=status,
        actions=actions or [],
        requeue_after_seconds=None,
        rejected=None,
    )


def transitions(decisions: list[Event]) -> list[str]:
    return [
        f"paused: {d.reason}" if isinstance(d, RolloutPaused) else "resumed"
        for d in decisions
        if isinstance(d, RolloutPaused | RolloutResumed)
    ]


PARTITION_REACHED = "paused: partition 2 reached: the pods it allows are updated and ready"


@pytest.mark.parametrize(
    ("workload", "planned", "expected"),
    [
        # a canary step in progress: nothing to record
        (state(), plan(status(2, 1)), []),
        # the step is done: 3 of 5 updated and ready, the rest wait for the partition to be lowered
        (state(), plan(status(3, 3)), [PARTITION_REACHED]),
        # ... recorded once
        (state(recorded_paused=True), plan(status(3, 3)), []),
        # updated but not yet ready: still moving
        (state(), plan(status(3, 2)), []),
        # done but this round still acts (e.g. marks a pod ready): not halted yet
        (state(), plan(status(3, 3), [MarkReady(pod="web-a", condition={})]), []),
        # the partition was lowered: 5 expected now, the rollout moves again
        (state(recorded_paused=True), plan(status(3, 3, expected=5)), ["resumed"]),
        # updateStrategy.paused
        (state(paused_spec=True), plan(status(1, 1)), ["paused: updateStrategy.paused"]),
        (state(paused_spec=True, recorded_paused=True), plan(status(1, 1)), []),
        # no active rollout: nothing to pause
        (state(active=False, paused_spec=True), plan(status(5, 5, expected=5)), []),
    ],
)
def test_pause_and_resume_are_recorded_once(
    workload: WorkloadState, planned: dict[str, Any], expected: list[str]
) -> None:
    assert transitions(decisions_for(workload, planned)) == expected


def test_a_rollout_paused_from_its_start_is_paused_after_it_started() -> None:
    workload = state(paused_spec=True, active=False)
    workload.update_revision = "web-old"
    decisions = decisions_for(workload, plan(status(0, 0)))
    kinds = [type(d).__name__ for d in decisions if isinstance(d, RolloutStarted | RolloutPaused)]
    assert kinds == ["RolloutStarted", "RolloutPaused"]
