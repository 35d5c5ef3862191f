"""The bus: NATS JetStream through nats-py. One stream, a documented subject scheme, dedup by event id,
durable pull consumers with explicit ack, and a dead-letter subject. Full description: docs/bus.md.

Subjects (every token escaped with ``encode_token``, so Kubernetes names with dots stay one token)::

    <prefix>.ev.<partition>.<Kind>.<namespace>.<name>.<EventType>   events
    <prefix>.dlq.<consumer>                                           dead letters of one durable consumer

``<partition>`` is ``p<N>``, N = crc32(partition key) mod ``settings.bus_partitions``; the partition key is
the envelope's stream (``Kind/namespace/name``) unless the publisher passes the owning workload's stream
(e.g. the watcher passes the CloneSet for a pod), so all events of one workload share one partition.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar
from urllib.parse import unquote

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from services.infra.keyed import KeyedRunner
from services.infra.nats_auth import ADMIN, STREAM_MANAGERS, CredentialsError, connect_options
from services.infra.redact import redacted
from services.infra.retry import Stopped, retry_until_stopped
from services.infra.settings import Settings
from services.infra.ticks import sleep_to_tick
from services.model.events import Envelope, decode, encode

log = logging.getLogger(__name__)


async def _log_bus_error(error: Exception) -> None:
    """nats-py's error callback: a permissions violation (a subject this identity may not use) is logged,
    never silently dropped."""
    log.error("NATS: %s", error)


class Deferred:
    """What a handler returns when it settles the message itself, later: it acks the message once the work
    the message asked for is done, or naks it to have it redelivered (the planner: a wake-up is acked when
    the round that covers it has been appended, so a crash before that redelivers it)."""


DEFERRED = Deferred()


class Unacceptable(Exception):
    """What a handler raises for a message it must never act on (e.g. an event the store does not hold):
    dead-lettered at once with this reason, never retried."""


Handler = Callable[[Envelope, Msg], Awaitable[Deferred | None]]
# Reads the body of an event carried by reference: EventStore.read_event.
BodyReader = Callable[[uuid.UUID], Awaitable[Envelope | None]]


class EventReference(msgspec.Struct, frozen=True, kw_only=True):
    """What a message carries instead of an event larger than the bus's max_payload."""

    event_id: uuid.UUID
    stream: str
    stream_version: int
    type: str
    size: int  # bytes of the encoded event


class _CarriedPayload(msgspec.Struct):
    payload: msgspec.Raw


_carried_decoder = msgspec.json.Decoder(_CarriedPayload)


def carried_payload(headers: Mapping[str, str] | None, data: bytes) -> str:
    """The payload of the event a message (``headers``, ``data``) carries, exactly as it travelled (JSON
    text), to compare with the stored one; "" for an event carried by reference, whose body the consumer
    read from the store."""
    if (headers or {}).get(BODY_HEADER) == BODY_IN_STORE:
        return ""
    return bytes(_carried_decoder.decode(data).payload).decode()


_Decoded = TypeVar("_Decoded")


class Undecodable(ValueError):
    """Bytes that never become an event (or a reference to one): the message's dead letter says why."""


def event_reference(data: bytes) -> EventReference:
    """The reference a message with ``Rollbook-Body: store`` carries instead of its event (Undecodable)."""
    return _undecodable_as_such(_reference_decoder.decode, data)


def decode_event(data: bytes) -> Envelope:
    """The event a message carries (Undecodable, with the reason, for bytes that never decode)."""
    return _undecodable_as_such(decode, data)


def _undecodable_as_such(decoder: Callable[[bytes], _Decoded], data: bytes) -> _Decoded:
    try:
        return decoder(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise Undecodable(f"undecodable: {error}") from None
    except RecursionError as error:
        # JSON nested deeper than the decoder's recursion limit: as undecodable, and as final.
        raise Undecodable(f"undecodable: nested too deep to decode ({error})") from None


_reference_encoder = msgspec.json.Encoder()
_reference_decoder = msgspec.json.Decoder(EventReference)
# What must not run concurrently with (and keeps its order relative to) other messages: e.g. the pod.
OrderKey = Callable[[Envelope], Hashable]
# Called with each batch of messages fetched, before any is handled: where a handler's per-message reads
# can be made once for the batch. Its failure only costs that: the handler reads for itself.
Prepare = Callable[[Sequence[Msg]], Awaitable[None]]

# Headers a dead letter carries besides the original bytes.
DLQ_REASON = "Rollbook-Dlq-Reason"
DLQ_SUBJECT = "Rollbook-Dlq-Subject"
DLQ_STREAM_SEQ = "Rollbook-Dlq-Stream-Seq"
DLQ_DELIVERIES = "Rollbook-Dlq-Deliveries"
DLQ_CONSUMER = "Rollbook-Dlq-Consumer"
DLQ_MSG_ID = "Rollbook-Dlq-Msg-Id"
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"  # JetStream refuses the publish unless this stream stores it
STATUS_HEADER = "Status"  # what nats-py names a status message's code (e.g. 404) among its headers
# An event too large for one bus message travels by reference: this header says its body is in the
# event store, and the message carries an EventReference (docs/bus.md, "Events larger than a message").
BODY_HEADER = "Rollbook-Body"
BODY_IN_STORE = "store"
# Bytes of a message's max_payload kept for its headers (subject, Nats-Msg-Id, position, expected stream).
HEADER_ALLOWANCE = 4096
# How long a message in hand is reported in progress at most (from its fetch): far beyond any handler's
# legitimate time (the executor's longest is a 20 s wait for an earlier action plus its API retries and
# 60 s request timeouts), so only a hung handler reaches it; its message is then delivered again.
MAX_HELD_SECONDS = 300.0

# Seconds a consumer fetches nothing before it asks whether its durable still exists (lost with the
# stream when the bus lost its storage: services/auditor/bus_loss.py).
DURABLE_CHECK_IDLE = 5.0
# Seconds an idle consumer's pull request waits on the server before it is sent again. JetStream hands a
# waiting request each message as it comes, so this is no delay; it is what an idle consumer costs (a
# request and its expiry, per consumer: the planner runs 16, the executor 18). A stop or a reconnect
# (which may lose the request with its server) ends the wait at once (``pull``'s ``interrupts``).
IDLE_FETCH_SECONDS = 5.0
# Retry delays (seconds) after the 1st, 2nd, ... failed delivery; the last one repeats.
DEFAULT_RETRY_BACKOFF: tuple[float, ...] = (0.5, 2.0, 5.0, 15.0, 30.0)
_MAX_HEADER_CHARS = 2000
_MAX_MSG_ID_CHARS = 200  # of an original's Nats-Msg-Id copied into its dead letter

# Bytes kept as they are in a subject token; everything else is percent-escaped (UTF-8).
_TOKEN_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# A token cannot be empty (cluster-scoped objects have no namespace); a lone % is unambiguous.
_EMPTY_TOKEN = "%"


def nats_servers(nats_url: str) -> list[str]:
    """The servers of ``settings.nats_url``: one URL, or a cluster's, comma-separated."""
    return [url.strip() for url in nats_url.split(",") if url.strip()]


@functools.lru_cache(maxsize=65536)  # names and types repeat: publishing stays cheap per event
def encode_token(value: str) -> str:
    """Escape a value into one NATS subject token, reversibly (``web.v2`` -> ``web%2Ev2``, empty -> ``%``)."""
    if not value:
        return _EMPTY_TOKEN
    return "".join(chr(b) if b in _TOKEN_SAFE else f"%{b:02X}" for b in value.encode())


def decode_token(token: str) -> str:
    """Inverse of ``encode_token``."""
    return "" if token == _EMPTY_TOKEN else unquote(token, errors="strict")


def partition_of(partition_key: str, partitions: int) -> int:
    """The bus partition of a workload's stream ``Kind/namespace/name``: crc32 mod ``partitions``."""
    return zlib.crc32(partition_key.encode()) % partitions


class PublishError(Exception):
    """Some events of a ``publish_many`` were not stored by JetStream (the others were)."""

    def __init__(self, failures: list[tuple[str, BaseException]]) -> None:
        self.failures = failures
        first_id, first_error = failures[0]
        super().__init__(f"{len(failures)} event(s) not published; first {first_id}: {first_error!r}")


class PublishAck(msgspec.Struct):
    """JetStream's answer to a publish: where the message was stored, or the error it was refused with."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False  # an earlier message with its Nats-Msg-Id was stored within the dedup window
    error: dict[str, Any] | None = None


_publish_ack_decoder = msgspec.json.Decoder(PublishAck)
# One message to publish: subject, bytes, headers.
Outgoing = tuple[str, bytes, dict[str, str]]
# What became of one message of a pipelined publish: its ack, the error JetStream answered instead, or None
# when no answer came before the acks stalled (it may or may not be stored).
PublishOutcome = PublishAck | Exception | None


def publish_outcome(reply: Msg) -> PublishAck | Exception:
    """The ack (or error) JetStream answered a publish with, as nats-py's publish would raise it."""
    if not reply.data:  # a status instead of an ack (503: no stream stores the subject)
        return nats.js.errors.NoStreamResponseError()
    try:
        ack = _publish_ack_decoder.decode(reply.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        return nats.js.errors.APIError(description=f"unreadable publish ack: {error}")
    if ack.error is not None:
        try:
            nats.js.errors.APIError.from_error(ack.error)  # raises the error's class
        except nats.js.errors.APIError as error:
            return error
    return ack


@dataclass(frozen=True)
class EventSubject:
    """The parts of an event subject, decoded."""

    partition: int
    kind: str
    namespace: str
    name: str
    event_type: str


@dataclass(frozen=True)
class DeadLetter:
    """A message moved to the dead-letter subject, as read back by ``Bus.dead_letters``."""

    data: bytes  # the original message bytes, untouched
    reason: str
    original_subject: str
    stream_sequence: int
    deliveries: int
    consumer: str
    msg_id: str | None


@dataclass
class ConsumerStats:
    handled: int = 0  # handler returned, message acked (or to be settled by the handler: DEFERRED)
    retried: int = 0  # handler raised, message nak'ed for a later delivery
    dead_lettered: int = 0
    filtered: int = 0  # outside the filter subjects (a server < 2.10 ignores several filters): acked unread


class Bus:
    """One NATS connection and its JetStream context, scoped to settings.stream_name and subject_prefix."""

    def __init__(self, settings: Settings, nc: NatsClient, js: JetStreamContext) -> None:
        self.settings = settings
        self.nc = nc
        self.js = js
        self.prefix = settings.subject_prefix
        self.stream = settings.stream_name
        # Set by a service that consumes: where bodies of events carried by reference are read from.
        self.bodies: BodyReader | None = None
        # publish_pipelined: one inbox for every ack, the number the next message's reply subject ends
        # with, and a lock so that one call at a time reads the acks.
        self._acks: Subscription | None = None
        self._next_ack = 0
        self._pipeline = asyncio.Lock()
        # Whether this connection's identity creates and updates the stream (else it waits for it).
        self.manages_streams = True
        self.identity = ADMIN
        # Set when the connection is made again (and replaced by a fresh one): a pull request waiting on
        # the server may have been lost with the old connection, so consumers send theirs again.
        self.reconnected = asyncio.Event()

    def _on_reconnected(self) -> None:
        reconnected, self.reconnected = self.reconnected, asyncio.Event()
        reconnected.set()

    # --- connection -----------------------------------------------------------------------------------

    @classmethod
    async def connect(cls, settings: Settings, *, name: str = "rollbook", identity: str = ADMIN) -> Bus:
        """Connect to settings.nats_url (must be set: see services.infra.embedded.resolved_settings) as
        ``identity`` (services.infra.nats_auth: every service passes its own; tools and tests default to
        the admin identity). With no credentials directory configured, no credentials are sent."""
        if not settings.nats_url:
            raise ValueError(
                "Bus.connect needs a NATS URL; start embedded servers first (services.infra.embedded)"
            )
        options = connect_options(settings, identity)
        refused = asyncio.Event()
        made: list[Bus] = []  # the Bus, once made, told of reconnects

        async def on_reconnected() -> None:
            for bus in made:
                bus._on_reconnected()

        async def on_error(error: Exception) -> None:
            if "authorization violation" in str(error).lower():
                refused.set()
            await _log_bus_error(error)

        # nats-py retries a first connection for ever (max_reconnect_attempts=-1): a server that refuses
        # these credentials would never answer otherwise.
        connecting = asyncio.ensure_future(
            nats.connect(
                nats_servers(settings.nats_url),
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                connect_timeout=5,
                error_cb=on_error,
                reconnected_cb=on_reconnected,
                **options,
            )
        )
        waiting = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait({connecting, waiting}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            connecting.cancel()  # this call was cancelled: no connection left behind
            raise
        finally:
            waiting.cancel()
        if not connecting.done():
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
            raise CredentialsError(
                f"NATS at {redacted(settings.nats_url)} refused identity {identity!r}"
                + (
                    " (no credentials sent: set ROLLBOOK_NATS_CREDENTIALS_DIR)"
                    if "user" not in options
                    else ""
                )
            )
        nc = connecting.result()
        bus = cls(settings, nc, nc.jetstream(timeout=10))
        made.append(bus)
        # Without credentials (a server with no authentication) anyone may manage the stream, as before.
        bus.manages_streams = "user" not in options or identity in STREAM_MANAGERS
        bus.identity = identity
        return bus

    async def close(self) -> None:
        """Flush pending publishes and close the connection."""
        if not self.nc.is_closed:
            if self._acks is not None:
                # Acks of a window given up on may still sit in its queue, and draining waits until every
                # queued message is taken (nats-py's 30 s drain timeout): no ack is awaited any more.
                await self._acks.unsubscribe()
                self._acks = None
            await self.nc.drain()

    async def ensure_stream(self) -> None:
        """Create the stream over ``<prefix>.>`` or bring an existing one's settings up to date; an
        identity that does not manage streams (planner, executor, operator) waits until it exists."""
        if not self.manages_streams:
            await self._wait_for_stream()
            return
        max_age = max(float(self.settings.bus_max_age), 0.0)
        # JetStream refuses a duplicate window longer than the age limit.
        duplicate_window = float(self.settings.bus_dedup_window)
        if max_age:
            duplicate_window = min(duplicate_window, max_age)
        config = StreamConfig(
            name=self.stream,
            subjects=[f"{self.prefix}.>"],
            storage=StorageType.FILE,
            duplicate_window=duplicate_window,
            num_replicas=self.settings.bus_replicas,
            # The bus forgets: the event store is the record (docs/bus.md, "Retention").
            max_age=max_age or None,
            max_bytes=self.settings.bus_max_bytes if self.settings.bus_max_bytes > 0 else None,
            # Messages read by sequence (the audit) straight from any replica, without the API's JSON.
            allow_direct=True,
        )
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError as error:
            # "stream name already in use with a different configuration": update the mutable fields.
            if error.err_code != 10058:
                raise
            await self.js.update_stream(config)

    async def stream_info_or_none(self) -> Any:
        """The stream's info; None when it does not exist (deleted, or not made yet)."""
        try:
            return await self.js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            return None

    async def _wait_for_stream(self) -> None:
        delay, warned = 0.1, False
        while True:
            try:
                await self.js.stream_info(self.stream)
                return
            except nats.js.errors.NotFoundError:
                if not warned:
                    log.warning("waiting for the auditor to create stream %s", self.stream)
                    warned = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    # --- subjects -------------------------------------------------------------------------------------

    def partition_of(self, partition_key: str) -> int:
        """Stable partition of a workload (crc32, the same in every process and Python version)."""
        return partition_of(partition_key, self.settings.bus_partitions)

    def subject_for(self, envelope: Envelope, *, partition_key: str | None = None) -> str:
        """``<prefix>.ev.p<N>.<Kind>.<namespace>.<name>.<EventType>`` for an envelope of stream K/ns/name."""
        parts = envelope.stream.split("/", 2)
        if len(parts) != 3:
            raise ValueError(f"event stream {envelope.stream!r} is not Kind/namespace/name")
        kind, namespace, name = parts
        partition = self.partition_of(partition_key or envelope.stream)
        tokens = [encode_token(t) for t in (kind, namespace, name, envelope.type)]
        return ".".join([self.prefix, "ev", f"p{partition}", *tokens])

    def event_filter(
        self,
        *,
        partition: int | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        event_type: str | None = None,
    ) -> str:
        """A filter subject over events; ``None`` parts match anything (``*``)."""
        tokens = [
            "*" if partition is None else f"p{partition}",
            *("*" if v is None else encode_token(v) for v in (kind, namespace, name, event_type)),
        ]
        return ".".join([self.prefix, "ev", *tokens])

    def parse_event_subject(self, subject: str) -> EventSubject:
        tokens = subject.split(".")
        if len(tokens) != 7 or tokens[0] != self.prefix or tokens[1] != "ev" or not tokens[2].startswith("p"):
            raise ValueError(f"not an event subject of {self.prefix!r}: {subject!r}")
        return EventSubject(int(tokens[2][1:]), *(decode_token(t) for t in tokens[3:]))

    def dead_letter_subject(self, consumer: str) -> str:
        return f"{self.prefix}.dlq.{encode_token(consumer)}"

    async def dead_letter(
        self,
        consumer: str,
        *,
        subject: str,
        stream_sequence: int,
        deliveries: int,
        data: bytes,
        headers: Mapping[str, str] | None,
        reason: str,
    ) -> None:
        """Publish the message at ``stream_sequence`` (``subject``, ``data``, its ``headers``) to
        ``consumer``'s dead-letter subject with the reason it could not be handled."""
        clean_reason = " ".join(reason.split())[:_MAX_HEADER_CHARS]  # headers are one line
        # The original's id as it came, cut: anyone who may publish chooses its length.
        original_id = " ".join(((headers or {}).get(MSG_ID) or "").split())[:_MAX_MSG_ID_CHARS]
        dead_letter_headers = {
            DLQ_REASON: clean_reason,
            DLQ_SUBJECT: subject,
            DLQ_STREAM_SEQ: str(stream_sequence),
            DLQ_DELIVERIES: str(deliveries),
            DLQ_CONSUMER: consumer,
            # Publishing twice (crash between publish and settling) stores one dead letter.
            MSG_ID: f"dlq.{consumer}.{stream_sequence}",
        }
        if original_id:
            dead_letter_headers[DLQ_MSG_ID] = original_id
        # The headers come on top of the original's bytes: cut what would not fit in one message (the
        # original stays in the stream at the sequence the dead letter names).
        header_bytes = sum(len(k) + len(v.encode()) + 4 for k, v in dead_letter_headers.items()) + 64
        data = data[: max(self.nc.max_payload - header_bytes, 0)]
        await self.js.publish(
            self.dead_letter_subject(consumer), data, stream=self.stream, headers=dead_letter_headers
        )
        log.error(
            "dead-lettered stream seq %s from %s (consumer %s): %s",
            stream_sequence,
            subject,
            consumer,
            clean_reason,
        )

    # --- publishing -----------------------------------------------------------------------------------

    def event_message(self, envelope: Envelope) -> tuple[bytes, dict[str, str]]:
        """The bytes and headers of the message carrying ``envelope``: the encoded event, or, when it is
        larger than the server's max_payload (less ``HEADER_ALLOWANCE``), an ``EventReference`` with
        ``Rollbook-Body: store``: the event itself is in the store, consumers read it from there."""
        data = encode(envelope)
        headers = {MSG_ID: str(envelope.event_id)}
        if len(data) + HEADER_ALLOWANCE > self.nc.max_payload:
            reference = EventReference(
                event_id=envelope.event_id,
                stream=envelope.stream,
                stream_version=envelope.stream_version,
                type=envelope.type,
                size=len(data),
            )
            data = _reference_encoder.encode(reference)
            headers[BODY_HEADER] = BODY_IN_STORE
        return data, headers

    async def publish(self, envelope: Envelope, *, partition_key: str | None = None) -> bool:
        """Publish one event and wait for JetStream's ack. Returns True when it was a duplicate (an event with
        this event_id was already stored within the dedup window) and so was dropped by the server."""
        data, headers = self.event_message(envelope)
        ack = await self.js.publish(
            self.subject_for(envelope, partition_key=partition_key),
            data,
            stream=self.stream,
            headers=headers,
        )
        return bool(ack.duplicate)

    async def publish_many(
        self,
        envelopes: Iterable[Envelope],
        *,
        partition_key: Callable[[Envelope], str] | None = None,
        stall: float = 10.0,
    ) -> list[bool]:
        """Publish many events pipelined (``publish_pipelined``) and wait for every ack. Returns the
        duplicate flag per event, in order. Raises PublishError naming the events JetStream did not store
        (or did not answer for within ``stall`` seconds); publishing them again is safe (dedup by
        event_id)."""
        ids: list[str] = []
        messages: list[Outgoing] = []
        for envelope in envelopes:
            key = partition_key(envelope) if partition_key else None
            data, headers = self.event_message(envelope)
            ids.append(str(envelope.event_id))
            messages.append((self.subject_for(envelope, partition_key=key), data, headers))
        outcomes = await self.publish_pipelined(messages, stall=stall)
        failures: list[tuple[str, BaseException]] = []
        duplicates: list[bool] = []
        for event_id, outcome in zip(ids, outcomes, strict=True):
            if isinstance(outcome, PublishAck):
                duplicates.append(outcome.duplicate)
            else:
                failures.append((event_id, outcome or TimeoutError(f"no JetStream ack for {stall:g}s")))
        if failures:
            raise PublishError(failures)
        return duplicates

    async def publish_pipelined(self, messages: Sequence[Outgoing], *, stall: float) -> list[PublishOutcome]:
        """Publish ``messages`` to the stream in order without waiting between them, then collect
        JetStream's answers: one outcome per message, in order. Each message asks for its ack on a reply
        subject of its own under one inbox subscribed once, and the acks are taken from that
        subscription's queue as ``pull`` takes messages: no future, callback, task or JSON dict per
        message (nats-py's publish_async spent about twice the CPU per message). An outcome is None when
        no ack came for ``stall`` seconds after the last one (the connection dropped, or the stream leader
        died, with publishes in flight: nats-py has no timeout of its own for them). Each message's
        headers get ``Nats-Expected-Stream`` (in place), as nats-py's ``publish(stream=...)`` adds it."""
        async with self._pipeline:
            if self._acks is None:
                self._acks = await self.nc.subscribe(f"{self.nc.new_inbox()}.*")
            acks = self._acks
            prefix = acks.subject[:-1]
            first = self._next_ack
            self._next_ack += len(messages)
            for number, (subject, data, headers) in enumerate(messages, start=first):
                headers[EXPECTED_STREAM] = self.stream
                await self.nc.publish(subject, data, reply=f"{prefix}{number}", headers=headers)
            outcomes: list[PublishOutcome] = [None] * len(messages)
            queue: asyncio.Queue[Msg] = acks._pending_queue
            waiting = len(messages)
            while waiting:
                if queue.empty():
                    try:
                        async with asyncio.timeout(stall):
                            reply = _dequeued(acks, await queue.get())
                    except TimeoutError:
                        break  # the rest stay None
                else:
                    reply = _dequeued(acks, queue.get_nowait())
                number_text = reply.subject[len(prefix) :]
                index = int(number_text) - first if number_text.isdigit() else -1
                if not 0 <= index < len(messages) or outcomes[index] is not None:
                    continue  # a late ack for an earlier call's message, whose caller gave up on it
                outcomes[index] = publish_outcome(reply)
                waiting -= 1
            return outcomes

    # --- consuming ------------------------------------------------------------------------------------

    def consumer(
        self,
        durable: str,
        filter_subjects: Sequence[str] | str,
        handler: Handler,
        *,
        batch: int = 100,
        ordered: bool = False,
        ack_wait: float = 30.0,
        retry_backoff: Sequence[float] = DEFAULT_RETRY_BACKOFF,
        fetch_timeout: float = IDLE_FETCH_SECONDS,
        concurrency: int = 1,
        order_key: OrderKey | None = None,
        prepare: Prepare | None = None,
    ) -> Consumer:
        """A durable pull consumer; call ``await c.run()`` (until ``c.stop()`` or cancellation).

        Several processes may run the same durable to split the work. ``ordered=True`` allows one
        unacknowledged message at a time (max_ack_pending=1), so the durable sees its messages strictly in
        stream order, a failing one retried before the next: use one such durable per partition.

        ``concurrency`` > 1 handles up to that many messages at once in this process; messages with the
        same ``order_key`` (default: each message its own) are handled one after another in delivery
        order (``services.infra.keyed.KeyedRunner``). ``prepare`` is awaited with each fetched batch
        first."""
        filters = [filter_subjects] if isinstance(filter_subjects, str) else list(filter_subjects)
        concurrency = 1 if ordered else max(1, concurrency)
        return Consumer(
            self,
            durable,
            filters,
            handler,
            batch=1 if ordered else batch,
            max_ack_pending=1 if ordered else max(1000, batch * 4, concurrency * 4),
            ack_wait=ack_wait,
            retry_backoff=tuple(retry_backoff) or (0.0,),
            fetch_timeout=fetch_timeout,
            concurrency=concurrency,
            order_key=order_key,
            prepare=prepare,
        )

    async def consume(
        self, durable: str, filter_subjects: Sequence[str] | str, handler: Handler, **options: object
    ) -> None:
        """Shorthand for ``await bus.consumer(...).run()``."""
        await self.consumer(durable, filter_subjects, handler, **options).run()  # type: ignore[arg-type]

    async def dead_letters(self, consumer: str, *, limit: int = 1000, wait: float = 1.0) -> list[DeadLetter]:
        """Read (without removing) the dead letters of one consumer, oldest first."""
        sub = await self.js.pull_subscribe(
            self.dead_letter_subject(consumer),
            stream=self.stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0
            ),
        )
        letters: list[DeadLetter] = []
        try:
            wanted = min(limit, (await sub.consumer_info()).num_pending or 0)
            while len(letters) < wanted:
                try:
                    msgs = await sub.fetch(min(256, wanted - len(letters)), timeout=wait)
                except (TimeoutError, nats.errors.TimeoutError):  # nats-py raises either
                    break
                for msg in msgs:
                    h = msg.headers or {}
                    letters.append(
                        DeadLetter(
                            data=msg.data,
                            reason=h.get(DLQ_REASON, ""),
                            original_subject=h.get(DLQ_SUBJECT, ""),
                            stream_sequence=int(h.get(DLQ_STREAM_SEQ, "0")),
                            deliveries=int(h.get(DLQ_DELIVERIES, "0")),
                            consumer=h.get(DLQ_CONSUMER, ""),
                            msg_id=h.get(DLQ_MSG_ID),
                        )
                    )
        finally:
            await sub.unsubscribe()
        return letters


async def _quietly(work: Awaitable[object]) -> None:
    """Await ``work``, ignoring its failure (an in-progress signal while the bus itself is down)."""
    try:
        await work
    except Exception:
        log.debug("in-progress signal not sent", exc_info=True)


def in_progress_due(
    heard: dict[int, float],
    now: float,
    period: float,
    fetched: dict[int, float] | None = None,
    max_held: float = float("inf"),
) -> list[int]:
    """The messages in hand (stream sequence -> when JetStream last heard of them) to report in progress
    now: those not heard of for ``period`` seconds or more, unless held ``max_held`` seconds or more
    since they were ``fetched``: a handler hung that long is not covered any more, so JetStream hands
    its message out again after ack_wait instead of never."""
    return sorted(
        sequence
        for sequence, at in heard.items()
        if now - at >= period and (fetched is None or now - fetched.get(sequence, now) < max_held)
    )


# Pull-request statuses (a "Status" header on an empty message): the request is over (404: nothing there
# for a no-wait request; 408: it expired; 409: the server turned it away, e.g. the durable's limits or a
# leader change), or an idle heartbeat. None is a message; any other status is an error (as in nats-py).
_REQUEST_OVER = frozenset({"404", "408", "409"})
_NO_MESSAGES = "404"
_EXPIRED = "408"
_HEARTBEAT = "100"


def _dequeued(sub: Subscription, msg: Msg) -> Msg:
    """Account for a message taken from a subscription's queue as next_msg does: the queue's byte count,
    and its unfinished count (a subscription's drain, hence the connection's, waits for it to reach 0)."""
    sub._pending_queue.task_done()
    sub._pending_size -= len(msg.data)
    return msg


async def pull(
    sub: JetStreamContext.PullSubscription,
    batch: int,
    wait: float,
    interrupts: Sequence[asyncio.Event] = (),
) -> list[Msg]:
    """``sub.fetch(batch, timeout=wait)``, with nats-py's requests: take what an earlier request left
    queued; a no-wait request for what is there; if nothing came, one request waiting until ``wait`` is
    over, which returns with the first message and what follows it before the request ends. Without its
    cost per message: nats-py's fetch awaits every message of a batch in a task of its own (a uuid4
    name, a timer). Here a message already received is taken from the subscription's queue at once;
    only an empty queue is awaited. Raises nats.errors.TimeoutError when no message came within
    ``wait`` seconds, nats.errors.ConnectionClosedError when the connection is closed, and the error
    of an unexpected status (e.g. 503 once the durable is gone) only when no message came before it:
    those that came are returned (raising would leave them unacked until ack_wait). Any of
    ``interrupts`` set ends the wait as ``wait`` running out does: what came is returned, else
    nats.errors.TimeoutError; what the request brings later is taken by the next call (a leftover)."""
    # What nats-py's fetch reads: the subscription behind the pull subscription, the durable's "next
    # message" subject and the inbox the messages come to.
    inner: Subscription = sub._sub
    queue: asyncio.Queue[Msg] = inner._pending_queue
    if sub._nc.is_closed:
        raise nats.errors.ConnectionClosedError
    deadline = time.monotonic() + wait
    msgs: list[Msg] = []
    error_status: Msg | None = None  # an unexpected status that ended the request

    def taken(msg: Msg) -> Msg:
        return _dequeued(inner, msg)

    def take(msg: Msg, waiting_since: float | None) -> bool:
        """Keep a message; False when the request it answers is over. ``waiting_since``: when the
        waiting request (no no_wait, expiring at the deadline) was sent, if that is the one answered."""
        nonlocal error_status
        status = None if msg.data else (msg.headers or {}).get(STATUS_HEADER)
        if status is None:
            msgs.append(msg)
            return True
        if status == _HEARTBEAT:
            return True
        if waiting_since is not None and (
            # The server answers 404 only to a no-wait request, and a waiting request's 408 once it has
            # expired: a 404, or a 408 well before the expiry, was left by an earlier request (one that
            # outlived the call that sent it). nats-py's fetch also lets its waiting request outlast one.
            status == _NO_MESSAGES
            or (status == _EXPIRED and time.monotonic() < (waiting_since + deadline) / 2)
        ):
            return True
        if status in _REQUEST_OVER:
            return False
        error_status = msg
        return False

    def interrupted() -> bool:
        return any(event.is_set() for event in interrupts)

    async def next_queued(remaining: float) -> Msg | None:
        """The next message queued within ``remaining`` seconds, None on the deadline or an interrupt."""
        if not interrupts:
            try:
                async with asyncio.timeout(remaining):
                    return await queue.get()  # a timeout leaves the message queued
            except TimeoutError:
                return None
        getter = asyncio.ensure_future(queue.get())
        waits = [getter, *(asyncio.ensure_future(event.wait()) for event in interrupts)]
        try:
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        # A get that completed before its cancel holds a message taken off the queue: keep it.
        return getter.result() if getter.done() and not getter.cancelled() else None

    async def collect(waiting_since: float | None = None) -> None:
        """Take messages until ``batch``, the request's end, the deadline, or an interrupt."""
        while len(msgs) < batch:
            if queue.empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or interrupted():
                    return
                queued = await next_queued(remaining)
                if queued is None:
                    return
                msg = taken(queued)
            else:
                msg = taken(queue.get_nowait())
            if not take(msg, waiting_since):
                return

    def nothing_came() -> NoReturn:
        if error_status is not None:
            nats.js.errors.APIError.from_msg(error_status)  # raises the status's error
        if sub._nc.is_closed:  # nats-py's next_msg tells a closed connection from a timeout too
            raise nats.errors.ConnectionClosedError
        raise nats.errors.TimeoutError

    while not queue.empty() and len(msgs) < batch:
        # Left by an earlier request that outlived its fetch; a status there answered that request.
        leftover = taken(queue.get_nowait())
        if leftover.data or STATUS_HEADER not in (leftover.headers or {}):
            take(leftover, None)
    if len(msgs) < batch:
        request: dict[str, object] = {"batch": batch - len(msgs), "no_wait": True}
        if not msgs:
            request["expires"] = int(wait * 1_000_000_000) - 100_000
        await sub._nc.publish(sub._nms, json.dumps(request).encode(), sub._deliver)
        await collect()
    if msgs:
        return msgs
    remaining = deadline - time.monotonic()
    if remaining <= 0.0001 or error_status is not None or interrupted():
        nothing_came()
    request = {"batch": batch, "expires": int(remaining * 1_000_000_000) - 100_000}
    await sub._nc.publish(sub._nms, json.dumps(request).encode(), sub._deliver)
    await collect(waiting_since=time.monotonic())
    if not msgs:
        nothing_came()
    return msgs


def _queued_messages(sub: JetStreamContext.PullSubscription) -> list[Msg]:
    """Take every message left in the subscription's queue (statuses dropped)."""
    inner: Subscription = sub._sub
    queue: asyncio.Queue[Msg] = inner._pending_queue
    left: list[Msg] = []
    while not queue.empty():
        msg = _dequeued(inner, queue.get_nowait())
        if msg.data or STATUS_HEADER not in (msg.headers or {}):
            left.append(msg)
    return left


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` matches one token, a final ``>`` one or more."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or (token != "*" and token != tokens[index]):
            return False
    return len(tokens) == len(wanted)


@dataclass
class Consumer:
    """Runs one durable pull consumer. Use ``Bus.consumer`` to build it."""

    bus: Bus
    durable: str
    filter_subjects: list[str]
    handler: Handler
    batch: int
    max_ack_pending: int
    ack_wait: float
    retry_backoff: tuple[float, ...]
    fetch_timeout: float
    concurrency: int = 1
    order_key: OrderKey | None = None
    prepare: Prepare | None = None
    stats: ConsumerStats = field(default_factory=ConsumerStats)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _in_progress: asyncio.Future[None] | None = None
    # Messages in hand (fetched, not yet settled) -> when JetStream last heard of them (monotonic): each
    # is told "in progress" before its ack_wait runs out, so ack_wait bounds only how long the messages
    # of a consumer that died take to come back, not how long a handler may take.
    _held: dict[int, tuple[Msg, float]] = field(default_factory=dict)
    _fetched: dict[int, float] = field(default_factory=dict)  # when each message in hand was fetched
    _overdue: set[int] = field(default_factory=set)  # held past MAX_HELD_SECONDS (warned once each)

    def stop(self) -> None:
        """Stop fetching; the message being handled finishes, the rest of the batch goes back at once."""
        self._stopping.set()

    async def ensure(self) -> None:
        """Create the durable consumer, or update it to this configuration (idempotent, shared by workers)."""
        filters = self.filter_subjects
        config = ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.ack_wait,
            max_ack_pending=self.max_ack_pending,
            # Redeliveries are capped by us (dead letter after settings.max_deliver), not by the server,
            # which would silently stop delivering.
            max_deliver=-1,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )
        await self.bus.js.add_consumer(self.bus.stream, config)

    async def run(self) -> None:
        """Fetch and handle until ``stop()`` or cancellation; never raises for a bad message."""
        await self.ensure()
        sub = await self.bus.js.pull_subscribe_bind(self.durable, stream=self.bus.stream)
        runner = KeyedRunner(self.concurrency) if self.concurrency > 1 else None
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"{self.durable}-in-progress")
        looked = time.monotonic()  # when the durable was last known to exist
        try:
            while not self._stopping.is_set():
                wanted = self.batch
                if runner is not None:
                    # Fetch only what can start now: a fetched message's ack_wait is already running.
                    await runner.wait_for_space()
                    wanted = min(self.batch, runner.free)
                try:
                    msgs = await pull(sub, wanted, self.fetch_timeout, (self._stopping, self.bus.reconnected))
                except (TimeoutError, nats.errors.TimeoutError):  # nats-py raises either
                    # A durable deleted with its stream answers some pulls as over (409), not as an
                    # error: an idle consumer looks now and then whether it is still there.
                    if time.monotonic() - looked >= DURABLE_CHECK_IDLE:
                        looked = time.monotonic()
                        if await self._durable_gone():
                            log.error("consumer %s is gone from the bus; making it again", self.durable)
                            sub = await self._bind_again(sub)
                    continue
                except nats.errors.ConnectionClosedError:
                    log.warning("bus connection closed; consumer %s stops", self.durable)
                    return
                except Exception as error:
                    if await self._durable_gone():
                        # The bus lost its storage, or the stream was deleted: the durable went with it,
                        # and no fetch will ever succeed again. Make it again (on the stream the auditor
                        # makes again) from the stream's start: the relay publishes again what was lost.
                        log.error("consumer %s is gone from the bus; making it again", self.durable)
                        sub = await self._bind_again(sub)
                        continue
                    log.warning("fetch failed on consumer %s; retrying: %r", self.durable, error)
                    await asyncio.sleep(1.0)
                    continue
                fetched = time.monotonic()
                for msg in msgs:
                    self._held[msg.metadata.sequence.stream] = (msg, fetched)
                    self._fetched[msg.metadata.sequence.stream] = fetched
                if self.prepare is not None:
                    try:
                        await self.prepare(msgs)
                    except Exception:  # the handlers read for themselves then
                        log.warning("preparing a batch failed on consumer %s", self.durable, exc_info=True)
                for index, msg in enumerate(msgs):
                    if self._stopping.is_set():
                        await self._give_back(msgs[index:])
                        break
                    if runner is None:
                        await self._settle(msg)
                    else:
                        await runner.submit(
                            self._order_key(msg), functools.partial(self._settle_in_turn, msg)
                        )
            if runner is not None:
                await runner.join()  # the messages in hand finish; those queued behind them go back
            # Messages an interrupted pull request brought after it stopped waiting go back at once, not
            # after ack_wait.
            await self._give_back(_queued_messages(sub))
        except asyncio.CancelledError:
            if runner is not None:
                await runner.cancel()
            raise
        finally:
            heartbeat.cancel()
            self._held.clear()
            self._fetched.clear()
            self._overdue.clear()
            try:
                await sub.unsubscribe()
            except Exception:  # the connection may be gone already; nothing to release then
                log.debug("unsubscribe failed", exc_info=True)

    async def _durable_gone(self) -> bool:
        """Whether JetStream no longer knows this durable (or its stream); False when it cannot tell."""
        try:
            await self.bus.js.consumer_info(self.bus.stream, self.durable)
        except nats.js.errors.NotFoundError:
            return True
        except Exception:  # unreachable, or no leader yet: not known to be gone
            return False
        return False

    async def _bind_again(self, sub: JetStreamContext.PullSubscription) -> JetStreamContext.PullSubscription:
        """Make the stream (or wait for it) and the durable again, and bind a new pull subscription; the
        old one is returned when that fails (tried again on the next failed fetch)."""
        try:
            async with asyncio.timeout(5.0):  # a stream not made yet: the next failed fetch looks again
                await self.bus.ensure_stream()
            await self.ensure()
            bound = await self.bus.js.pull_subscribe_bind(self.durable, stream=self.bus.stream)
        except Exception as error:
            log.warning("could not make consumer %s again yet: %r", self.durable, error)
            await asyncio.sleep(1.0)
            return sub
        try:
            await sub.unsubscribe()
        except Exception:  # the connection may have dropped it already
            log.debug("unsubscribe failed", exc_info=True)
        return bound

    async def _heartbeat(self) -> None:
        """Tell JetStream every message in hand is still in progress, a third of ack_wait after it last
        heard of it: messages queued behind their key or handled slowly are not handed to another consumer
        while this one lives."""
        period = self.ack_wait / 3
        while True:
            # On a grid shared by the process's consumers (services/infra/ticks.py): one wake-up for all.
            await sleep_to_tick(period / 2)
            now = time.monotonic()
            heard = {s: at for s, (_, at) in self._held.items()}
            covered = in_progress_due(heard, now, period, self._fetched, MAX_HELD_SECONDS)
            for sequence in set(in_progress_due(heard, now, period)) - set(covered) - self._overdue:
                self._overdue.add(sequence)
                log.warning(
                    "message held %.0fs on consumer %s: no longer reported in progress, so it is "
                    "delivered again after ack_wait",
                    now - self._fetched.get(sequence, now),
                    self.durable,
                )
            due = [self._held[s][0] for s in covered]
            for msg in due:
                self._held[msg.metadata.sequence.stream] = (msg, now)
            for msg in due:
                await _quietly(msg.in_progress())  # a lost connection: the message comes back anyway

    async def _give_back(self, msgs: Sequence[Msg]) -> None:
        for msg in msgs:
            self._held.pop(msg.metadata.sequence.stream, None)
            self._fetched.pop(msg.metadata.sequence.stream, None)
            self._overdue.discard(msg.metadata.sequence.stream)
            try:
                await msg.nak()
            except Exception:
                log.debug("nak on stop failed", exc_info=True)

    def _order_key(self, msg: Msg) -> Hashable:
        if self.order_key is not None:
            try:
                return self.order_key(decode(msg.data))
            except Exception:  # undecodable or unexpected: _handle settles it; it needs no order
                pass
        return ("message", msg.metadata.sequence.stream)

    async def _settle_in_turn(self, msg: Msg) -> None:
        if self._stopping.is_set():
            await self._give_back([msg])
            return
        await self._settle(msg)

    async def _settle(self, msg: Msg) -> None:
        try:
            await self._handle(msg)
        except Exception:
            # Acking or dead-lettering failed (connection trouble): the message stays unacked and comes
            # back after ack_wait. Never let it stop the consumer.
            log.exception("could not settle message on %s (consumer %s)", msg.subject, self.durable)
        finally:
            self._held.pop(msg.metadata.sequence.stream, None)
            self._fetched.pop(msg.metadata.sequence.stream, None)
            self._overdue.discard(msg.metadata.sequence.stream)

    async def _handle(self, msg: Msg) -> None:
        if len(self.filter_subjects) > 1 and not any(
            subject_matches(pattern, msg.subject) for pattern in self.filter_subjects
        ):
            # NATS before 2.10 ignores a consumer's several filter subjects and delivers the whole stream;
            # the handler still sees only what it asked for.
            await msg.ack()
            self.stats.filtered += 1
            return
        deliveries = msg.metadata.num_delivered
        max_deliver = self.bus.settings.max_deliver
        try:
            if (msg.headers or {}).get(BODY_HEADER) == BODY_IN_STORE:
                found = await self._read_referenced(msg)
                if found is None:
                    return  # dead-lettered with the reason, or given back because we stop
                envelope = found
            else:
                envelope = decode_event(msg.data)
        except Undecodable as error:
            # Undecodable bytes never become decodable: dead-letter on the first delivery.
            await self._dead_letter(msg, str(error))
            return
        if deliveries > max_deliver:
            # Earlier deliveries were never settled (the process died or ack_wait passed while handling).
            await self._dead_letter(msg, f"delivered {deliveries} times without being settled")
            return
        try:
            outcome = await self._handle_waiting_out_outages(envelope, msg)
        except Stopped:
            await msg.nak()  # stopping while the store is still down: the next process handles it
            return
        except Unacceptable as refused:
            await self._dead_letter(msg, f"refused: {refused}")
            return
        except Exception as error:
            reason = f"handler failed on delivery {deliveries}: {type(error).__name__}: {error}"
            if deliveries >= max_deliver:
                await self._dead_letter(msg, reason)
            else:
                delay = self.retry_backoff[min(deliveries, len(self.retry_backoff)) - 1]
                log.warning("%s; retrying in %.1fs (event %s)", reason, delay, envelope.event_id)
                self.stats.retried += 1
                await msg.nak(delay=delay)
            return
        if outcome is not DEFERRED and not msg.is_acked:  # the handler may settle the message itself
            await msg.ack()
        self.stats.handled += 1

    async def _read_referenced(self, msg: Msg) -> Envelope | None:
        """The event a reference message stands for, read from the store (waiting out a store outage);
        None when it was dead-lettered (no store to read from, or no such event) or given back."""
        reference = event_reference(msg.data)
        bodies = self.bus.bodies
        if bodies is None:
            await self._dead_letter(
                msg,
                f"event {reference.event_id} ({reference.size} bytes) is carried by reference to the event "
                "store, and this consumer reads no store",
            )
            return None
        try:
            envelope = await retry_until_stopped(
                lambda: bodies(reference.event_id),
                what=f"consumer {self.durable} body",
                stopping=self._stopping,
            )
        except Stopped:
            await msg.nak()
            return None
        if envelope is None:
            await self._dead_letter(msg, f"referenced event {reference.event_id} is not in the event store")
        return envelope

    async def _handle_waiting_out_outages(self, envelope: Envelope, msg: Msg) -> Deferred | None:
        """Run the handler; while it fails because the store or the bus is unreachable (a restart, a
        connection lost mid-batch), retry it here with backoff, telling JetStream the message is still in
        progress, instead of spending its deliveries toward the dead-letter subject: an outage is not the
        message's fault, and every other message would fail the same way meanwhile."""

        async def attempt() -> Deferred | None:
            return await self.handler(envelope, msg)

        def still_working(error: BaseException, attempt_number: int) -> None:
            self.stats.retried += 1
            self._in_progress = asyncio.ensure_future(_quietly(msg.in_progress()))

        return await retry_until_stopped(
            attempt, what=f"consumer {self.durable}", stopping=self._stopping, on_retry=still_working
        )

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        meta = msg.metadata
        await self.bus.dead_letter(
            self.durable,
            subject=msg.subject,
            stream_sequence=meta.sequence.stream,
            deliveries=meta.num_delivered,
            data=msg.data,
            headers=msg.headers,
            reason=reason,
        )
        await msg.term()
        self.stats.dead_lettered += 1
