"""When the relay finds the bus lost what it published to it, and from where it publishes again."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.auditor.bus_loss import (
    GONE,
    RECREATED,
    SHORTENED,
    StreamMark,
    bus_loss,
    later_mark,
    rewind_position,
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
