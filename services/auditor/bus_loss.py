"""When the bus lost what the relay published to it, and from which store position to publish again.

The store is the record; the bus holds copies. A NATS cluster that lost its storage (every node's disk
wiped, or a power loss before JetStream flushed) comes back with a new, empty stream, or with the stream
it had short of its newest messages. Nothing on the bus says so: consumers wait, the relay's position is
past events the bus no longer has, and a rollout stops for good. The relay compares what it saw of the
stream with what the stream is now (``bus_loss``) and, on a loss, rewinds (``rewind_position``) to
publish those events again as themselves: same bytes, same ``Nats-Msg-Id`` (the event id), so whatever
the bus kept drops them as duplicates.

The store can go back too: a standby promoted after an asynchronous primary was lost may lack the last
commits, which the relay had already published. ``store_divergence`` finds the last position both still
agree on and the published events the store no longer holds: the relay goes on from there (what the new
primary committed at those positions is published too) and names the lost ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

GONE = "stream gone"
RECREATED = "stream recreated"
SHORTENED = "stream lost its newest messages"


@dataclass(frozen=True)
class StreamMark:
    """What the relay saw of the stream: when it was created (a stream made anew after its storage was
    lost has another time) and its last sequence (the newest message's)."""

    created: datetime | None
    last_seq: int


def bus_loss(seen: StreamMark | None, now: StreamMark | None) -> str | None:
    """Why the stream no longer holds what the relay saw in it, or None. ``seen`` None: nothing seen yet
    (nothing to lose); ``now`` None: the stream does not exist."""
    if seen is None:
        return None
    if now is None:
        return GONE
    if now.created != seen.created:
        return RECREATED
    if now.last_seq < seen.last_seq:
        return SHORTENED
    return None


def later_mark(seen: StreamMark | None, acked_seq: int) -> StreamMark | None:
    """``seen`` moved to a sequence JetStream acknowledged for a publish (never back: a duplicate's ack
    names the earlier message's sequence)."""
    if seen is None or acked_seq <= seen.last_seq:
        return seen
    return StreamMark(seen.created, acked_seq)


def rewind_position(reason: str, position: int, held_from: int | None, kept_up_to: int) -> int:
    """The store position after which the relay publishes again. ``position``: where it is now;
    ``held_from``: the position of the oldest relayed message the lost stream held (None: unknown, so
    from the first event); ``kept_up_to``: the position of the newest relayed message the stream still
    holds. A new stream lost everything the old one held; a shortened one only what follows its newest
    message. Never forward."""
    if reason == SHORTENED:
        return min(position, kept_up_to)
    start = 0 if held_from is None else max(0, held_from - 1)
    return min(position, start)


@dataclass(frozen=True)
class Sent:
    """An event the relay published (JetStream acknowledged it), as it remembers it by store position."""

    event_id: uuid.UUID
    stream: str
    stream_version: int
    type: str
    # The stream sequence JetStream stored this very publish at, where its body is read back; 0 when
    # unknown or when the ack was a duplicate's (the message there was published earlier, perhaps by
    # another identity holding the id: event ids are predictable).
    seq: int = 0
    subject: str = ""  # the subject it was published on
    digest: bytes = b""  # sha256 of the bytes published: the copy read back must be these very bytes


@dataclass(frozen=True)
class Divergence:
    """How the store went back behind the bus: the position before the first checked one that differs,
    the published events it no longer holds there, and whether the first checked position differs (then
    the loss may go further back than the relay remembers)."""

    common: int
    lost: list[tuple[int, Sent]]
    beyond_memory: bool = False


def store_divergence(sent: Mapping[int, Sent], stored: Mapping[int, uuid.UUID]) -> Divergence | None:
    """Whether the store went back behind the bus: ``sent`` maps positions to what the relay published
    from them (those it checks), ``stored`` the event ids the store holds at those positions now. None
    while each holds the event published from it. Otherwise the position before the first that does not
    (the relay goes on after it, so that what was committed in the meantime at positions it had passed is
    published too) and the published events the store no longer holds anywhere in that range: lost with
    a primary whose last commits its standby never received. When even the first checked position differs,
    the loss extends beyond what the relay checked: earlier events may be lost too, unnamed."""
    differ = [position for position, event in sent.items() if stored.get(position) != event.event_id]
    if not differ:
        return None
    common = min(differ) - 1
    still_stored = set(stored.values())
    lost = sorted(
        (position, event)
        for position, event in sent.items()
        if position > common and event.event_id not in still_stored
    )
    return Divergence(common, lost, beyond_memory=min(differ) == min(sent))


def store_resume(found: Divergence, head: int, margin: int) -> int:
    """The position after which the relay publishes again once the store went back: after the last one both
    agree on. For a loss beyond its memory that one is unknown, and the new primary has committed from its
    own last position on, below the store's head (``head``) and perhaps below the oldest position checked:
    ``margin`` positions before the lower of the two, to publish what it committed before the check (an
    event published twice does no harm: consumers are idempotent)."""
    if not found.beyond_memory:
        return found.common
    return max(0, min(found.common, head) - margin)
