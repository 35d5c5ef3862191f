"""The auditor: the outbox relay (store -> bus), the audit of the bus (bus -> store), and the history API
(docs/services.md, "auditor" and "Postgres first, then the bus").

Relay. Services append to Postgres only. The relay reads the store in global_position order (read_batch
never skips: the store serialises writers) and publishes each event with Nats-Msg-Id = event_id and a
``Rollbook-Position`` header. After a crash it resumes from the position in the last message of the
JetStream stream: one connection publishes in order, so everything before that message was stored;
whatever it republishes beyond is dropped by the server's dedup window and by idempotent consumers.

Audit. A durable consumer over every event subject stores each event it sees with
``append_many`` (ON CONFLICT (event_id) DO NOTHING): an event someone published directly is stored too.
A different event claiming the same (stream, version) is a conflict: logged, counted and dead-lettered.

History. ``GET /history?stream=...`` | ``?correlation_id=...`` | ``?after=<position>&limit=N`` returns the
stored events as JSON, in global order.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import structlog
from aiohttp import web
from nats.aio.msg import Msg

from services.infra.bus import BODY_HEADER, Bus
from services.infra.checkpoints import checkpoint_loop
from services.infra.consumer_service import report_consumer_lag
from services.infra.metrics import (
    AUDIT_INGESTED,
    EVENTS_HANDLED,
    RELAY_POSITION,
    RELAY_PUBLISHED,
    RELAY_REFERENCES,
    RETRIES,
)
from services.infra.retry import DEFAULT_BACKOFF, Stopped, is_transient, retry_until_stopped, wait_or_stop
from services.infra.runtime import ServiceRuntime, configure_logging, run_until_stopped
from services.infra.settings import Settings
from services.infra.store import ConcurrencyError, EventStore, StoredEvent
from services.model.events import Envelope
from services.model.streams import workload_stream

log = structlog.get_logger("auditor")

POSITION_HEADER = "Rollbook-Position"
DURABLE = "auditor"
RELAY_BATCH = 500
_POLL_MIN = 0.02
_POLL_MAX = 0.1
# Seconds with no new JetStream ack for a batch in flight before the rest of it counts as lost and is
# published again (nats-py's async publish has no timeout of its own: a connection lost with publishes in
# flight, or a stream leader killed holding them, would leave them waiting forever). A stall, not a total:
# a large batch acked slowly on a busy machine keeps going, while the acks lost with a stream leader cost
# this long, not the 10 s a bound on the whole batch needed.
PUBLISH_ACK_STALL = 2.0
_RESUME_SCAN = 1000  # messages to look back for a position header (dead letters carry none)
_encoder = msgspec.json.Encoder()


def partition_key(envelope: Envelope) -> str:
    """All streams of one workload share its bus partition (so one planner partition sees them all)."""
    parts = envelope.stream.split("/")
    return workload_stream(envelope.stream) if len(parts) > 3 else envelope.stream


class Relay:
    def __init__(self, store: EventStore, bus: Bus) -> None:
        self.store = store
        self.bus = bus
        self.position = 0
        self.caught_up = asyncio.Event()
        self.retrying: str | None = None  # the error the relay is waiting out, None while it flows

    def detail(self) -> dict[str, Any]:
        """``details.relay`` of /readyz."""
        return {"position": self.position, "retrying": self.retrying}

    async def resume_position(self) -> int:
        """The position carried by the newest relayed message in the stream (0 for an empty stream)."""
        try:
            info = await self.bus.js.stream_info(self.bus.stream)
        except nats.js.errors.NotFoundError:
            return 0
        last, first = info.state.last_seq, info.state.first_seq
        for seq in range(last, max(first, last - _RESUME_SCAN) - 1, -1):
            if seq <= 0:
                break
            try:
                message = await self.bus.js.get_msg(self.bus.stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            position = (message.headers or {}).get(POSITION_HEADER)
            if position:
                return int(position)
        return 0

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
        while not stopping.is_set():
            try:
                batch = await self.store.read_batch(self.position, RELAY_BATCH)
                if batch:
                    await self.publish(batch)
            except Exception as error:
                if not is_transient(error):
                    raise
                RETRIES.labels("relay").inc()
                self.caught_up.clear()
                wait = DEFAULT_BACKOFF.delay(failures, random.random())
                log.warning("relay_retrying", position=self.position, delay=round(wait, 3), error=repr(error))
                failures += 1
                self.retrying = repr(error)
                await wait_or_stop(stopping, wait)
                continue
            if failures:
                log.info("relay_recovered", position=self.position, attempts=failures + 1)
                failures = 0
                self.retrying = None
            if batch:
                delay = _POLL_MIN
                continue
            self.caught_up.set()
            # Nothing new: poll again soon, backing off while idle.
            await wait_or_stop(stopping, delay)
            delay = min(delay * 2, _POLL_MAX)

    async def publish(self, batch: list[StoredEvent]) -> None:
        """Publish ``batch`` pipelined and move the position over the prefix JetStream acknowledged.
        Raises the first failure (after recording the acknowledged prefix); acks that stop coming (the
        connection dropped, or the stream leader died, with publishes in flight) count as a failure once
        none came for ``PUBLISH_ACK_STALL`` seconds."""
        futures: list[asyncio.Future[Any]] = []
        try:
            for stored in batch:
                envelope = stored.envelope
                # An event larger than a bus message goes as a reference to its stored body.
                data, headers = self.bus.event_message(envelope)
                if BODY_HEADER in headers:
                    RELAY_REFERENCES.inc()
                    log.info("relay_by_reference", event_id=str(envelope.event_id), type=envelope.type)
                headers[POSITION_HEADER] = str(stored.global_position)
                futures.append(
                    await self.bus.js.publish_async(
                        self.bus.subject_for(envelope, partition_key=partition_key(envelope)),
                        data,
                        stream=self.bus.stream,
                        headers=headers,
                    )
                )
            done: set[asyncio.Future[Any]] = set()
            pending = set(futures)
            while pending:
                acked, pending = await asyncio.wait(pending, timeout=PUBLISH_ACK_STALL)
                if not acked:
                    break  # none for PUBLISH_ACK_STALL seconds: the rest are lost
                done |= acked
        finally:
            for future in futures:
                future.cancel()  # an ack that never came: free its slot of the pending-publish window
        try:
            for stored, future in zip(batch, futures, strict=True):
                if future not in done or future.cancelled():
                    raise TimeoutError(f"no JetStream ack for {PUBLISH_ACK_STALL:g}s")
                error = future.exception()
                if error is not None:
                    # Publish again from here on; what was stored after it is deduplicated by event id.
                    raise error
                self.position = stored.global_position
                RELAY_PUBLISHED.inc()
        finally:
            RELAY_POSITION.set(self.position)


class Audit:
    def __init__(self, store: EventStore, bus: Bus) -> None:
        self.store = store
        self.bus = bus
        self.last_version: dict[str, int] = {}  # stream -> highest version seen on the bus

    def check_order(self, envelope: Envelope) -> None:
        """Each stream's events should reach the bus in version order (the relay publishes in global
        order); a jump means events were published out of order or by someone else: count and log it.
        Redeliveries (version <= last) are expected and fine."""
        last = self.last_version.get(envelope.stream)
        version = envelope.stream_version
        if last is not None and version > last + 1:
            AUDIT_INGESTED.labels("out_of_order").inc()
            log.warning("audit_version_gap", stream=envelope.stream, expected=last + 1, got=version)
        if last is None or version > last:
            self.last_version[envelope.stream] = version

    async def handle(self, envelope: Envelope, msg: Msg) -> None:
        EVENTS_HANDLED.labels("auditor", envelope.type).inc()
        self.check_order(envelope)
        try:
            new = await self.store.append_many([envelope])
        except ConcurrencyError as error:
            AUDIT_INGESTED.labels("conflict").inc()
            log.error(
                "audit_conflict", event_id=str(envelope.event_id), stream=envelope.stream, error=str(error)
            )
            raise  # retried, then dead-lettered with the reason: an operator must look at it
        AUDIT_INGESTED.labels("stored" if new else "present").inc()
        if new:
            log.warning(
                "audit_stored_missing_event",
                event_id=str(envelope.event_id),
                stream=envelope.stream,
                correlation_id=envelope.correlation_id,
            )


class History:
    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def handle(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            limit = min(int(query.get("limit", "1000")), 10000)
            after = int(query.get("after", "0"))
        except ValueError:
            return web.json_response({"error": "after and limit must be integers"}, status=400)
        if "stream" in query:
            events = await self.store.read_stream(query["stream"], int(query.get("from_version", "1")))
        elif "correlation_id" in query:
            events = await self.store.read_correlation(query["correlation_id"])
        else:
            events = await self.store.read_batch(after, limit)
        body: list[dict[str, Any]] = [
            {"global_position": e.global_position, "recorded_at": e.recorded_at, "event": e.envelope}
            for e in events[:limit]
        ]
        return web.Response(body=_encoder.encode(body), content_type="application/json")


async def run(settings: Settings) -> None:
    configure_logging(settings, "auditor")
    store = await EventStore.connect(settings.database_url)
    runtime = ServiceRuntime(settings, "auditor")
    runtime.app.router.add_get("/history", History(store).handle)
    async with runtime:
        bus = await Bus.connect(settings, name="rollbook-auditor")
        bus.bodies = store.read_event  # events larger than a bus message are read from the store
        try:
            await bus.ensure_stream()
            relay = Relay(store, bus)
            runtime.add_detail("relay", relay.detail)
            audit = Audit(store, bus)
            consumer = bus.consumer(DURABLE, bus.event_filter(), audit.handle, batch=256, ack_wait=60.0)
            relay_task = asyncio.create_task(relay.run(runtime.stopping), name="relay")
            audit_task = asyncio.create_task(consumer.run(), name="audit-consumer")
            lag = asyncio.create_task(report_consumer_lag(bus, runtime, "auditor", DURABLE))
            ready = asyncio.create_task(_ready_when_caught_up(runtime, relay))
            checkpoints = asyncio.create_task(checkpoint_loop(store, bus, settings, runtime.stopping))
            try:
                await run_until_stopped(runtime, relay_task, audit_task)
            finally:
                consumer.stop()
                for task in (lag, ready):
                    task.cancel()
                # The relay finishes the batch in hand (its loop checks `stopping`), then both stop.
                await asyncio.gather(relay_task, audit_task, lag, ready, checkpoints, return_exceptions=True)
        finally:
            await bus.close()
            await store.close()


async def _ready_when_caught_up(runtime: ServiceRuntime, relay: Relay) -> None:
    await relay.caught_up.wait()
    runtime.set_ready()
    log.info("ready", position=relay.position)
