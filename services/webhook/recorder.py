"""Recording injections as ``SidecarInjected`` events without ever holding up pod admission.

The admission handler hands records to ``InjectionRecorder.submit`` (no I/O, never blocks) and answers
the API server at once. A background task appends each event to the sink, retrying with backoff
until it succeeds. Event ids are derived from the AdmissionReview uid and the SidecarSet name, so a
retried admission, a second webhook replica or a redelivery writes the same event id, which the store
deduplicates.

Guarantee (docs/sidecarset.md): at least once while the webhook process lives; events still queued
when the process is killed are lost (counted and logged at shutdown). The pod itself always carries
the truth in its annotations, from which the watcher's observations can rebuild the record.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog

from services.infra.retry import Backoff
from services.kinds.registry import SIDECARSET
from services.model import events
from services.model import sidecarset as ss

log = structlog.get_logger("rollbook.webhook.recorder")

# Fixed namespace for uuid5 event ids of injections (never change it: ids must be reproducible).
INJECTION_EVENT_NAMESPACE = uuid.UUID("6f1c8a52-4a55-4a8e-9d0e-6d3b0f2f9a11")


@dataclass(frozen=True)
class PendingEvent:
    event_id: uuid.UUID
    stream: str
    payload: events.SidecarInjected
    occurred_at: datetime
    correlation_id: str  # the AdmissionReview uid


class EventSink(Protocol):
    """Where injection events go: the event store (or the log). ``append`` must be idempotent by event_id."""

    async def append(self, event: PendingEvent) -> None: ...


def injection_stream(sidecarset: str) -> str:
    """The SidecarSet's own stream, ``SidecarSet//<name>`` (cluster-scoped: empty namespace)."""
    return SIDECARSET.stream("", sidecarset)


def injection_events(
    records: Sequence[ss.InjectionRecord], *, admission_uid: str, occurred_at: datetime
) -> list[PendingEvent]:
    """One SidecarInjected per record, with an id reproducible from the admission and the SidecarSet."""
    return [
        PendingEvent(
            event_id=uuid.uuid5(INJECTION_EVENT_NAMESPACE, f"{admission_uid}/{record.sidecarset}"),
            stream=injection_stream(record.sidecarset),
            payload=events.SidecarInjected(
                namespace=record.namespace,
                pod=record.pod,
                sidecarset=record.sidecarset,
                revision=record.revision,
                containers=record.containers + record.init_containers,
            ),
            occurred_at=occurred_at,
            correlation_id=admission_uid,
        )
        for record in records
    ]


class InjectionRecorder:
    """A bounded queue in front of an ``EventSink``, drained by one background task."""

    def __init__(
        self,
        sink: EventSink,
        *,
        capacity: int = 10_000,
        first_retry_seconds: float = 0.2,
        max_retry_seconds: float = 10.0,
    ) -> None:
        self._sink = sink
        self._queue: asyncio.Queue[PendingEvent] = asyncio.Queue(maxsize=capacity)
        self._backoff = Backoff(initial=first_retry_seconds, maximum=max_retry_seconds)
        self._task: asyncio.Task[None] | None = None
        self.recorded = 0
        self.dropped = 0  # queue full: the sink has been down for a long time
        self.failed_attempts = 0
        self._in_flight = 0

    def submit(self, pending: Sequence[PendingEvent]) -> None:
        for event in pending:
            try:
                self._queue.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1
                log.error(
                    "injection_event_dropped",
                    reason="queue full",
                    event_id=str(event.event_id),
                    sidecarset=event.payload.sidecarset,
                    pod=event.payload.pod,
                )

    @property
    def backlog(self) -> int:
        """Events not recorded yet: queued plus the one being retried."""
        return self._queue.qsize() + self._in_flight

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="injection-recorder")

    async def _drain(self) -> None:
        while True:
            event = await self._queue.get()
            self._in_flight = 1
            attempt = 0
            while True:
                try:
                    await self._sink.append(event)
                    self.recorded += 1
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # store outage: keep the event, try again later
                    self.failed_attempts += 1
                    log.warning("injection_event_retry", event_id=str(event.event_id), error=repr(err))
                    await asyncio.sleep(self._backoff.delay(attempt, random.random()))
                    attempt += 1
            self._in_flight = 0
            self._queue.task_done()

    async def flush(self, wait_seconds: float) -> bool:
        """Wait until everything queued is recorded; False on timeout."""
        try:
            await asyncio.wait_for(self._queue.join(), wait_seconds)
            return True
        except TimeoutError:
            return False

    async def stop(self, wait_seconds: float = 5.0) -> None:
        flushed = await self.flush(wait_seconds)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if not flushed:
            log.error("injection_events_lost_at_shutdown", count=self.backlog)


class LogSink:
    """Writes each injection event as a structured log line: the sink until the event store is wired."""

    async def append(self, event: PendingEvent) -> None:
        log.info(
            "sidecar_injected",
            event_id=str(event.event_id),
            stream=event.stream,
            namespace=event.payload.namespace,
            pod=event.payload.pod,
            sidecarset=event.payload.sidecarset,
            revision=event.payload.revision,
            containers=event.payload.containers,
            correlation_id=event.correlation_id,
        )


class MemorySink:
    """Keeps events in a list, deduplicated by event id (``rollbook inject`` and tests)."""

    def __init__(self) -> None:
        self.events: dict[uuid.UUID, PendingEvent] = {}

    async def append(self, event: PendingEvent) -> None:
        self.events.setdefault(event.event_id, event)
