"""Verify, replay and what-if as pure functions over a history recorded through the planner's code path
(services/replay/simulation.py): clean when untouched, and each kind of difference named where it is."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from services.infra.store import StoredEvent
from services.kinds.cloneset.rules.decisions import decide
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.model import rounds
from services.model.events import (
    Envelope,
    ObjectObserved,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    RolloutStarted,
    StatusPlanned,
)
from services.replay.simulation import WorkloadSimulation
from services.replay.timeline import fold_timeline, one_line, state_at
from services.replay.verify import first_difference, verify_workload
from services.replay.whatif import WhatIfError, parse_overrides, what_if

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def history() -> list[Envelope]:
    return WorkloadSimulation("team-a", "web", replicas=4, start=T0).run()


def stored(events: list[Envelope]) -> list[StoredEvent]:
    return [StoredEvent(i, e.occurred_at, e) for i, e in enumerate(events, 1)]


def test_a_recorded_history_verifies_clean(history: list[Envelope]) -> None:
    report = verify_workload("team-a", "web", history)
    assert report.clean, report.divergence and report.divergence.describe()
    assert report.rounds >= 10 and report.events == len(history)
    assert any(isinstance(e.payload, RolloutStarted) for e in history)


def test_an_edited_decision_is_named_with_both_sides(history: list[Envelope]) -> None:
    index, target = next(
        (i, e)
        for i, e in enumerate(history)
        if isinstance(e.payload, PodActionRequested) and e.payload.action == "updateInPlace"
    )
    assert isinstance(target.payload, PodActionRequested)
    edited = list(history)
    edited[index] = msgspec.structs.replace(
        target, payload=msgspec.structs.replace(target.payload, pod="someone-else")
    )
    divergence = verify_workload("team-a", "web", edited).divergence
    assert divergence is not None
    assert (divergence.event_id, divergence.field) == (str(target.event_id), "payload.pod")
    assert (divergence.recorded, divergence.replayed) == ("someone-else", target.payload.pod)


def test_events_recorded_under_an_older_schema_verify_in_todays_shape(history: list[Envelope]) -> None:
    # As the store reads a trail written before PodActionRequested's schema 2: the payload upcast to
    # today's shape, the envelope still saying the version it was written in.
    older = [
        msgspec.structs.replace(e, schema_version=1) if isinstance(e.payload, PodActionRequested) else e
        for e in history
    ]
    assert any(e.schema_version == 1 for e in older if isinstance(e.payload, PodActionRequested))
    report = verify_workload("team-a", "web", older)
    assert report.clean, report.divergence and report.divergence.describe()
    assert report.rounds >= 10
    # A replayed event must never be older than what was recorded: that is a real difference.
    newer = [
        msgspec.structs.replace(e, schema_version=99) if isinstance(e.payload, PodActionRequested) else e
        for e in history
    ]
    divergence = verify_workload("team-a", "web", newer).divergence
    assert divergence is not None and divergence.field == "schema_version"


def test_a_trail_with_a_started_event_per_action_verifies_and_shows_when_each_was_taken(
    history: list[Envelope],
) -> None:
    # As executors recorded actions before outcomes carried started_at: a PodActionStarted before each.
    older = WorkloadSimulation("team-a", "web", replicas=4, start=T0, started_events=True).run()
    assert sum(isinstance(e.payload, PodActionStarted) for e in older) == sum(
        isinstance(e.payload, PodActionSucceeded) for e in history
    )
    for events in (older, history):
        report = verify_workload("team-a", "web", events)
        assert report.clean, report.divergence and report.divergence.describe()
        assert report.rounds >= 10
        final, _ = state_at("team-a", "web", stored(events))
        assert len(final.pods) == 4 and not final.pending()
    # The timeline says when each action was taken and by whom, from either record.
    for events, taken_line in ((older, "PodActionStarted"), (history, "PodActionSucceeded")):
        lines = [one_line(step) for step in fold_timeline("team-a", "web", stored(events))]
        taken = [line for line in lines if " by simulation" in line]
        assert taken and all(f" {taken_line} " in line for line in taken)
        assert len(taken) == sum(isinstance(e.payload, PodActionSucceeded) for e in events)


def test_a_missing_observation_is_reported_at_the_round_that_folded_it(history: list[Envelope]) -> None:
    index = next(i for i, e in enumerate(history) if isinstance(e.payload, ObjectObserved) and i > 20)
    later = history[:index] + history[index + 1 :]
    divergence = verify_workload("team-a", "web", later).divergence
    assert divergence is not None and divergence.field.startswith("payload.through[")
    assert divergence.event_type == "RoundPlanned"


def test_a_changed_rule_diverges_at_its_first_different_decision(history: list[Envelope]) -> None:
    def one_more_action(plan_input: PlanInput) -> Plan:
        plan = decide(plan_input)
        if plan.actions:
            plan.actions = [*plan.actions, plan.actions[0]]
        return plan

    first_round_with_actions = next(
        e.causation_id for e in history if isinstance(e.payload, PodActionRequested)
    )
    divergence = verify_workload("team-a", "web", history, one_more_action).divergence
    assert divergence is not None and divergence.round_id == str(first_round_with_actions)


def test_time_travel_by_position(history: list[Envelope]) -> None:
    events = stored(history)
    created = next(
        e
        for e in events
        if isinstance(e.envelope.payload, ObjectObserved) and e.envelope.payload.kind == "Pod"
    )
    state, last = state_at("team-a", "web", events, at_position=created.global_position)
    assert last == created and len(state.pods) == 1
    final, _ = state_at("team-a", "web", events)
    assert len(final.pods) == 4
    images = {c["image"] for p in final.pods.values() for c in p["spec"]["containers"]}
    assert images == {"nginx:mainline"}


def test_what_if_all_at_once_takes_fewer_steps_and_less_time(history: list[Envelope]) -> None:
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    result = what_if("team-a", "web", stored(history), started.rollout_id, {"maxUnavailable": "100%"})
    assert result.recorded.completed and result.replanned.completed
    assert result.replanned.steps < result.recorded.steps
    assert result.replanned.duration_seconds < result.recorded.duration_seconds
    assert result.replanned.max_unavailable == 4 > result.recorded.max_unavailable


@pytest.mark.parametrize(
    "strategy",
    [{"type": "InPlaceIfPossible", "maxUnavailable": 1}, {"type": "ReCreate", "maxUnavailable": 1}],
    ids=["in-place", "recreate"],
)
def test_what_if_without_overrides_reproduces_the_recorded_rollout(strategy: dict[str, Any]) -> None:
    """The model, driven by the recorded timings, is faithful: same steps, actions, pods, unavailability
    and duration as what was recorded (deletes and creates included)."""
    history = WorkloadSimulation("team-b", "api", replicas=3, start=T0, strategy=strategy).run()
    assert verify_workload("team-b", "api", history).clean
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    same = what_if("team-b", "api", stored(history), started.rollout_id, {})
    assert same.replanned.as_dict() == same.recorded.as_dict()
    assert same.recorded.completed and same.recorded.steps >= 3


def test_bad_overrides_and_unknown_rollouts_are_clear_errors(history: list[Envelope]) -> None:
    assert parse_overrides(["updateStrategy.partition=0", "maxUnavailable=100%"]) == {
        "partition": 0,
        "maxUnavailable": "100%",
    }
    with pytest.raises(WhatIfError, match="path=value"):
        parse_overrides(["partition"])
    with pytest.raises(WhatIfError, match="no RolloutStarted"):
        what_if("team-a", "web", stored(history), "team-a/web@nope", {})


def test_first_difference_walks_nested_values() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ("a[1].b", 2, 3)
    assert first_difference({"a": [1]}, {"a": [1, 2]}) == ("a.length", 1, 2)
    assert first_difference({"a": 1}, {"b": 1}) == ("a", 1, "<absent>")
    assert first_difference({"a": 1}, {"a": 1}) is None


def test_a_status_round_is_one_event_and_trails_recorded_as_two_still_verify(
    history: list[Envelope], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round whose only decision is a status is stored as one ``StatusPlanned`` carrying its round
    (``round``, the round's id); a trail recorded before, where such a round is ``RoundPlanned`` then the
    status, verifies as it is (each round is replayed on the recorded state and compared in the recorded
    shape), and an edited status in it is still found."""
    decisions = "CloneSet/team-a/web"
    status_rounds = [
        e for e in history if rounds.round_of(e.payload) is not None and e.type == "StatusPlanned"
    ]
    assert status_rounds and all(e.stream == decisions for e in status_rounds)

    original = rounds.round_envelopes
    monkeypatch.setattr(rounds, "round_envelopes", lambda *a, **k: rounds.split_round(original(*a, **k)))
    recorded_before = WorkloadSimulation("team-a", "web", replicas=4, start=T0).run()
    monkeypatch.undo()
    assert not any(e.type == "StatusPlanned" and rounds.round_of(e.payload) for e in recorded_before)
    assert len([e for e in recorded_before if e.stream == decisions]) == len(
        [e for e in history if e.stream == decisions]
    ) + len(status_rounds)

    for trail in (history, recorded_before):
        report = verify_workload("team-a", "web", trail)
        assert report.clean, report.divergence and report.divergence.describe()
        assert report.rounds == sum(1 for e in trail if rounds.round_of(e.payload) is not None)
    assert verify_workload("team-a", "web", recorded_before).decisions == (
        verify_workload("team-a", "web", history).decisions
    )

    for trail in (history, recorded_before):
        index, target = next(
            (i, e)
            for i, e in enumerate(trail)
            if isinstance(e.payload, StatusPlanned) and e.stream == decisions
        )
        assert isinstance(target.payload, StatusPlanned)
        edited = list(trail)
        status = {**target.payload.status, "readyReplicas": 99}
        edited[index] = msgspec.structs.replace(
            target, payload=msgspec.structs.replace(target.payload, status=status)
        )
        divergence = verify_workload("team-a", "web", edited).divergence
        assert divergence is not None and divergence.event_id == str(target.event_id)
        assert divergence.field == "payload.status.readyReplicas"
