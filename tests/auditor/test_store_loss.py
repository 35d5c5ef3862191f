"""Which published events a failover lost from the store go back from the bus as themselves, and how the
loss is recorded and named."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from services.auditor.bus_loss import Sent
from services.auditor.store_loss import (
    AFTER_UNRECOVERED,
    BEYOND_MEMORY,
    GAP,
    NO_BODY,
    NOT_RELAYS,
    RECOVERABLE,
    SLOT_TAKEN,
    STORED,
    Lost,
    StoreNow,
    loss_records,
    recovery,
)
from services.model.events import (
    STORE_LOSS_STREAM,
    Envelope,
    PodActionRequested,
    PodActionSucceeded,
    RequeueDue,
    StoreLossDetected,
    new_event,
)
from services.replay.audit import describe_loss

AT = datetime(2026, 12, 6, tzinfo=UTC)
OBSERVED = "CloneSet/default/web/observed"
DECISIONS = "CloneSet/default/web"
ACTIONS = "CloneSet/default/web/actions"
ROLLOUT = "default/web@web-2#1"


def ident(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def lost(
    position: int,
    stream: str,
    version: int,
    *,
    n: int | None = None,
    body: bool = True,
    missing: str = NO_BODY,
) -> Lost:
    event_id = ident(n if n is not None else position)
    envelope = new_event(
        RequeueDue(due_at=AT, scheduled_by=ident(0)),
        stream=stream,
        stream_version=version,
        occurred_at=AT,
        event_id=event_id,
    )
    return Lost(
        position,
        Sent(event_id, stream, version, "RequeueDue", seq=position),
        envelope if body else None,
        missing,
    )


def verdicts(events: list[Lost], now: StoreNow) -> list[tuple[int, str]]:
    return [(event.position, verdict) for event, verdict in recovery(events, now)]


def store(
    versions: dict[str, int], slots: dict[tuple[str, int], int] | None = None, ids: set[int] | None = None
):
    return StoreNow(
        versions=versions,
        slots={key: ident(n) for key, n in (slots or {}).items()},
        stored_ids=frozenset(ident(n) for n in ids or set()),
    )


@pytest.mark.parametrize(
    ("events", "now", "expected"),
    [
        # Nothing appended since: each goes back at its own version, in order.
        (
            [lost(10, DECISIONS, 4), lost(11, DECISIONS, 5), lost(12, ACTIONS, 2)],
            store({DECISIONS: 3, ACTIONS: 1}),
            [(10, RECOVERABLE), (11, RECOVERABLE), (12, RECOVERABLE)],
        ),
        # Given in any order, decided in position order (each stream's version order).
        (
            [lost(11, DECISIONS, 5), lost(10, DECISIONS, 4)],
            store({DECISIONS: 3}),
            [(10, RECOVERABLE), (11, RECOVERABLE)],
        ),
        # The watcher relisted and stored another observation at the lost one's version: lost for good, and
        # every lost event after it, in any stream (a round after it may have folded it).
        (
            [lost(10, OBSERVED, 7), lost(11, OBSERVED, 8), lost(12, ACTIONS, 2)],
            store({OBSERVED: 7, ACTIONS: 1}, slots={(OBSERVED, 7): 99}),
            [(10, SLOT_TAKEN), (11, AFTER_UNRECOVERED), (12, AFTER_UNRECOVERED)],
        ),
        # What came before the first that cannot go back still does.
        (
            [lost(10, ACTIONS, 2), lost(11, OBSERVED, 7), lost(12, DECISIONS, 4)],
            store({OBSERVED: 7, ACTIONS: 1, DECISIONS: 3}, slots={(OBSERVED, 7): 99}),
            [(10, RECOVERABLE), (11, SLOT_TAKEN), (12, AFTER_UNRECOVERED)],
        ),
        # Held by an event beyond the lost ones' slots read (the stream went further): taken.
        ([lost(10, ACTIONS, 2)], store({ACTIONS: 4}), [(10, SLOT_TAKEN)]),
        # Its id is stored already (a service stored it again, ids derive from what they record): not lost.
        (
            [lost(10, DECISIONS, 4), lost(11, DECISIONS, 5)],
            store({DECISIONS: 4}, slots={(DECISIONS, 4): 10}, ids={10}),
            [(10, STORED), (11, RECOVERABLE)],
        ),
        # Stored again, but at another version: not lost, yet what followed it rested on another history.
        (
            [lost(10, OBSERVED, 7), lost(11, DECISIONS, 4)],
            store({OBSERVED: 8, DECISIONS: 3}, slots={(OBSERVED, 7): 98}, ids={10}),
            [(10, STORED), (11, AFTER_UNRECOVERED)],
        ),
        # An earlier version of its stream was lost before the relay published it: it cannot go on a hole.
        ([lost(10, DECISIONS, 6)], store({DECISIONS: 3}), [(10, GAP)]),
        # The bus no longer holds the body (gone with the bus, or sent by reference to the store's copy).
        (
            [lost(10, DECISIONS, 4, body=False), lost(11, DECISIONS, 5), lost(12, ACTIONS, 2)],
            store({DECISIONS: 3, ACTIONS: 1}),
            [(10, NO_BODY), (11, AFTER_UNRECOVERED), (12, AFTER_UNRECOVERED)],
        ),
        # The bus's copy is not the relay's (its publish was a duplicate, or the message differs): not stored.
        (
            [lost(10, DECISIONS, 4, body=False, missing=NOT_RELAYS), lost(11, ACTIONS, 2)],
            store({DECISIONS: 3, ACTIONS: 1}),
            [(10, NOT_RELAYS), (11, AFTER_UNRECOVERED)],
        ),
        # A stream nobody has written since the failover (new with the lost events): from version 1.
        ([lost(10, ACTIONS, 1), lost(11, ACTIONS, 2)], store({}), [(10, RECOVERABLE), (11, RECOVERABLE)]),
        ([], store({}), []),
    ],
)
def test_a_lost_event_goes_back_only_where_the_record_as_it_is_now_allows(
    events: list[Lost], now: StoreNow, expected: list[tuple[int, str]]
) -> None:
    assert verdicts(events, now) == expected


def test_a_loss_beyond_the_relays_memory_puts_nothing_back() -> None:
    """The oldest event the relay checked is lost too: earlier ones may be, unnamed, and every lost event
    it knows may rest on them. None goes back, even where its slot is free; one stored again is not lost."""
    events = [lost(10, DECISIONS, 4), lost(11, ACTIONS, 2), lost(12, OBSERVED, 3)]
    now = store({DECISIONS: 3, ACTIONS: 1, OBSERVED: 3}, slots={(OBSERVED, 3): 12}, ids={12})
    assert verdicts(events, now) == [(10, RECOVERABLE), (11, RECOVERABLE), (12, STORED)]
    assert [(e.position, v) for e, v in recovery(events, now, beyond_memory=True)] == [
        (10, BEYOND_MEMORY),
        (11, BEYOND_MEMORY),
        (12, STORED),
    ]


def _request_and_success(position: int) -> tuple[Envelope, Lost]:
    request = new_event(
        PodActionRequested(
            action_id="act-1", action="updateInPlace", namespace="default", pod="web-0", rollout_id=ROLLOUT
        ),
        stream=DECISIONS,
        stream_version=4,
        occurred_at=AT,
        correlation_id=ROLLOUT,
    )
    success = new_event(
        PodActionSucceeded(action_id="act-1", pod_uid="uid-0"),
        stream=ACTIONS,
        stream_version=2,
        occurred_at=AT,
        causation_id=request.event_id,
        correlation_id=ROLLOUT,
    )
    sent = Sent(success.event_id, ACTIONS, 2, "PodActionSucceeded", seq=position)
    return request, Lost(position, sent, success)


def test_the_record_names_what_came_back_what_did_not_and_the_actions_carried_out() -> None:
    back = lost(10, DECISIONS, 4)
    request, success = _request_and_success(11)
    observed = lost(12, OBSERVED, 7, body=False)
    outcome = [(back, RECOVERABLE), (success, SLOT_TAKEN), (observed, NO_BODY)]
    request_payload = request.payload
    assert isinstance(request_payload, PodActionRequested)
    records = loss_records(outcome, {back.sent.event_id: 31}, {"act-1": request_payload}, AT)
    # One record per workload: a CloneSet's on its actions stream (its planner reports the loss).
    assert [r.stream for r in records] == [ACTIONS]
    record = records[0]
    loss = record.payload
    assert isinstance(loss, StoreLossDetected)
    assert [(r["event_id"], r["position_before"], r["position"]) for r in loss.recovered] == [
        (str(back.sent.event_id), 10, 31)
    ]
    assert [(u["event_id"], u["reason"], u["rollout_id"]) for u in loss.unrecoverable] == [
        (str(success.sent.event_id), SLOT_TAKEN, ROLLOUT),
        (str(observed.sent.event_id), NO_BODY, None),
    ]
    assert loss.actions_applied == [
        {
            "action_id": "act-1",
            "action": "updateInPlace",
            "pod": "web-0",
            "pod_uid": "uid-0",
            "rollout_id": ROLLOUT,
            "event_id": str(success.sent.event_id),
        }
    ]
    assert loss.workloads == [DECISIONS]
    text = "\n".join(describe_loss(loss))
    assert "1 event(s) recovered" in text and "2 unrecoverable" in text
    assert f"LOST PodActionSucceeded {success.sent.event_id} {ACTIONS} v2 rollout {ROLLOUT}" in text
    assert "CARRIED OUT, outcome lost: updateInPlace act-1 on pod web-0" in text
    # Two auditors finding the same loss record it once: the id derives from the lost events.
    again = loss_records(outcome, {back.sent.event_id: 31}, {"act-1": request_payload}, AT)
    assert [r.event_id for r in again] == [record.event_id]


def test_nothing_is_recorded_when_every_lost_event_is_stored_again() -> None:
    assert loss_records([(lost(10, DECISIONS, 4), STORED)], {}, {}, AT) == []


def test_a_loss_outside_a_clonesets_streams_is_recorded_on_the_audit_stream() -> None:
    records = loss_records(
        [(lost(10, "SidecarSet//mesh/actions", 3), SLOT_TAKEN), (lost(11, DECISIONS, 4), GAP)], {}, {}, AT
    )
    assert [(r.stream, r.payload.workloads) for r in records] == [  # type: ignore[union-attr]
        (ACTIONS, [DECISIONS]),
        (STORE_LOSS_STREAM, ["SidecarSet//mesh"]),
    ]
