"""The ranges `audit verify` reads at once start at signed checkpoints, about equal in size, in the log's
order and apart, whatever checkpoints it is given (services/replay/audit.py, ``plan_ranges``)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.model.hashchain import ZERO_HASH
from services.model.signed_note import CheckpointBody
from services.replay.audit import Parallel, plan_ranges

T0 = datetime(2026, 12, 7, tzinfo=UTC)


def body(size: int, position: int) -> CheckpointBody:
    return CheckpointBody("test", size, bytes(32), position, position.to_bytes(32, "big"), T0)


def starts(anchors: list[CheckpointBody], processes: int, min_events: int = 100) -> list[tuple[int, int]]:
    ranges = plan_ranges(anchors, Parallel("postgresql://unused", "reader", processes, min_events))
    for before, after in zip(ranges, ranges[1:], strict=False):
        assert before.end_position == after.start_position
    return [(r.start_position, r.start_size) for r in ranges]


def test_ranges_start_at_the_checkpoints_nearest_equal_parts() -> None:
    anchors = [body(size, size + 5) for size in range(100, 1001, 100)]
    assert starts(anchors, 2) == [(0, 0), (505, 500)]
    assert starts(anchors, 3) == [(0, 0), (305, 300), (705, 700)]
    ranges = plan_ranges(anchors, Parallel("postgresql://unused", "reader", 3, 100))
    assert ranges[0].start_chain == ZERO_HASH and ranges[1].start_chain == (305).to_bytes(32, "big")


def test_a_short_log_or_one_process_is_read_in_one_go() -> None:
    anchors = [body(size, size) for size in range(100, 1001, 100)]
    assert starts(anchors, 1) == []
    assert starts(anchors, 4, min_events=600) == []  # 1,000 events: not two ranges of 600
    assert starts([], 4) == []


def test_a_checkpoint_naming_an_earlier_position_never_makes_ranges_overlap() -> None:
    """A validly signed checkpoint (a stolen key) whose position goes back: skipped as a range start."""
    anchors = [body(300, 300), body(600, 100), body(900, 900)]
    assert starts(anchors, 3) == [(0, 0), (300, 300), (900, 900)]
