"""After a rollbook upgrade whose planner rules changed, rounds recorded by the older rules are reported as
not re-verifiable instead of diverging, and the rounds recorded by the current rules are still verified
(docs/replay.md, "Upgrading rollbook")."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from services.kinds.cloneset.rules.decisions import RULES_VERSION, decide
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.model.events import Envelope, PodActionRequested, RoundPlanned, encode
from services.model.rounds import round_of, with_round
from services.model.upcasting import DEFAULT_DECODER
from services.replay.simulation import WorkloadSimulation
from services.replay.verify import verify_workload

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def history() -> list[Envelope]:
    return WorkloadSimulation("team-a", "web", replicas=4, start=T0).run()


def with_rules(history: list[Envelope], rules: int, rounds: int | None = None) -> list[Envelope]:
    """The history with its first ``rounds`` rounds (all when None) recorded by planner rules ``rules``."""
    changed: list[Envelope] = []
    seen = 0
    for envelope in history:
        planned = round_of(envelope.payload)  # a RoundPlanned, or a status round's StatusPlanned
        if planned is not None and (rounds is None or seen < rounds):
            seen += 1
            planned = msgspec.structs.replace(planned, rules=rules)
            envelope = msgspec.structs.replace(envelope, payload=with_round(envelope.payload, planned))
        changed.append(envelope)
    return changed


def round_count(history: list[Envelope]) -> int:
    return sum(1 for e in history if round_of(e.payload) is not None)


def one_more_action(plan_input: PlanInput) -> Plan:
    """A planner whose rules changed: every round with actions asks for one more."""
    plan = decide(plan_input)
    if plan.actions:
        plan.actions = [*plan.actions, plan.actions[0]]
    return plan


def test_the_planner_records_its_rules_and_rounds_stored_without_them_read_as_v1(
    history: list[Envelope],
) -> None:
    recorded = [e for e in history if isinstance(e.payload, RoundPlanned)]
    assert recorded and {e.payload.rules for e in recorded} == {RULES_VERSION}  # type: ignore[union-attr]
    assert RULES_VERSION > 1
    # A round as stored by a rollbook before rules were versioned: the same JSON without the field.
    payload = msgspec.json.decode(encode(recorded[0]))["payload"]
    del payload["rules"]
    old = DEFAULT_DECODER.decode("RoundPlanned", recorded[0].schema_version, msgspec.json.encode(payload))
    assert old == msgspec.structs.replace(recorded[0].payload, rules=1)


def test_rounds_of_older_rules_are_not_compared_but_counted(history: list[Envelope]) -> None:
    old = with_rules(history, 1)
    # Today's rules decide differently from the recording ones: not a divergence, not re-verifiable.
    report = verify_workload("team-a", "web", old, one_more_action)
    assert report.clean, report.divergence and report.divergence.describe()
    assert (report.rounds, report.decisions) == (0, 0)
    assert report.skipped == {1: round_count(history)} and report.unverifiable == round_count(history)
    assert report.describe_skipped() == [
        f"{round_count(history)} rounds recorded by planner rules v1, this rollbook has v{RULES_VERSION}:"
        " not re-verifiable"
    ]
    # The same record with the current rules: the changed rule diverges.
    assert verify_workload("team-a", "web", history, one_more_action).divergence is not None


def test_rounds_of_current_rules_after_older_ones_are_still_verified(history: list[Envelope]) -> None:
    total = round_count(history)
    older = total // 2
    mixed = with_rules(history, 1, older)
    report = verify_workload("team-a", "web", mixed)
    assert report.clean, report.divergence and report.divergence.describe()
    assert report.skipped == {1: older} and report.rounds == total - older

    # The first current-rules round with pod actions still catches a changed rule ...
    later_rounds = [e.event_id for e in mixed if round_of(e.payload) is not None][older:]
    first_with_actions = next(
        e.causation_id
        for e in mixed
        if isinstance(e.payload, PodActionRequested) and e.causation_id in later_rounds
    )
    divergence = verify_workload("team-a", "web", mixed, one_more_action).divergence
    assert divergence is not None and divergence.round_id == str(first_with_actions)

    # ... and an edited decision of a current-rules round.
    index, target = next(
        (i, e)
        for i, e in enumerate(mixed)
        if isinstance(e.payload, PodActionRequested) and e.causation_id in later_rounds
    )
    assert isinstance(target.payload, PodActionRequested)
    edited = list(mixed)
    edited[index] = msgspec.structs.replace(
        target, payload=msgspec.structs.replace(target.payload, pod="someone-else")
    )
    divergence = verify_workload("team-a", "web", edited).divergence
    assert divergence is not None and (divergence.event_id, divergence.field) == (
        str(target.event_id),
        "payload.pod",
    )


def test_rounds_of_newer_rules_are_not_re_verifiable_either(history: list[Envelope]) -> None:
    report = verify_workload("team-a", "web", with_rules(history, RULES_VERSION + 1))
    assert report.clean and report.rounds == 0
    assert report.skipped == {RULES_VERSION + 1: round_count(history)}
    assert (
        f"planner rules v{RULES_VERSION + 1}, this rollbook has v{RULES_VERSION}"
        in (report.describe_skipped()[0])
    )


def test_a_gap_in_the_log_is_still_found_at_a_round_of_older_rules(history: list[Envelope]) -> None:
    old = with_rules(history, 1)
    first_round = next(i for i, e in enumerate(old) if isinstance(e.payload, RoundPlanned))
    gap = next(i for i, e in enumerate(old[:first_round]) if e.stream.endswith("/observed"))
    divergence = verify_workload("team-a", "web", old[:gap] + old[gap + 1 :]).divergence
    assert divergence is not None and divergence.field.startswith("payload.through[")
