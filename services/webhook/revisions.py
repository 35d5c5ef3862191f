"""The recorded revisions of the SidecarSets that pin one (``injectionStrategy.revision``), for injection.

The planner records a SidecarSet's revisions as ``RevisionCreated`` / ``RevisionsPruned`` on its decisions
stream (``SidecarSet//<name>/decisions``), which is their record: no ControllerRevision objects exist in
the cluster. So the webhook reads them where every service reads state, from the event store: when a pod
is matched by a SidecarSet that pins a revision, the revision events of that SidecarSet's decisions
stream (only those two types, filtered in the database) are caught up from the last version read, in
pages, and folded as the planner folds them (``ss.fold_revision``). Each page read is kept, so a long
history loads over several admissions even when one read runs out of time. Only those SidecarSets are
read; every other admission does no I/O.

Each SidecarSet has its own lock, so admissions for different SidecarSets never wait for each other, and
concurrent admissions for one share its read (the second finds it fresh). A SidecarSet caught up less
than ``fresh_seconds`` ago is not read again. A read that fails or takes longer than ``timeout_seconds``
falls back to what was read before and is not tried again for that SidecarSet before a backoff (doubling
up to ``max_backoff_seconds``) has passed, so an outage costs one timeout, not one per admission. The
caller is told which reads failed (``Recorded.failed``): what the webhook then does is its setting
(``sidecarset_revisions_unavailable``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from services.infra.retry import Backoff
from services.kinds.registry import SIDECARSET
from services.model import sidecarset as ss
from services.model.event_store import EventStore, StoredEvent
from services.model.events import RevisionCreated, RevisionsPruned

log = structlog.get_logger("rollbook.webhook.revisions")

StoreFactory = Callable[[], Awaitable[EventStore]]

REVISION_EVENT_TYPES = (RevisionCreated.__name__, RevisionsPruned.__name__)


@dataclass(frozen=True)
class Recorded:
    """What a ``RevisionSource`` knows: per SidecarSet name read at least once completely, its recorded
    revisions (ControllerRevision-shaped); per name whose read failed this time, why. A name in
    ``failed`` and not in ``revisions`` was never read; in both, its revisions are the last ones read."""

    revisions: dict[str, list[dict[str, Any]]]
    failed: dict[str, str] = field(default_factory=dict)


class RevisionSource(Protocol):
    async def recorded(self, names: Iterable[str], *, recheck: bool = False) -> Recorded:
        """The recorded revisions of these SidecarSets, caught up as far as the store allows; ``recheck``:
        read them even when read moments ago (a pinned revision was not found: it may just have been
        recorded)."""
        ...


class _Stream:
    """One SidecarSet's state: what was read of its stream, and when it was last caught up or failed."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.version = 0  # the last stream version folded
        self.revisions: dict[str, dict[str, Any]] = {}
        self.complete = False  # caught up to the end at least once
        self.caught_up_at = -float("inf")  # monotonic time of the last complete catch-up
        self.retry_at = -float("inf")  # no read before this monotonic time (backoff after a failure)
        self.backoff = 0.0
        self.error = ""


class StoreRevisions:
    """``RevisionSource`` over the event store, caught up per SidecarSet on demand."""

    def __init__(
        self,
        connect_store: StoreFactory,
        *,
        timeout_seconds: float = 2.0,
        page_size: int = 200,
        fresh_seconds: float = 1.0,
        first_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect_store = connect_store
        self._store: EventStore | None = None
        self._connecting = asyncio.Lock()
        self._timeout = timeout_seconds
        self._page_size = page_size
        self._fresh = fresh_seconds
        self._first_backoff = first_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._clock = clock
        self._streams: dict[str, _Stream] = {}

    async def recorded(self, names: Iterable[str], *, recheck: bool = False) -> Recorded:
        streams = {name: self._streams.setdefault(name, _Stream()) for name in sorted(set(names))}
        errors = await asyncio.gather(
            *(self._refresh(name, stream, recheck) for name, stream in streams.items())
        )
        failed = {name: error for name, error in zip(streams, errors, strict=True) if error}
        if failed:
            log.warning("revisions_read_failed", sidecarsets=sorted(failed), errors=failed)
        revisions = {
            name: list(stream.revisions.values()) for name, stream in streams.items() if stream.complete
        }
        return Recorded(revisions=revisions, failed=failed)

    async def _refresh(self, name: str, stream: _Stream, recheck: bool) -> str:
        """Catch ``stream`` up unless it is fresh or backing off; "" when it is up to date, else why not."""
        now = self._clock()
        fresh_since = now if recheck else stream.caught_up_at
        if now - stream.caught_up_at < self._fresh and not recheck:
            return ""
        if now < stream.retry_at:
            return f"{stream.error} (not retried for {stream.retry_at - now:.1f}s)"
        try:
            await asyncio.wait_for(self._catch_up(name, stream, fresh_since), self._timeout)
        except Exception as err:  # store down or slow: what was read before still holds
            if stream.retry_at <= now:  # not already set by the reader this one waited behind
                stream.backoff = min(self._max_backoff, max(self._first_backoff, stream.backoff * 2))
                stream.retry_at = self._clock() + stream.backoff
                reason = (
                    f"no answer within {self._timeout:g}s" if isinstance(err, TimeoutError) else repr(err)
                )
                stream.error = f"the recorded revisions of SidecarSet {name!r} cannot be read: {reason}"
            return stream.error
        return ""

    async def _catch_up(self, name: str, stream: _Stream, fresh_since: float) -> None:
        async with stream.lock:  # one reader per SidecarSet; the others then find it fresh
            if stream.caught_up_at >= fresh_since and self._clock() - stream.caught_up_at < self._fresh:
                return
            if self._clock() < stream.retry_at:  # the reader before us failed while we waited
                raise ConnectionError(stream.error)
            store = await self._connected()
            while True:
                page = await store.read_stream_page(
                    SIDECARSET.decisions_stream("", name),
                    stream.version + 1,
                    REVISION_EVENT_TYPES,
                    self._page_size,
                )
                for event in page:  # kept page by page: a read cut short resumes after the last page
                    _fold(stream.revisions, event)
                    stream.version = event.envelope.stream_version
                if len(page) < self._page_size:
                    break
            stream.complete = True
            stream.caught_up_at = self._clock()
            stream.backoff, stream.retry_at, stream.error = 0.0, -float("inf"), ""

    async def _connected(self) -> EventStore:
        async with self._connecting:
            if self._store is None:
                self._store = await self._connect_store()
            return self._store

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()


async def load_pinned(
    source: RevisionSource,
    sidecarsets: Callable[[], Iterable[ss.SidecarSet]],
    *,
    first_retry_seconds: float = 0.5,
    max_retry_seconds: float = 30.0,
) -> None:
    """Read the revisions of every SidecarSet that pins one, retrying (with backoff) until all are read:
    the webhook reports ready only then, so a restarted webhook does not meet its first pinned pod with
    nothing read. A SidecarSet that starts pinning later is read at its first pod."""
    backoff = Backoff(initial=first_retry_seconds, maximum=max_retry_seconds)
    attempt = 0
    while True:
        names = [s.name for s in sidecarsets() if ss.pinned_revision(s) is not None]
        recorded = await source.recorded(names)
        if not recorded.failed:
            log.info("pinned_revisions_loaded", sidecarsets=names)
            return
        await asyncio.sleep(backoff.delay(attempt, random.random()))
        attempt += 1


def _fold(revisions: dict[str, dict[str, Any]], event: StoredEvent) -> None:
    """``ss.fold_revision``, stamping a new revision with the time its event was recorded as its
    ``creationTimestamp`` (what OpenKruise breaks ``customVersion`` ties with); a re-numbered one keeps
    the time it was first recorded, as a ControllerRevision updated in place keeps its own."""
    payload = event.envelope.payload
    previous = revisions.get(payload.name) if isinstance(payload, RevisionCreated) else None
    ss.fold_revision(revisions, payload)
    if isinstance(payload, RevisionCreated):
        record = dict(revisions[payload.name])
        metadata = dict(record.get("metadata") or {})
        if not metadata.get("creationTimestamp"):
            created = ((previous or {}).get("metadata") or {}).get("creationTimestamp")
            metadata["creationTimestamp"] = created or ss.format_time(event.envelope.occurred_at)
        record["metadata"] = metadata
        revisions[payload.name] = record
