"""When the relay finds the bus lost what it published to it, and from where it publishes again."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from services.auditor.bus_loss import (
    GONE,
    RECREATED,
    SHORTENED,
    Divergence,
    Sent,
    StreamMark,
    bus_loss,
    later_mark,
    rewind_position,
    store_divergence,
    store_resume,
)

BORN = datetime(2026, 1, 1, tzinfo=UTC)
REBORN = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seen", "now", "loss"),
    [
        (None, None, None),  # nothing seen yet: nothing to lose
        (None, StreamMark(BORN, 0), None),
        (StreamMark(BORN, 40), StreamMark(BORN, 40), None),
        (StreamMark(BORN, 40), StreamMark(BORN, 55), None),  # it grew (dead letters, other relays)
        (StreamMark(BORN, 40), None, GONE),  # wiped, and nobody made it again yet
        (StreamMark(BORN, 40), StreamMark(REBORN, 0), RECREATED),  # wiped and made anew
        (StreamMark(BORN, 40), StreamMark(REBORN, 90), RECREATED),  # made anew, already past 40
        (StreamMark(BORN, 40), StreamMark(BORN, 31), SHORTENED),  # a flush that never happened
    ],
)
def test_a_loss_is_a_stream_gone_made_anew_or_short_of_what_it_held(
    seen: StreamMark | None, now: StreamMark | None, loss: str | None
) -> None:
    assert bus_loss(seen, now) == loss


@pytest.mark.parametrize(
    ("seen", "acked", "after"),
    [
        (StreamMark(BORN, 40), 41, StreamMark(BORN, 41)),
        (StreamMark(BORN, 40), 12, StreamMark(BORN, 40)),  # a duplicate's ack names the earlier message
        (None, 41, None),  # the stream is looked at first
    ],
)
def test_acks_move_the_mark_forward_only(
    seen: StreamMark | None, acked: int, after: StreamMark | None
) -> None:
    assert later_mark(seen, acked) == after


@pytest.mark.parametrize(
    ("reason", "position", "held_from", "kept_up_to", "rewound"),
    [
        (RECREATED, 500, 120, 0, 119),  # everything the old stream held, from its oldest message
        (GONE, 500, 120, 0, 119),
        (RECREATED, 500, None, 0, 0),  # what it held is unknown: from the first event
        (RECREATED, 500, 1, 0, 0),
        (SHORTENED, 500, 120, 470, 470),  # only what follows the newest message it kept
        (SHORTENED, 460, 120, 470, 460),  # never forward
        (RECREATED, 100, 120, 0, 100),
    ],
)
def test_the_relay_publishes_again_what_the_bus_lost_and_no_further_back(
    reason: str, position: int, held_from: int | None, kept_up_to: int, rewound: int
) -> None:
    assert rewind_position(reason, position, held_from, kept_up_to) == rewound


def sent(n: int) -> Sent:
    return Sent(uuid.UUID(int=n), "CloneSet/default/web", n, "PodActionRequested")


def at(*positions: int) -> dict[int, uuid.UUID]:
    return {p: uuid.UUID(int=p) for p in positions}


@pytest.mark.parametrize(
    ("published", "stored", "found"),
    [
        ({}, {}, None),
        ({1: sent(1), 2: sent(2)}, at(1, 2), None),  # the store holds what was published
        ({1: sent(1), 2: sent(2)}, at(1, 2, 3), None),  # and more since
        # A failover lost 3 and 4; the new primary has committed nothing yet.
        (
            {1: sent(1), 2: sent(2), 3: sent(3), 4: sent(4)},
            at(1, 2),
            Divergence(2, [(3, sent(3)), (4, sent(4))]),
        ),
        # ... or committed other events at those positions, which the relay must publish after 2.
        (
            {1: sent(1), 2: sent(2), 3: sent(3), 4: sent(4)},
            {**at(1, 2), 3: uuid.UUID(int=99)},
            Divergence(2, [(3, sent(3)), (4, sent(4))]),
        ),
        # ... and the relay had already published those before it looked: 5 and 6 are still lost.
        (
            {p: sent(p) for p in range(1, 10)},
            at(1, 2, 3, 4, 7, 8, 9),
            Divergence(4, [(5, sent(5)), (6, sent(6))]),
        ),
        # Nothing the relay checked is left: the loss may go further back than it remembers.
        ({5: sent(5), 6: sent(6)}, {}, Divergence(4, [(5, sent(5)), (6, sent(6))], beyond_memory=True)),
        # ... as when the oldest checked is another event now and a later one is still there.
        (
            {5: sent(5), 6: sent(6)},
            {5: uuid.UUID(int=99), 6: uuid.UUID(int=6)},
            Divergence(4, [(5, sent(5))], beyond_memory=True),
        ),
    ],
)
def test_a_store_gone_back_behind_the_bus_names_the_events_it_lost(
    published: dict[int, Sent],
    stored: dict[int, uuid.UUID],
    found: Divergence | None,
) -> None:
    assert store_divergence(published, stored) == found


@pytest.mark.parametrize(
    ("found", "head", "margin", "resume_after"),
    [
        # The last position both agree on: what the new primary committed after it is published.
        (Divergence(4, [(5, sent(5))]), 9, 100, 4),
        # Beyond its memory: where the new primary's commits start is unknown; they lie before the store's
        # head (its sequence gives positions again), perhaps before the oldest position checked too.
        (Divergence(40, [(41, sent(41))], beyond_memory=True), 20, 5, 15),
        (Divergence(40, [(41, sent(41))], beyond_memory=True), 90, 5, 35),
        (Divergence(40, [(41, sent(41))], beyond_memory=True), 20, 100, 0),
    ],
)
def test_after_a_store_loss_the_relay_goes_on_from_a_position_the_store_agrees_on(
    found: Divergence, head: int, margin: int, resume_after: int
) -> None:
    assert store_resume(found, head, margin) == resume_after
