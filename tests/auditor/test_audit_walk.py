"""Where the audit of the bus starts on a stream, and which sequences of the next walk it must read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.auditor.audit_walk import AuditCursor, cursor_for_stream, walk

pytestmark = pytest.mark.pure

OLD = datetime(2026, 12, 1, tzinfo=UTC)
NEW = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("saved", "first_seq", "last_seq", "expected"),
    [
        # Nothing saved: from the stream's first message.
        (None, 1, 50, AuditCursor(NEW, 0)),
        (None, 1, 0, AuditCursor(NEW, 0)),  # an empty stream
        (None, 20, 50, AuditCursor(NEW, 19)),  # older messages aged out
        # Saved for this stream, within it: go on from there.
        (AuditCursor(NEW, 30), 1, 50, AuditCursor(NEW, 30)),
        (AuditCursor(NEW, 50), 1, 50, AuditCursor(NEW, 50)),
        # Saved for a stream made anew since: its sequences are given again, start over.
        (AuditCursor(OLD, 30), 1, 50, AuditCursor(NEW, 0)),
        (AuditCursor(OLD, 80), 1, 3, AuditCursor(NEW, 0)),
        # The stream lost its newest messages: back to its last one, the lost sequences come again.
        (AuditCursor(NEW, 80), 1, 50, AuditCursor(NEW, 50)),
        # Messages before the cursor's next one are gone: from the first that is there.
        (AuditCursor(NEW, 5), 20, 50, AuditCursor(NEW, 19)),
    ],
)
def test_where_the_audit_starts_on_a_stream(
    saved: AuditCursor | None, first_seq: int, last_seq: int, expected: AuditCursor
) -> None:
    assert cursor_for_stream(saved, NEW, first_seq, last_seq) == expected


@pytest.mark.parametrize(
    ("audited_through", "target", "relayed", "limit", "expected"),
    [
        (0, 0, set(), 10, (0, [])),  # nothing new
        (0, 5, {1, 2, 3, 4, 5}, 10, (5, [])),  # all the relay's: no read
        (0, 5, {1, 2, 4}, 10, (5, [3, 5])),  # another's messages among them
        (0, 5, set(), 10, (5, [1, 2, 3, 4, 5])),  # a restart: the relay's notes are gone
        (10, 30, {11, 12}, 5, (15, [13, 14, 15])),  # at most `limit` sequences per walk
        (10, 8, {9}, 5, (8, [])),  # a target behind the cursor: nothing to walk
    ],
)
def test_what_a_walk_reads(
    audited_through: int, target: int, relayed: set[int], limit: int, expected: tuple[int, list[int]]
) -> None:
    assert walk(audited_through, target, relayed, limit) == expected
