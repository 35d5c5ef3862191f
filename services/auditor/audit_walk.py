"""Where the audit of the bus stands and which stream sequences it must read next: pure decisions.

The audit walks the event stream's sequences in order. ``AuditCursor`` is how far it got: every message of
the stream created at ``stream_created`` up to ``audited_through`` is audited. A sequence whose message the
relay beside the audit published (JetStream acknowledged that publish as new at that sequence) is settled
unread; any other sequence is read and audited.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime

import msgspec


class AuditCursor(msgspec.Struct, frozen=True):
    stream_created: datetime
    audited_through: int


def cursor_for_stream(
    saved: AuditCursor | None, created: datetime, first_seq: int, last_seq: int
) -> AuditCursor:
    """The cursor to walk the stream created at ``created`` from, given what was ``saved`` and the
    sequences the stream holds now (``first_seq`` is ``last_seq + 1`` when it holds none).

    - Nothing saved, or saved for another stream (one made anew gives its sequences again): from the
      stream's first message.
    - Saved beyond the stream's last sequence (the stream lost its newest messages): back to its last one,
      since the lost sequences will be given to new messages.
    - Saved before the stream's first message (older messages aged out or were purged): from its first
      message; what is gone cannot be read.
    """
    before_first = max(first_seq - 1, 0)
    if saved is None or saved.stream_created != created:
        return AuditCursor(created, before_first)
    if saved.audited_through > last_seq:
        return AuditCursor(created, last_seq)
    if saved.audited_through < before_first:
        return AuditCursor(created, before_first)
    return saved


def walk(audited_through: int, target: int, relayed: Container[int], limit: int) -> tuple[int, list[int]]:
    """The next walk: (the last sequence it covers, the sequences in it that must be read, in order).
    It covers at most ``limit`` sequences after ``audited_through``, up to ``target``; a sequence in
    ``relayed`` needs no read."""
    last = min(target, audited_through + limit)
    return last, [s for s in range(audited_through + 1, last + 1) if s not in relayed]
