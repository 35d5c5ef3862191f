"""The auditor: the outbox relay (store -> bus), the audit of the bus (bus -> store), and the history API
(docs/services.md, "auditor" and "Postgres first, then the bus").

Relay. Services append to Postgres only. The relay reads the store in global_position order (read_batch
never skips: the store serialises writers) and publishes each event with Nats-Msg-Id = event_id and a
``Rollbook-Position`` header. After a crash it resumes from the position in the last message of the
JetStream stream: one connection publishes in order, so everything before that message was stored;
whatever it republishes beyond is dropped by the server's dedup window and by idempotent consumers.
Every second, and after a failed publish, it compares the stream with what it saw of it
(services/auditor/bus_loss.py): a stream gone (created again here), made anew or short of its newest
messages lost events the relay had published, so it publishes them again from the store as the original
events, reporting the gap in /readyz (not ready, ``details.relay.bus_gap``) and as metrics until it closes.
The store can go back too (a failover to an asynchronous standby): the relay names the published events it
lost, puts back from the bus, as themselves, those the record as it is now allows
(services/auditor/store_loss.py), and records the loss per workload (``StoreLossDetected``).

Audit. A durable consumer over every event subject makes sure each event it sees is stored. A message
JetStream stored for one of this process's relay publishes (by the stream sequence its ack gave, not as a
duplicate) is settled before it is decoded. A message with a ``Rollbook-Position`` header whose event id,
stream and version are stored at that position is settled without writing: the identities come from the relay
beside it (what it read from the store) or, for a message it did not relay, from one read of the identities at
and after that position (the next messages carry the next positions). Any other message is accepted only when
the store holds that very event (same id, stream, version, type, cause, rollout and payload); otherwise it is
quarantined (table ``bus_quarantine``, counted as ``rollbook_audit_events_total{outcome="quarantined"}``,
logged) and never stored: the bus is not a way into the trail (docs/security-bus.md).

Checkpoints. The Merkle tree over the log, kept in ``merkle_nodes``, and a signed checkpoint of its head
every ``checkpoint_interval`` seconds or ``checkpoint_every_events`` events (services/infra/transparency.py,
docs/audit.md).

History. ``GET /history?stream=...[&from_version=N]`` | ``?correlation_id=...[&after=<position>]`` |
``?after=<position>`` returns one page of stored events (``&limit=N``, at most 10,000) as JSON, to a
request with a bearer token its ``settings.api_auth`` accepts (401/403 otherwise); a parameter that is
not an integer where one is expected, or unknown, is a 400 with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import random
import time
import uuid
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import nats.errors
import nats.js.errors
import structlog
from aiohttp import web
from nats.js.api import RawStreamMsg
from prometheus_client import Counter

from services.auditor.audit_walk import AuditCursor, cursor_for_stream, walk
from services.auditor.bus_loss import (
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
from services.auditor.store_loss import (
    AFTER_UNRECOVERED,
    NOT_RELAYS,
    RECOVERABLE,
    SLOT_TAKEN,
    STORED,
    UNRECOVERABLE,
    Lost,
    StoreNow,
    loss_records,
    recovery,
)
from services.infra.api_auth import authenticator, guard
from services.infra.appended import AppendNotifications
from services.infra.archive import keep_partitions_ahead
from services.infra.bus import (
    BODY_HEADER,
    BODY_IN_STORE,
    HEADER_ALLOWANCE,
    MSG_ID,
    Bus,
    Outgoing,
    PublishAck,
    Undecodable,
    carried_payload,
    decode_event,
    event_reference,
    subject_matches,
)
from services.infra.metrics import (
    AUDIT_INGESTED,
    AUDIT_READS,
    CONSUMER_LAG,
    EVENTS_HANDLED,
    RELAY_BUS_GAP,
    RELAY_BUS_LOSSES,
    RELAY_POSITION,
    RELAY_PUBLISHED,
    RELAY_REFERENCES,
    RELAY_STORE_LOST,
    RELAY_STORE_RESOLVED,
    RETRIES,
)
from services.infra.nats_auth import AUDITOR
from services.infra.pacing import wait_for_pace
from services.infra.retry import (
    DEFAULT_BACKOFF,
    Stopped,
    first_of,
    is_transient,
    retry_until_stopped,
    wait_or_stop,
)
from services.infra.runtime import ServiceRuntime, calm_cyclic_collector, configure_logging, run_until_stopped
from services.infra.session_lock import SessionLock
from services.infra.settings import Settings
from services.infra.store import ConcurrencyError, EventIdentity, EventStore, StoredEventJson, StoreWentBack
from services.infra.transparency import checkpoint_loop, checkpointer_for
from services.kinds.registry import partition_key
from services.model.events import Envelope, PodActionRequested, PodActionSucceeded, decode

log = structlog.get_logger("auditor")

POSITION_HEADER = "Rollbook-Position"
# The audit's name: its row in audit_cursor is the stream's, its dead letters go to <prefix>.dlq.auditor, and
# the durable consumer of that name is the one earlier versions audited with (taken over at start).
AUDIT_NAME = "auditor"
# Sequences one walk covers at most (its reads are made before any is audited).
AUDIT_WALK = 4096
AUDIT_READS_AT_ONCE = 64  # stream messages requested at once
AUDIT_SAVE_INTERVAL = 1.0  # seconds between two saves of the cursor while it moves
AUDIT_LOOK_INTERVAL = 1.0  # seconds between two looks at the stream (one stream_info request)
RELAY_BATCH = 500
_POLL_MIN = 0.02
_POLL_MAX = 0.1
# Seconds between two reads while the relay is told of appends (services/infra/appended.py): only a
# notification lost some other way than with its connection waits this long.
IDLE_POLL = 2.0
# Seconds with no new JetStream ack for a batch in flight before the rest of it counts as lost and is
# published again (a connection lost with publishes in flight, or a stream leader killed holding them,
# would leave them waiting forever). A stall, not a total:
# a large batch acked slowly on a busy machine keeps going, while the acks lost with a stream leader cost
# this long, not the 10 s a bound on the whole batch needed.
PUBLISH_ACK_STALL = 2.0
_RESUME_SCAN = 1000  # messages to look back for a position header (dead letters carry none)
# Seconds between two looks at the stream for events the bus lost (one stream_info request).
BUS_CHECK_INTERVAL = 1.0
# Published events the relay remembers by position (~250 bytes each), to find those a store failover lost.
SENT_CAPACITY = 20_000
LOST_SHOWN = 50  # lost events named in /readyz (every one is logged)
# Published events checked against the store every BUS_CHECK_INTERVAL (one index range scan): a failover
# must come within this many events of the last commits its standby received for them to be caught.
STORE_CHECK_WINDOW = 2000
# Positions before the store's head published again after a loss beyond the relay's memory: where the new
# primary's first commits are is unknown then (a few seconds of commits at the pace of a rollout).
STORE_LOSS_MARGIN = 2000
# Identities read at once when the audit meets a relayed message it knows nothing about (the consumer
# fetches 256 messages at a time, and relayed messages come in position order).
AUDIT_READ_AHEAD = 256
# Identities kept for the audit: ~300 bytes each. The audit takes each one as it settles the message; the
# oldest go first when another auditor settles the messages, or the audit is far behind the relay.
KNOWN_CAPACITY = 20_000
SUBJECT_CACHE = 10_000  # (stream, event type) -> subject pairs the relay keeps
_encoder = msgspec.json.Encoder()


class KnownStored:
    """Identities of events known to be stored, by event id, oldest first, at most ``capacity``; and the
    events the relay beside the audit published, by the stream sequence JetStream gave each publish
    acknowledged as new, at most ``capacity`` too."""

    def __init__(self, capacity: int = KNOWN_CAPACITY) -> None:
        self.capacity = capacity
        self._by_id: dict[uuid.UUID, EventIdentity] = {}
        self._published: dict[int, Sent] = {}
        self.highest_published = 0  # the highest of those sequences since the stream was last forgotten
        self.published = asyncio.Event()  # set at each publish noted: the audit wakes for it
        # Counts the times the sequences were forgotten: acks of publishes sent before the last time are of
        # a stream that is no more, and not noted (Relay.publish).
        self.generation = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, identity: EventIdentity) -> None:
        self._by_id[identity.event_id] = identity
        if len(self._by_id) > self.capacity:
            del self._by_id[next(iter(self._by_id))]

    def take(self, event_id: uuid.UUID) -> EventIdentity | None:
        return self._by_id.pop(event_id, None)

    def add_published(self, sequence: int, sent: Sent) -> None:
        self._published[sequence] = sent
        if len(self._published) > self.capacity:
            del self._published[next(iter(self._published))]
        self.highest_published = max(self.highest_published, sequence)
        self.published.set()

    def published_sequences(self) -> Container[int]:
        return self._published.keys()

    def take_published(self, sequence: int) -> Sent | None:
        return self._published.pop(sequence, None)

    def forget_published(self) -> None:
        """The stream was made anew or lost messages: its sequences may be given again to other messages."""
        self._published.clear()
        self.highest_published = 0
        self.generation += 1


def relayed_position(headers: Mapping[str, str] | None) -> int | None:
    """The store position a message says it was relayed from; None without a (well-formed) header."""
    text = (headers or {}).get(POSITION_HEADER)
    # ASCII digits that fit a bigint: str.isdigit() also takes "²" and other digits int() refuses.
    if text is None or not (text.isascii() and text.isdigit() and len(text) <= 18):
        return None
    return int(text)


def stored_as_relayed(stored: EventIdentity | None, envelope: Envelope, position: int) -> bool:
    """Whether the message's event is the one stored at the position it carries: same event id, stream
    and stream version. Anything else (unknown, another position, another slot) goes the careful way."""
    return (
        stored is not None
        and stored.event_id == envelope.event_id
        and stored.global_position == position
        and stored.stream == envelope.stream
        and stored.stream_version == envelope.stream_version
    )


class Relay:
    def __init__(
        self,
        store: EventStore,
        bus: Bus,
        known: KnownStored | None = None,
        on_gap: Callable[[str | None], None] | None = None,
        notifications: AppendNotifications | None = None,
        idle_poll: float = IDLE_POLL,
        pace_interval: float = 0.0,
    ) -> None:
        self.store = store
        self.bus = bus
        # Told of each committed append (services/infra/appended.py): while it listens, the relay reads
        # when told, and polls only every ``idle_poll`` seconds; without it, every _POLL_MIN.._POLL_MAX.
        self.notifications = notifications
        self.idle_poll = idle_poll
        # Reads told of appends start at least this far apart: appends made meanwhile go in the same read.
        self.pace_interval = pace_interval
        self._polled_at = 0.0
        self.known = known  # where the audit beside it learns what the relay read from the store
        self._subjects: dict[tuple[str, str], str] = {}
        self.position = 0
        self.caught_up = asyncio.Event()
        self.retrying: str | None = None  # the error the relay is waiting out, None while it flows
        # What the relay saw of the stream, and the position of the oldest relayed message it held (at
        # first_seq _held_seq): what to publish again if the bus loses it (services/auditor/bus_loss.py).
        self.mark: StreamMark | None = None
        self.held_from: int | None = None
        self._held_seq = 0
        self._checked_at = 0.0
        # The events the bus lost and the relay has yet to publish again: reason, from, until (positions).
        self.gap: dict[str, Any] | None = None
        self.on_gap = on_gap  # told the gap's description when one opens, None when it closes
        self.sent: dict[int, Sent] = {}  # position -> what was published from it, the newest SENT_CAPACITY
        # Published events the store lost (a failover to a standby without them), by position: the events
        # consumers may have acted on that the record no longer holds.
        self.store_lost: dict[int, Sent] = {}
        # Up to this position, events are published with a message id of their own (event id and
        # position): the store went back behind it (check_store).
        self.reissue_until = 0
        self.lost_ids: set[uuid.UUID] = set()  # ids of the events in store_lost, published anew by id too
        # What became of the lost events (services/auditor/store_loss.py): put back from the bus, or not.
        self.recovered = 0
        self.unrecoverable: list[dict[str, Any]] = []
        self.unresolved: list[tuple[int, Sent]] = []  # lost events whose recovery has yet to go through
        self.unresolved_beyond = False  # their loss extends beyond the sent events the relay checked
        self.put_back: set[uuid.UUID] = set()  # ids of the lost events this relay appended again

    def detail(self) -> dict[str, Any]:
        """``details.relay`` of /readyz."""
        lost = [
            {"position": p, "event_id": str(e.event_id), "stream": e.stream, "version": e.stream_version,
             "type": e.type}
            for p, e in list(self.store_lost.items())[-LOST_SHOWN:]
        ]  # fmt: skip
        return {
            "position": self.position,
            "retrying": self.retrying,
            "told_of_appends": self.notifications is not None and self.notifications.listening,
            "bus_gap": self.gap,
            "store_lost": {
                "count": len(self.store_lost),
                "events": lost,
                "recovered": self.recovered,
                "unrecoverable": self.unrecoverable[-LOST_SHOWN:],
            }
            if lost
            else None,
        }

    async def resume_position(self) -> int:
        """The position carried by the newest relayed message in the stream, on an event subject (0 for an
        empty stream)."""
        info = await self.bus.stream_info_or_none()
        if info is None:
            return 0
        last, first = info.state.last_seq, info.state.first_seq
        for seq in range(last, max(first, last - _RESUME_SCAN) - 1, -1):
            if seq <= 0:
                break
            try:
                message = await self.bus.js.get_msg(self.bus.stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            position = self._relayed_from(message)
            if position is not None:
                # Never past what is stored: a message claiming a later position (published by
                # something else) must not make the relay skip events it has not published.
                return min(position, await self.store.head_position())
        return 0

    async def check_bus(self) -> None:
        """Look at the stream: if it lost events the relay published (gone, made anew, or short of its
        newest messages), create it again if it is gone, move the position back to publish them again,
        and open the gap. Then note what the stream is and the oldest position it holds."""
        self._checked_at = time.monotonic()
        await self.check_store()
        info = await self.bus.stream_info_or_none()
        if info is None and self.bus.manages_streams:
            await self.bus.ensure_stream()  # its consumers wait for it (Consumer.run makes them again)
            info = await self.bus.stream_info_or_none()
        now = None if info is None else StreamMark(info.created, info.state.last_seq)
        reason = bus_loss(self.mark, now)
        if reason is not None:
            kept = await self.resume_position() if reason == SHORTENED else 0
            rewound = rewind_position(reason, self.position, self.held_from, kept)
            head = await self.store.head_position()
            RELAY_BUS_LOSSES.labels(reason).inc()
            if self.known is not None:
                self.known.forget_published()
            log.error(
                "relay_bus_lost",
                reason=reason,
                position=self.position,
                republish_from=rewound + 1,
                republish_until=head,
            )
            if self.gap is None or rewound < self.gap["from"] - 1:
                self.gap = {"reason": reason, "from": rewound + 1, "until": max(head, self.position)}
            self.position = rewound
            self.caught_up.clear()
            self.held_from, self._held_seq = None, 0
            if self.on_gap is not None:
                self.on_gap(f"the bus lost events {self.gap['from']}..{self.gap['until']} ({reason})")
        if now is not None:
            self.mark = now
            if info.state.messages and info.state.first_seq != self._held_seq:
                self.held_from = await self.oldest_position(info.state.first_seq, info.state.last_seq)
                self._held_seq = info.state.first_seq
        self._gap_progress()

    async def check_store(self) -> None:
        """Whether the store still holds, at the positions of the last ``STORE_CHECK_WINDOW`` events
        published, the events published from them; if not (a failover to a standby that never received
        the last commits), go back to the position before the first that differs, and name every published
        event it lost (log, metric, /readyz). When even the oldest checked differs, it looks through all it
        remembers; if that too is gone, the loss goes further back than it can name: it publishes again from
        ``STORE_LOSS_MARGIN`` before the store's head (or the oldest checked) and puts none back
        (``BEYOND_MEMORY``)."""
        await self.resolve()  # a recovery an outage interrupted
        remembered = {p: e for p, e in self.sent.items() if p <= self.position}
        window = remembered
        if len(window) > STORE_CHECK_WINDOW:
            window = dict(list(window.items())[-STORE_CHECK_WINDOW:])
        if not window:
            return
        found = await self._divergence(window)
        if found is not None and found.beyond_memory and len(window) < len(remembered):
            window = remembered  # the loss goes further back: look through all the relay remembers (rare)
            found = await self._divergence(window)
        if found is None:
            return
        first = min(window)
        lost = found.lost
        common = store_resume(found, await self.store.head_position(), STORE_LOSS_MARGIN)
        if found.beyond_memory:
            # Even the oldest checked event differs: earlier ones may be lost too, which the relay cannot
            # name; none of those it knows goes back (they may rest on them).
            log.error("relay_store_loss_beyond_memory", oldest_checked=first, goes_on_after=common)
            self.unresolved_beyond = True
        for position, event in lost:
            self.store_lost[position] = event
            self.lost_ids.add(event.event_id)
            log.error(
                "relay_store_lost_event",
                position=position,
                event_id=str(event.event_id),
                stream=event.stream,
                version=event.stream_version,
                type=event.type,
            )
        RELAY_STORE_LOST.inc(len(lost))
        log.error("relay_store_went_back", position=self.position, goes_on_after=common, lost=len(lost))
        self.sent = {p: e for p, e in self.sent.items() if p <= common}
        self.reissue_until = max(self.reissue_until, self.position, max(lost, default=(0,))[0])
        self.position = common
        self.caught_up.clear()
        self.unresolved += lost
        await self.resolve()

    async def _divergence(self, window: Mapping[int, Sent]) -> Divergence | None:
        first = min(window)
        # Positions may skip numbers (a sequence's), never repeat: the range holds at most this many rows.
        identities = await self.store.read_identities(first - 1, self.position - first + 1)
        return store_divergence(window, {i.global_position: i.event_id for i in identities})

    async def resolve(self) -> None:
        """Recover what the store lost, once: kept until it went through (the store or the bus may fail
        under it, as they may at the time of a failover; the next check tries again)."""
        if self.unresolved:
            await self.recover(self.unresolved, self.unresolved_beyond)
            self.unresolved = []
            self.unresolved_beyond = False

    async def recover(self, lost: Sequence[tuple[int, Sent]], beyond_memory: bool = False) -> None:
        """Put the lost events back from the bus as themselves where the record as it is now allows
        (services/auditor/store_loss.py), and record the loss, what came back and what did not, for each
        workload (``loss_records``; log, metrics, /readyz). The store is the arbiter: an event another writer
        beat to its slot meanwhile is unrecoverable, as is every lost event after it."""
        found = []
        for position, sent in lost:
            body = await self.lost_body(position, sent)
            found.append(
                Lost(position, sent, None, body) if isinstance(body, str) else Lost(position, sent, body)
            )
        now = await self.store_now(found)
        verdicts = [
            # Put back by an attempt that failed before it recorded anything: recovered all the same.
            (event, RECOVERABLE if verdict == STORED and event.sent.event_id in self.put_back else verdict)
            for event, verdict in recovery(found, now, beyond_memory)
        ]
        blocked = False  # as in ``recovery``: none after one that could not go back
        for index, (event, verdict) in enumerate(verdicts):
            if verdict == RECOVERABLE and blocked:
                verdicts[index] = (event, AFTER_UNRECOVERED)
                continue
            # Not skipped for being in put_back: a second failover may have lost what this relay put back.
            if verdict != RECOVERABLE or event.body is None or event.sent.event_id in now.stored_ids:
                continue
            try:
                appended = await self.store.append_many([event.body])
            except ConcurrencyError:
                verdicts[index] = (event, SLOT_TAKEN)  # another writer took its slot meanwhile
                blocked = True
                continue
            if not appended:
                # Its id was stored meanwhile (append_many skips a stored id): back as itself only if at
                # its own slot; stored elsewhere, what came after it rested on another history.
                slot = (event.sent.stream, event.sent.stream_version)
                if (await self.store.events_at([slot])).get(slot) != event.sent.event_id:
                    verdicts[index] = (event, STORED)
                    blocked = True
                    continue
            self.put_back.add(event.sent.event_id)
        recovered_ids = [e.sent.event_id for e, v in verdicts if v == RECOVERABLE]
        positions = await self.store.positions_of(recovered_ids)
        for event, verdict in verdicts:
            fields = {
                "position_before": event.position,
                "event_id": str(event.sent.event_id),
                "stream": event.sent.stream,
                "version": event.sent.stream_version,
                "type": event.sent.type,
            }
            if verdict == RECOVERABLE:
                log.warning(
                    "relay_store_recovered_event", position=positions.get(event.sent.event_id), **fields
                )
            elif verdict != STORED:
                log.error("relay_store_unrecoverable_event", reason=verdict, **fields)
                self.unrecoverable.append({**fields, "reason": verdict})
        unrecoverable = sum(1 for _, v in verdicts if v in UNRECOVERABLE)
        self.recovered += len(recovered_ids)
        RELAY_STORE_RESOLVED.labels("recovered").inc(len(recovered_ids))
        RELAY_STORE_RESOLVED.labels("unrecoverable").inc(unrecoverable)
        records = loss_records(verdicts, positions, await self.requests_of(verdicts), datetime.now(UTC))
        if records:
            try:
                await self.store.append_unversioned(records)
            except StoreWentBack:
                # A second failover lost what this relay appended before (an earlier loss's records): its
                # own check before an append must not stop the relay, which names and puts back such
                # losses itself (those records went to the bus like any event). Record this one.
                self.store.last_appended = None
                await self.store.append_unversioned(records)

    async def lost_body(self, position: int, sent: Sent) -> Envelope | str | None:
        """The lost event as the bus holds it, from the stream sequence its publish was stored at: only the
        very message the relay published (its bytes and subject), relayed from ``position`` and carrying
        the whole event (not a reference to the store's copy). None when the bus no longer holds it;
        ``NOT_RELAYS`` when the message there is not known to be the relay's: its publish was a duplicate
        (the message at that sequence was published earlier, by anyone holding the event's predictable id)
        or the message differs from what it published."""
        if not sent.seq or not sent.digest:
            return NOT_RELAYS
        try:
            message = await self.bus.js.get_msg(self.bus.stream, sent.seq)
        except nats.js.errors.NotFoundError:
            return None
        headers = message.headers or {}
        if BODY_HEADER in headers or not message.data:
            return None
        if (
            message.subject != sent.subject
            or hashlib.sha256(message.data).digest() != sent.digest
            or relayed_position(headers) != position
        ):
            return NOT_RELAYS
        try:
            body = decode(message.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return NOT_RELAYS
        if (body.event_id, body.stream, body.stream_version, body.type) != (
            sent.event_id,
            sent.stream,
            sent.stream_version,
            sent.type,
        ):
            return NOT_RELAYS
        return body

    async def store_now(self, lost: Sequence[Lost]) -> StoreNow:
        """What the store holds now where the lost events were: their streams' versions, their slots and
        which of their ids it holds anywhere."""
        streams = sorted({e.sent.stream for e in lost})
        versions = await self.store.stream_versions(streams)
        slots = await self.store.events_at([(e.sent.stream, e.sent.stream_version) for e in lost])
        stored = await self.store.stored_ids([e.sent.event_id for e in lost])
        return StoreNow(
            versions=versions,
            slots=slots,
            stored_ids=frozenset(stored),
        )

    async def requests_of(self, verdicts: Sequence[tuple[Lost, str]]) -> dict[str, PodActionRequested]:
        """The requests of the lost successes, by action id: among the lost bodies, else the stored event
        that caused each (its causation id)."""
        requests: dict[str, PodActionRequested] = {}
        for event, _ in verdicts:
            if event.body is not None and isinstance(event.body.payload, PodActionRequested):
                requests[event.body.payload.action_id] = event.body.payload
        for event, verdict in verdicts:
            body = event.body
            if (
                verdict not in UNRECOVERABLE
                or body is None
                or not isinstance(body.payload, PodActionSucceeded)
            ):
                continue
            if body.payload.action_id in requests or body.causation_id is None:
                continue
            cause = await self.store.read_event(body.causation_id)
            if (
                cause is not None
                and isinstance(cause.payload, PodActionRequested)
                and cause.payload.action_id == body.payload.action_id  # its own request, not another's
            ):
                requests[body.payload.action_id] = cause.payload
        return requests

    async def oldest_position(self, first: int, last: int) -> int | None:
        """The position carried by the oldest relayed message from stream sequence ``first`` on."""
        for seq in range(first, min(last, first + _RESUME_SCAN) + 1):
            try:
                message = await self.bus.js.get_msg(self.bus.stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            position = self._relayed_from(message)
            if position is not None:
                return position
        return None

    def _relayed_from(self, message: RawStreamMsg) -> int | None:
        """The position a stream message was relayed from: only on an event subject, which no identity
        but the relay's may publish on (others may publish dead letters, with any header)."""
        if not (message.subject or "").startswith(f"{self.bus.prefix}.ev."):
            return None
        return relayed_position(message.headers)

    def _gap_progress(self) -> None:
        if self.gap is None:
            return
        RELAY_BUS_GAP.set(max(0, self.gap["until"] - self.position))
        if self.position >= self.gap["until"]:
            log.info("relay_bus_restored", republished_from=self.gap["from"], until=self.gap["until"])
            self.gap = None
            if self.on_gap is not None:
                self.on_gap(None)

    async def run(self, stopping: asyncio.Event) -> None:
        """Relay until ``stopping``. A store or bus that is unreachable (Postgres or NATS restarting, a
        connection lost mid-batch) is waited out with bounded, jittered backoff, never given up on: the
        position only moves past events JetStream acknowledged, so the batch in hand is published again
        (deduplicated by event id) once both are back."""
        try:
            self.position = await retry_until_stopped(
                self.resume_position, what="relay_resume", stopping=stopping
            )
        except Stopped:
            return
        RELAY_POSITION.set(self.position)
        log.info("relay_resumed", position=self.position)
        delay = _POLL_MIN
        failures = 0
        read_now = True
        while not stopping.is_set():
            batch: list[StoredEventJson] = []
            try:
                if time.monotonic() - self._checked_at >= BUS_CHECK_INTERVAL:
                    before = self.position
                    await self.check_bus()
                    # A loss found moves the position back: publish again at once, not at the next poll.
                    read_now = read_now or self.position != before or not self.caught_up.is_set()
                if read_now:
                    if self.notifications is not None:
                        self.notifications.appended.clear()  # one told after this read wakes the next
                    self._polled_at = time.monotonic()
                    batch = await self.store.read_batch_json(self.position, RELAY_BATCH)
                    if batch:
                        await self.publish(batch)
                        self._gap_progress()
            except Exception as error:
                # An error ack is JetStream refusing one publish (a stream leader moving, a full stream):
                # retried from that event as an outage is, never a reason to stop relaying.
                if not is_transient(error) and not isinstance(error, nats.js.errors.APIError):
                    raise
                RETRIES.labels("relay").inc()
                self.caught_up.clear()
                wait = DEFAULT_BACKOFF.delay(failures, random.random())
                log.warning("relay_retrying", position=self.position, delay=round(wait, 3), error=repr(error))
                failures += 1
                self.retrying = repr(error)
                self._checked_at = 0.0  # the stream may be gone: look before the next attempt
                read_now = True
                await wait_or_stop(stopping, wait)
                continue
            if failures:
                log.info("relay_recovered", position=self.position, attempts=failures + 1)
                failures = 0
                self.retrying = None
            if len(batch) == RELAY_BATCH:
                continue  # more are waiting
            if read_now and not batch:
                self.caught_up.set()
            notifications = self.notifications
            if notifications is not None and notifications.listening:
                read_now = await self._wait_for_appends(stopping, notifications)
                delay = _POLL_MIN
                continue
            # Not told of appends (no listener, or its connection is being opened again): poll.
            read_now = True
            if batch:
                # Everything committed when we read is published: the next read comes after the poll
                # interval, not at once (that read found nothing two times in three during a rollout).
                delay = _POLL_MIN
            await wait_or_stop(stopping, delay)
            if not batch:
                delay = min(delay * 2, _POLL_MAX)  # nothing new: back off while idle

    async def _wait_for_appends(self, stopping: asyncio.Event, notifications: AppendNotifications) -> bool:
        """Wait until an append is notified (True), the slow poll is due (True), the next look at the bus
        is (False: no read needed for it) or ``stopping``."""
        now = time.monotonic()
        poll_at = self._polled_at + self.idle_poll
        wake_at = min(poll_at, self._checked_at + BUS_CHECK_INTERVAL)
        if not notifications.appended.is_set() and wake_at > now:
            waits = [
                asyncio.ensure_future(notifications.appended.wait()),
                asyncio.ensure_future(stopping.wait()),
            ]
            try:
                await asyncio.wait(waits, timeout=wake_at - now, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        await wait_for_pace(self._polled_at, self.pace_interval)
        return notifications.appended.is_set() or time.monotonic() >= poll_at or not notifications.listening

    async def publish(self, batch: Sequence[StoredEventJson]) -> None:
        """Publish ``batch`` pipelined (``Bus.publish_pipelined``: the window is the batch) and move the
        position over the prefix JetStream acknowledged. Raises the first failure (after recording the
        acknowledged prefix); acks that stop coming (the connection dropped, or the stream leader died,
        with publishes in flight) count as a failure once none came for ``PUBLISH_ACK_STALL`` seconds."""
        known = self.known
        largest_inline = self.bus.nc.max_payload - HEADER_ALLOWANCE
        messages: list[Outgoing] = []
        for position, envelope in batch:
            if known is not None:
                known.add(
                    EventIdentity(position, envelope.event_id, envelope.stream, envelope.stream_version)
                )
            # The payload goes on as the JSON the store returned: no decoding and encoding again.
            data = _encoder.encode(envelope)
            if len(data) > largest_inline:
                # Perhaps larger than a bus message: the bus decides, and sends a reference to the
                # stored body if so (its compact encoding may still fit).
                data, headers = self.bus.event_message(decode(data))
                if BODY_HEADER in headers:
                    RELAY_REFERENCES.inc()
                    log.info("relay_by_reference", event_id=str(envelope.event_id), type=envelope.type)
                headers[POSITION_HEADER] = str(position)
            else:
                headers = {MSG_ID: str(envelope.event_id), POSITION_HEADER: str(position)}
            if position <= self.reissue_until or envelope.event_id in self.lost_ids:
                # Published again after the store went back: an event the new primary stored anew with
                # the id of a lost one (ids are derived from what they record) would be dropped by the
                # bus's dedup window as the lost one, and no consumer would hear of it.
                headers[MSG_ID] = f"{envelope.event_id}@{position}"
            messages.append((self.subject(envelope.stream, envelope.type), data, headers))
        generation = known.generation if known is not None else 0
        outcomes = await self.bus.publish_pipelined(messages, stall=PUBLISH_ACK_STALL)
        acknowledged = 0
        try:
            for stored, outcome, (subject, data, _headers) in zip(batch, outcomes, messages, strict=True):
                if outcome is None:
                    raise TimeoutError(f"no JetStream ack for {PUBLISH_ACK_STALL:g}s")
                if isinstance(outcome, Exception):
                    # Publish again from here on; what was stored after it is deduplicated by event id.
                    raise outcome
                self.position = stored.global_position
                acknowledged += 1
                if len(self.sent) >= SENT_CAPACITY:
                    del self.sent[next(iter(self.sent))]
                envelope = stored.envelope
                # A duplicate's sequence is the earlier message's, perhaps another identity's with the
                # id: its body is not the relay's, never put back into the store from there (lost_body).
                sent = (
                    Sent(envelope.event_id, envelope.stream, envelope.stream_version, envelope.type)
                    if outcome.duplicate
                    else Sent(
                        envelope.event_id,
                        envelope.stream,
                        envelope.stream_version,
                        envelope.type,
                        outcome.seq,
                        subject,
                        hashlib.sha256(data).digest(),
                    )
                )
                self.sent[self.position] = sent
                if known is not None and not outcome.duplicate and known.generation == generation:
                    # This very message is the stream's at this sequence: the audit beside us need not read
                    # it. Not so for a duplicate: the message at its sequence was published earlier, by
                    # this relay or by anyone else holding the id. Nor for a publish sent before the stream's
                    # sequences were last forgotten: its sequence may be a stream's that is gone.
                    known.add_published(outcome.seq, sent)
                self._saw_ack(outcome)
        finally:
            RELAY_PUBLISHED.inc(acknowledged)
            RELAY_POSITION.set(self.position)

    def _saw_ack(self, ack: PublishAck) -> None:
        """Keep the stream's mark at the acknowledged sequence; a new message at a sequence the stream had
        already passed means it started again: look at it before the next batch."""
        if self.mark is not None and not ack.duplicate and ack.seq <= self.mark.last_seq:
            self._checked_at = 0.0
            return
        self.mark = later_mark(self.mark, ack.seq)

    def subject(self, stream: str, event_type: str) -> str:
        """``Bus.subject_for`` an event of ``stream`` and ``event_type`` on its workload's partition,
        remembered: the same few (stream, type) pairs come again and again."""
        key = (stream, event_type)
        subject = self._subjects.get(key)
        if subject is None:
            parts = stream.split("/", 2)
            if len(parts) != 3:
                raise ValueError(f"event stream {stream!r} is not Kind/namespace/name")
            kind, namespace, name = parts
            if len(self._subjects) >= SUBJECT_CACHE:
                self._subjects.clear()
            subject = self._subjects[key] = self.bus.event_filter(
                partition=self.bus.partition_of(partition_key(stream)),
                kind=kind,
                namespace=namespace,
                name=name,
                event_type=event_type,
            )
        return subject


@dataclass
class AuditStats:
    """What the audit did with the stream sequences it walked."""

    relayed: int = 0  # published by the relay beside it: settled unread
    read: int = 0  # read and audited (events on event subjects)
    other: int = 0  # read, not on an event subject (a dead letter): nothing to audit
    gone: int = 0  # no message at that sequence any more (aged out, purged)
    quarantined: int = 0
    dead_lettered: int = 0

    @property
    def walked(self) -> int:
        return self.relayed + self.read + self.other + self.gone


class Audit:
    """The audit of the bus (module docstring): ``await run(stopping)``. With a ``lock``, it walks only
    while this process holds it, so one auditor replica walks the stream and the others only relay."""

    def __init__(
        self,
        store: EventStore,
        bus: Bus,
        known: KnownStored | None = None,
        lock: SessionLock | None = None,
        look_interval: float = AUDIT_LOOK_INTERVAL,
    ) -> None:
        self.store = store
        self.bus = bus
        self.known = known if known is not None else KnownStored()
        self.lock = lock
        self.look_interval = look_interval
        self.stats = AuditStats()
        self.cursor: AuditCursor | None = None  # None until loaded, and while another replica walks
        self._saved: AuditCursor | None = None
        self._saved_at = 0.0
        self._looked_at = 0.0
        # The stream's last sequence at the look before the latest: walked to even if the relay beside
        # the audit did not publish it. One look late, so that the relay's acks for its own publishes have
        # arrived and those need no read.
        self._look_before: int = 0
        self._look_latest: int = 0
        self._direct = False  # messages read with direct gets: while the stream allows them (its config)
        self._event_filter = bus.event_filter()
        # Labelled counters looked up once: prometheus_client's labels() was a tenth of the audit's CPU.
        self._handled: dict[str, Counter] = {}
        self._present = AUDIT_INGESTED.labels("present")
        self._lag = CONSUMER_LAG.labels("auditor", AUDIT_NAME)
        self.lag = 0  # stream sequences not yet audited (by whichever replica walks)
        self.last_version: dict[str, int] = {}  # stream -> highest version seen on the bus

    # --- the walk ---------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Walk the stream until ``stopping``. A store or bus that is unreachable is waited out with
        backoff: the cursor moves only past sequences audited."""
        failures = 0
        try:
            while not stopping.is_set():
                more = False
                if self.lock is not None:
                    self.lock.changed.clear()  # a change from now on wakes the waits below
                try:
                    if self.lock is not None and not self.lock.held:
                        self.cursor = None  # another replica walks: read its cursor when this one walks
                        if time.monotonic() - self._looked_at >= self.look_interval:
                            await self.look_from_afar()
                        await first_of(stopping, self.lock.changed, seconds=self.look_interval)
                        continue
                    if self.cursor is None:
                        await self.start()
                    if time.monotonic() - self._looked_at >= self.look_interval:
                        await self.look()
                    self.known.published.clear()  # a publish from now on wakes the wait below
                    more = await self.walk_once()
                    await self.save()
                except Exception as error:
                    if not is_transient(error) and not isinstance(error, nats.js.errors.APIError):
                        raise
                    RETRIES.labels("audit").inc()
                    wait = DEFAULT_BACKOFF.delay(failures, random.random())
                    log.warning("audit_retrying", delay=round(wait, 3), error=repr(error))
                    failures += 1
                    await wait_or_stop(stopping, wait)
                    continue
                failures = 0
                if more:
                    await asyncio.sleep(0)  # a walk of the relay's notes alone awaits nothing: let others run
                    continue
                # Until the relay beside it publishes, the next look is due, or the lock changes hands.
                wake = [stopping, self.known.published]
                if self.lock is not None:
                    wake.append(self.lock.changed)
                due = self._looked_at + self.look_interval - time.monotonic()
                await first_of(*wake, seconds=max(due, 0.0))
        finally:
            if self.cursor is not None and (self.lock is None or self.lock.held):
                with contextlib.suppress(Exception):  # best effort: at worst those sequences are read again
                    await asyncio.wait_for(self.save(force=True), 5.0)

    async def start(self) -> None:
        """Take up the walk where it was saved (by this or another replica). The durable consumer the
        audit used before (``auditor``) hands over its ack floor, when no cursor was saved yet, and is
        deleted."""
        saved_row = await self.store.audit_cursor(self.bus.stream)
        saved = None if saved_row is None else AuditCursor(*saved_row)
        info = await self.bus.stream_info_or_none()
        if info is None:
            return  # no stream yet: the relay makes it
        legacy = await self._legacy_floor()
        if saved is None and legacy is not None:
            saved = AuditCursor(info.created, legacy)
            log.info("audit_took_over_durable", durable=AUDIT_NAME, audited_through=legacy)
        if saved is not None and saved.stream_created != info.created:
            # Made anew since: it gives its sequences again, so what the relay noted before tells nothing.
            self.known.forget_published()
        self.cursor = cursor_for_stream(saved, info.created, info.state.first_seq, info.state.last_seq)
        if saved is not None and saved.stream_created == info.created:
            self._count_gone(saved.audited_through, self.cursor.audited_through)
        self._saved = None if saved_row is None else AuditCursor(*saved_row)
        # What the stream held before the walk starts is walked to at once (the relay's acks of the last
        # few may still be on their way: those are read, not waited for).
        self._look_before = self._look_latest = info.state.last_seq
        self._direct = bool(info.config.allow_direct)
        self._looked_at = time.monotonic()
        await self.save(force=True)
        if legacy is not None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.bus.js.delete_consumer(self.bus.stream, AUDIT_NAME)
        log.info("audit_started", audited_through=self.cursor.audited_through)

    async def _legacy_floor(self) -> int | None:
        """The ack floor of the durable consumer of earlier versions, None when there is none."""
        try:
            info = await self.bus.js.consumer_info(self.bus.stream, AUDIT_NAME)
        except nats.js.errors.NotFoundError:
            return None
        floor = info.ack_floor
        return int(floor.stream_seq or 0) if floor is not None else 0

    async def look(self) -> None:
        """Look at the stream: how far it goes, and whether it is still the stream the cursor is of."""
        self._looked_at = time.monotonic()
        info = await self.bus.stream_info_or_none()
        if info is None or self.cursor is None:
            return
        last = info.state.last_seq
        # Direct gets while the stream allows them (made by an earlier version, until the auditor updated it).
        self._direct = bool(info.config.allow_direct)
        cursor = cursor_for_stream(self.cursor, info.created, info.state.first_seq, last)
        anew = cursor.stream_created != self.cursor.stream_created
        if anew or cursor.audited_through < self.cursor.audited_through or last < self._look_latest:
            # Made anew, or short of its newest messages: its sequences are given again, so what the relay
            # published at them before tells nothing of the messages there now.
            self.known.forget_published()
            self._look_latest = last
            log.warning(
                "audit_stream_changed",
                audited_through=self.cursor.audited_through,
                now_from=cursor.audited_through,
                last_seq=last,
                created=str(info.created),
            )
        else:
            self._count_gone(self.cursor.audited_through, cursor.audited_through)
        self.cursor = cursor
        self._look_before, self._look_latest = self._look_latest, last
        self._set_lag(max(last - cursor.audited_through, 0))

    def _count_gone(self, audited_through: int, moved_to: int) -> None:
        """The cursor moved from ``audited_through`` to ``moved_to`` over messages that aged out (or were
        purged) before they were audited: they cannot be read any more."""
        if moved_to > audited_through:
            self.stats.gone += moved_to - audited_through
            AUDIT_READS.labels("gone").inc(moved_to - audited_through)
            log.warning("audit_messages_gone", first=audited_through + 1, last=moved_to)

    async def look_from_afar(self) -> None:
        """While another replica walks: how far behind the stream its saved cursor is (the lag every
        replica reports, so an audit that nobody walks shows)."""
        self._looked_at = time.monotonic()
        info = await self.bus.stream_info_or_none()
        if info is None:
            return
        saved = await self.store.audit_cursor(self.bus.stream)
        audited = saved[1] if saved is not None and saved[0] == info.created else info.state.first_seq - 1
        self._set_lag(max(info.state.last_seq - max(audited, 0), 0))

    def _set_lag(self, lag: int) -> None:
        self.lag = lag
        self._lag.set(lag)

    def detail(self) -> dict[str, Any]:
        """``details.audit`` of /readyz."""
        return {
            "walking": self.cursor is not None,
            "audited_through": self.cursor.audited_through if self.cursor is not None else None,
            "lag": self.lag,
        }

    async def walk_once(self) -> bool:
        """Audit the next sequences (at most ``AUDIT_WALK``): those the relay beside the audit published
        unread, the others read, ``AUDIT_READS_AT_ONCE`` at a time, each chunk audited before the next is
        read. Whether more are waiting."""
        cursor = self.cursor
        if cursor is None:
            return False
        target = max(self.known.highest_published, self._look_before)
        last, to_read = walk(cursor.audited_through, target, self.known.published_sequences(), AUDIT_WALK)
        read: dict[int, RawStreamMsg | None] = {}
        next_read = 0  # the index in to_read of the first sequence not read yet
        for seq in range(cursor.audited_through + 1, last + 1):
            if next_read < len(to_read) and seq == to_read[next_read]:
                if not read:
                    chunk = to_read[next_read : next_read + AUDIT_READS_AT_ONCE]
                    read = dict(zip(chunk, await asyncio.gather(*(self._get(s) for s in chunk)), strict=True))
                next_read += 1
                message = read.pop(seq)
                if message is None:
                    if seq > self._look_latest:
                        # Not there, and beyond what the stream held at the last look: not gone, perhaps
                        # not yet stored by the replica asked, or a sequence of a stream made anew.
                        break
                    self.stats.gone += 1
                    AUDIT_READS.labels("gone").inc()
                else:
                    await self._audit_or_dead_letter(message)
            else:
                sent = self.known.take_published(seq)
                if sent is None:
                    break  # forgotten meanwhile (the stream changed): read it on the next walk
                self.settle_relayed(sent)
            self.cursor = AuditCursor(cursor.stream_created, seq)
        walked_to = self.cursor.audited_through if self.cursor is not None else 0
        self._set_lag(max(self._look_latest, target, walked_to) - walked_to)
        return walked_to < target and walked_to > cursor.audited_through

    async def _audit_or_dead_letter(self, message: RawStreamMsg) -> None:
        """Audit ``message``. A message whose values Postgres refuses (a stream version beyond a bigint, a
        NUL in a stream name: a data error) is not a stored event: quarantined with the reason, and the
        walk goes on. Anything else is raised: an outage is waited out and the walk retried from here; a
        schema or privilege error stops the auditor, loudly, rather than drain the stream unaudited."""
        try:
            if not await self.audit_message(message):
                return  # not on an event subject: counted as other
        except asyncpg.DataError as error:
            reason = f"the store cannot look it up: {type(error).__name__}: {error}".replace("\x00", "")
            await self.store.quarantine(
                subject=message.subject or "",
                stream_sequence=int(message.seq or 0),
                envelope=None,
                reason=reason,
                data=message.data or b"",
            )
            self.stats.quarantined += 1
            AUDIT_INGESTED.labels("quarantined").inc()
            log.error("audit_quarantined", subject=message.subject, reason=reason)
        # Counted once it is settled: a walk retried after an outage reads it again.
        self.stats.read += 1
        AUDIT_READS.labels("event").inc()

    async def _get(self, seq: int) -> RawStreamMsg | None:
        """The message at ``seq``: a direct get, answered by any of the stream's replicas. A replica that
        has not stored it yet answers "not found" too, so that answer, like any but the message, is asked
        of the stream's leader before the sequence counts as gone."""
        if self._direct:
            try:
                return await self.bus.js.get_msg(self.bus.stream, seq, direct=True)
            except Exception:  # noqa: BLE001
                # "Not found", or any other answer: a direct get's answer is the message itself, and
                # nats-py reads a message with an empty body and a Status header as the server's error
                # (a publisher may forge one). The API's answer carries the message as JSON: ask it.
                pass
        try:
            return await self.bus.js.get_msg(self.bus.stream, seq)
        except nats.js.errors.NotFoundError:
            return None

    async def save(self, force: bool = False) -> None:
        """Keep the cursor in the store: at most every ``AUDIT_SAVE_INTERVAL`` seconds unless ``force``."""
        cursor = self.cursor
        if cursor is None or cursor == self._saved:
            return
        if not force and time.monotonic() - self._saved_at < AUDIT_SAVE_INTERVAL:
            return
        await self.store.save_audit_cursor(self.bus.stream, cursor.stream_created, cursor.audited_through)
        self._saved, self._saved_at = cursor, time.monotonic()

    # --- one message ------------------------------------------------------------------------------------

    def check_order(self, stream: str, version: int) -> None:
        """Each stream's events should reach the bus in version order (the relay publishes in global
        order); a jump means events were published out of order or by someone else: count and log it.
        Repeats (version <= last) are expected and fine."""
        last = self.last_version.get(stream)
        if last is not None and version > last + 1:
            AUDIT_INGESTED.labels("out_of_order").inc()
            log.warning("audit_version_gap", stream=stream, expected=last + 1, got=version)
        if last is None or version > last:
            self.last_version[stream] = version

    def _count(self, event_type: str) -> None:
        handled = self._handled.get(event_type)
        if handled is None:
            handled = self._handled[event_type] = EVENTS_HANDLED.labels("auditor", event_type)
        handled.inc()

    def settle_relayed(self, sent: Sent) -> None:
        """The message at a sequence JetStream gave the relay beside the audit for this event (not as a
        duplicate): the server assigns sequences, so no one else's message can be there. Settled unread."""
        self.known.take(sent.event_id)  # the relay's identity of it is not needed any more
        self._count(sent.type)
        self.check_order(sent.stream, sent.stream_version)
        self._present.inc()
        self.stats.relayed += 1

    async def audit_message(self, message: RawStreamMsg) -> bool:
        """Audit one message read from the stream: decoded (its body read from the store when it is carried
        by reference), then checked against the store; one that cannot be decoded is dead-lettered. False
        for a message on another subject than an event's (a dead letter): nothing to audit."""
        subject, seq = message.subject or "", int(message.seq or 0)
        if not subject_matches(self._event_filter, subject):
            self.stats.other += 1
            AUDIT_READS.labels("other").inc()
            return False
        headers, data = message.headers, message.data or b""
        try:
            if (headers or {}).get(BODY_HEADER) == BODY_IN_STORE:
                reference = event_reference(data)
                found = await self.store.read_event(reference.event_id)
                if found is None:
                    missing = f"referenced event {reference.event_id} is not in the event store"
                    await self._dead_letter(message, missing)
                    return True
                envelope = found
            else:
                envelope = decode_event(data)
        except Undecodable as error:
            await self._dead_letter(message, str(error))
            return True
        await self.check(envelope, subject, seq, headers, data)
        return True

    async def _dead_letter(self, message: RawStreamMsg, reason: str) -> None:
        await self.bus.dead_letter(
            AUDIT_NAME,
            subject=message.subject or "",
            stream_sequence=int(message.seq or 0),
            deliveries=1,
            data=message.data or b"",
            headers=message.headers,
            reason=reason,
        )
        self.stats.dead_lettered += 1
        AUDIT_INGESTED.labels("dead_lettered").inc()

    async def check(
        self, envelope: Envelope, subject: str, seq: int, headers: Mapping[str, str] | None, data: bytes
    ) -> None:
        """Whether the event a message carries is the stored one: settled if so, quarantined if not."""
        self._count(envelope.type)
        self.check_order(envelope.stream, envelope.stream_version)
        position = relayed_position(headers)
        if position is not None and await self.stored_at(envelope, position):
            self._present.inc()
            return
        # Not the relay's message as it says: only an event the store holds, exactly as it came, is
        # accepted. The store is the authority; nothing reaches ``events`` from the bus.
        carried = carried_payload(headers, data)
        stored = True if not carried else await self.store.stored_as_carried(envelope, carried)
        if stored:
            self._present.inc()
            return
        reason = (
            "no event with this id in the store (not published by the relay)"
            if stored is None
            else "differs from the event stored with this id (stream, version, type, cause, rollout, payload)"
        )
        await self.store.quarantine(
            subject=subject, stream_sequence=seq, envelope=envelope, reason=reason, data=data
        )
        self.stats.quarantined += 1
        AUDIT_INGESTED.labels("quarantined").inc()
        log.error(
            "audit_quarantined",
            event_id=str(envelope.event_id),
            type=envelope.type,
            stream=envelope.stream,
            subject=subject,
            reason=reason,
        )

    async def stored_at(self, envelope: Envelope, position: int) -> bool:
        """Whether ``envelope`` is the event stored at ``position``, read without writing: the relay's
        identities, else one read of the identities from ``position`` on, kept for the next messages."""
        stored = self.known.take(envelope.event_id)
        if stored is None:
            for identity in await self.store.read_identities(position - 1, AUDIT_READ_AHEAD):
                self.known.add(identity)
            stored = self.known.take(envelope.event_id)
        return stored_as_relayed(stored, envelope, position)


# /history pages: the default and the largest number of events one answer holds.
HISTORY_PAGE = 1000
HISTORY_MAX_PAGE = 10_000
_HISTORY_PARAMETERS = frozenset({"stream", "from_version", "correlation_id", "after", "limit"})


class HistoryQuery(msgspec.Struct, frozen=True):
    stream: str | None
    correlation_id: str | None
    from_version: int
    after: int
    limit: int


def _integer(query: Mapping[str, str], name: str, default: int, lowest: int, highest: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw[:40]!r}") from None
    if not lowest <= value <= highest:
        raise ValueError(f"{name} must be between {lowest} and {highest}, got {value}")
    return value


def history_query(query: Mapping[str, str]) -> HistoryQuery:
    """The parameters of one ``/history`` request, checked (ValueError with the reason otherwise)."""
    unknown = sorted(set(query) - _HISTORY_PARAMETERS)
    if unknown:
        known = ", ".join(sorted(_HISTORY_PARAMETERS))
        raise ValueError(f"unknown parameter {unknown[0]!r} (known: {known})")
    stream, correlation_id = query.get("stream"), query.get("correlation_id")
    if stream is not None and correlation_id is not None:
        raise ValueError("give stream or correlation_id, not both")
    if "from_version" in query and stream is None:
        raise ValueError("from_version needs stream")
    if stream == "" or correlation_id == "":
        raise ValueError("stream and correlation_id must not be empty")
    biggest = 2**63 - 1
    return HistoryQuery(
        stream=stream,
        correlation_id=correlation_id,
        from_version=_integer(query, "from_version", 1, 1, biggest),
        after=_integer(query, "after", 0, 0, biggest),
        limit=_integer(query, "limit", HISTORY_PAGE, 1, HISTORY_MAX_PAGE),
    )


class History:
    """``GET /history``: one page of stored events (``limit`` at most ``HISTORY_MAX_PAGE``, the LIMIT of
    the SQL), behind the API token (services/infra/api_auth.py)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def handle(self, request: web.Request) -> web.Response:
        try:
            asked = history_query(request.query)
        except ValueError as error:
            return web.json_response({"error": str(error)}, status=400)
        if asked.stream is not None:
            events = await self.store.read_stream(asked.stream, asked.from_version, asked.limit)
        elif asked.correlation_id is not None:
            events = await self.store.read_correlation(asked.correlation_id, asked.after, asked.limit)
        else:
            events = await self.store.read_batch(asked.after, asked.limit)
        body: list[dict[str, Any]] = [
            {"global_position": e.global_position, "recorded_at": e.recorded_at, "event": e.envelope}
            for e in events
        ]
        return web.Response(body=_encoder.encode(body), content_type="application/json")


async def run(settings: Settings) -> None:
    configure_logging(settings, "auditor")
    calm_cyclic_collector()  # each message decodes into many containers, none in a cycle (runtime.py)
    store = await EventStore.connect(settings.database_url)
    # /history reads as the reader role (its own URL if configured): it never needs to write.
    try:
        history_store = await EventStore.connect(settings.url_for("reader"), pool_size=2, duty="reader")
    except BaseException:
        await store.close()
        raise
    runtime = ServiceRuntime(settings, "auditor")
    check = await authenticator(settings)
    runtime.app.middlewares.append(guard(check))
    runtime.app.router.add_get("/history", History(history_store).handle)
    async with runtime:
        bus = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        bus.bodies = store.read_event  # events larger than a bus message are read from the store
        try:
            await bus.ensure_stream()
            known = KnownStored()
            notifications = AppendNotifications(settings.database_url)
            relay = Relay(
                store,
                bus,
                known,
                on_gap=functools.partial(_report_gap, runtime),
                notifications=notifications,
                pace_interval=settings.pace_interval,
            )
            runtime.add_detail("relay", relay.detail)
            # One replica walks the stream at a time; the others relay (JetStream keeps one of each event).
            audit_lock = SessionLock(settings.database_url, f"rollbook-audit {bus.stream}")
            audit = Audit(store, bus, known, lock=audit_lock)
            runtime.add_detail("audit", audit.detail)
            listener = asyncio.create_task(notifications.run(runtime.stopping), name="append-listener")
            # Released after the audit has saved its cursor, not with the other tasks.
            lock_released = asyncio.Event()
            lock_task = asyncio.create_task(audit_lock.run(lock_released), name="audit-lock")
            relay_task = asyncio.create_task(relay.run(runtime.stopping), name="relay")
            audit_task = asyncio.create_task(audit.run(runtime.stopping), name="audit")
            ready = asyncio.create_task(_ready_when_caught_up(runtime, relay))
            # Signed checkpoints of the Merkle tree over the log (docs/audit.md): the key is read now, so a
            # missing key file stops the auditor at start with its name.
            checkpointer = None
            if settings.checkpoint_interval > 0:
                checkpointer = checkpointer_for(store, settings, bus)
            checkpoints = asyncio.create_task(
                checkpoint_loop(checkpointer, settings, runtime.stopping)
                if checkpointer is not None
                else asyncio.sleep(0)
            )
            partitions = asyncio.create_task(
                keep_partitions_ahead(store, settings.events_partition_months, runtime.stopping)
            )
            try:
                await run_until_stopped(runtime, relay_task, audit_task)
            finally:
                for task in (ready, partitions, listener):
                    task.cancel()
                # The relay finishes the batch in hand and the audit its walk (their loops check
                # `stopping`); the audit saves its cursor before the lock's session ends.
                await asyncio.gather(
                    *(relay_task, audit_task, ready, checkpoints, partitions, listener),
                    return_exceptions=True,
                )
                lock_released.set()
                await asyncio.gather(lock_task, return_exceptions=True)
        finally:
            await bus.close()
            await store.close()
            await check.close()
            await history_store.close()


def _report_gap(runtime: ServiceRuntime, gap: str | None) -> None:
    """Not ready while the relay publishes again what the bus lost (the reason says which events)."""
    if not runtime.stopping.is_set():
        runtime.set_ready(gap is None, gap or "")


async def _ready_when_caught_up(runtime: ServiceRuntime, relay: Relay) -> None:
    await relay.caught_up.wait()
    runtime.set_ready()
    log.info("ready", position=relay.position)
