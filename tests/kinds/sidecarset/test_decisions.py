"""The events a SidecarSet round means (services.kinds.sidecarset.rules.decisions.decisions_for): the
rollout's life cycle on the audit trail, nothing repeated."""

from __future__ import annotations

from typing import Any

from services.kinds.sidecarset.rules.decisions import decisions_for, round_of
from services.kinds.sidecarset.rules.state import SidecarSetState
from services.model import rounds
from services.model import sidecarset as ss
from services.model.events import (
    PartitionStepPlanned,
    PodActionRequested,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    SpecRejected,
    StatusPlanned,
)
from services.model.sidecarset_streams import UPDATE_SIDECAR_ACTION
from tests.kinds.sidecarset.test_upgrade import NEW, NOW, OLD, pod, sidecarset


def state_with(spec: dict[str, Any], pods: list[dict[str, Any]]) -> SidecarSetState:
    state = SidecarSetState("test-sidecarset", sidecarset=spec, now=NOW)
    state.pods = {f"default/{p['metadata']['name']}": p for p in pods}
    return state


def replay(state: SidecarSetState, events: list[Any]) -> None:
    """Record decisions as the fold would (the parts decisions_for reads)."""
    for event in events:
        if isinstance(event, RevisionCreated | RevisionsPruned):
            ss.fold_revision(state.revisions, event)
        elif isinstance(event, RolloutStarted):
            state.active_rollout, state.update_revision, state.paused = (
                event.rollout_id,
                event.to_revision,
                False,
            )
        elif isinstance(event, RolloutCompleted):
            if state.active_rollout == event.rollout_id:
                state.active_rollout = None
            state.update_revision, state.paused = event.revision, False
        elif isinstance(event, RolloutPaused):
            state.paused = True
        elif isinstance(event, RolloutResumed):
            state.paused = False
        elif isinstance(event, PartitionStepPlanned):
            state.last_step = rounds.step_key(event)
        elif isinstance(event, StatusPlanned):
            state.last_status = event.status
        elif isinstance(event, SpecRejected):
            state.last_rejection = (event.field, event.reason)


def decide(state: SidecarSetState) -> list[Any]:
    events = decisions_for(state, round_of(state.plan_input()))
    replay(state, events)
    return events


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_rollout_from_first_sight_to_partition_and_supersession() -> None:
    pods = [pod("a"), pod("b", age=1)]
    state = state_with(sidecarset(OLD, paused=True), pods)
    assert kinds(decide(state)) == ["RevisionCreated", "RolloutCompleted", "StatusPlanned"]  # nothing to roll
    assert decide(state) == []  # nothing repeated

    state.sidecarset = sidecarset(NEW, paused=True)
    started = decide(state)
    assert kinds(started) == ["RevisionCreated", "RolloutStarted", "RolloutPaused", "StatusPlanned"]
    assert started[1].from_revision.startswith("test-sidecarset-") and started[1].replicas == 2
    assert started[2].reason == "updateStrategy.paused"

    state.sidecarset = sidecarset(NEW, partition=1)
    resumed = decide(state)
    assert kinds(resumed) == ["RolloutResumed", "PartitionStepPlanned", "PodActionRequested"]
    step, action = resumed[1], resumed[2]
    assert (step.partition, step.replicas, step.expected_updated, step.max_unavailable) == (1, 2, 1, 1)
    assert (
        action.action == UPDATE_SIDECAR_ACTION and action.pod == "a" and action.rollout_id == step.rollout_id
    )
    assert action.details["uid"] == "uid-default-a" and action.details["images"] == {"tools": NEW}

    state.sidecarset = sidecarset("centos:8", partition=1)  # a newer image before this one finished
    superseded = decide(state)
    assert kinds(superseded)[:3] == ["RevisionCreated", "RolloutCompleted", "RolloutStarted"]
    assert superseded[1].outcome == "superseded" and superseded[1].rollout_id == step.rollout_id


def test_not_update_pauses_and_a_finished_rollout_completes() -> None:
    state = state_with(sidecarset(OLD), [pod("a")])
    decide(state)
    state.sidecarset = sidecarset(NEW, type="NotUpdate")
    assert [e.reason for e in decide(state) if isinstance(e, RolloutPaused)] == [
        "updateStrategy.type is NotUpdate"
    ]
    state.sidecarset = sidecarset(NEW)
    assert kinds(decide(state)) == ["RolloutResumed", "PartitionStepPlanned", "PodActionRequested"]
    state.pods = {"default/a": pod("a", injected_from=sidecarset(NEW))}  # upgraded, complete and ready
    finished = decide(state)
    assert kinds(finished) == ["StatusPlanned", "RolloutCompleted"]
    assert finished[1].outcome == "succeeded"
    assert decide(state) == []


def test_an_invalid_sidecarset_is_rejected_once() -> None:
    state = state_with(sidecarset(NEW, partition="half"), [pod("a")])
    rejected = decide(state)
    assert kinds(rejected) == ["SpecRejected"] and rejected[0].field == "spec.updateStrategy.partition"
    assert decide(state) == []
    assert not any(isinstance(e, PodActionRequested) for e in rejected)


def test_the_round_decides_on_its_hashed_input_revisions_and_collision_count_included() -> None:
    """What the round reads is what RoundPlanned.input_sha256 covers: the recorded revisions and the
    collision count change the hash, and the round decides from the input it was given, not the state."""
    from services.planner.kinds import SIDECARSET as planner

    state = state_with(sidecarset(OLD), [pod("a")])
    bare = state.plan_input()
    first = decide(state)  # records the SidecarSet's first revision and its status
    assert kinds(first)[0] == "RevisionCreated"
    recorded = state.plan_input()
    assert recorded.revisions and planner.input_sha256(state, recorded) != planner.input_sha256(state, bare)

    state.last_status = {**(state.last_status or {}), "collisionCount": 3}
    collided = state.plan_input()
    assert collided.collision_count == 3
    assert planner.input_sha256(state, collided) != planner.input_sha256(state, recorded)

    # Given the input without the revisions, the round registers the revision again: it read the input.
    again, _ = planner.decide(state, bare)
    assert any(isinstance(e, RevisionCreated) for e in again)
    assert not any(isinstance(e, RevisionCreated) for e in planner.decide(state, recorded)[0])
