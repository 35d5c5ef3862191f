"""The recorded revisions of the SidecarSets that pin one (``injectionStrategy.revision``), for injection.

The planner records a SidecarSet's revisions as ``RevisionCreated`` / ``RevisionsPruned`` on its decisions
stream (``SidecarSet//<name>/decisions``), which is their record: no ControllerRevision objects exist in
the cluster. So the webhook reads them where every service reads state, from the event store: when a pod
is matched by a SidecarSet that pins a revision, that SidecarSet's decisions stream is caught up from the
last version read (one indexed query) and folded as the planner folds it (``ss.fold_revision``). Only
those SidecarSets are read; every other admission does no I/O.

A read that fails or takes longer than ``timeout_seconds`` (the store is down) falls back to what was
read before; a SidecarSet never read yet then has no history, and its pods are refused with the reason,
as a pinned revision that is not found is (OpenKruise refuses the pod too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import structlog

from services.infra.store import EventStore
from services.model import sidecarset as ss
from services.model.sidecarset_streams import decisions_stream

log = structlog.get_logger("rollbook.webhook.revisions")

StoreFactory = Callable[[], Awaitable[EventStore]]


class RevisionUnavailable(RuntimeError):
    """The revisions of a SidecarSet could not be read (and never were)."""


class RevisionSource(Protocol):
    async def recorded(self, names: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """Per SidecarSet name, its recorded revisions (ControllerRevision-shaped)."""
        ...


class StoreRevisions:
    """``RevisionSource`` over the event store, caught up per SidecarSet on demand."""

    def __init__(self, connect_store: StoreFactory, *, timeout_seconds: float = 2.0) -> None:
        self._connect_store = connect_store
        self._store: EventStore | None = None
        self._timeout = timeout_seconds
        self._revisions: dict[str, dict[str, dict[str, Any]]] = {}
        self._versions: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def recorded(self, names: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        wanted = sorted(set(names))
        try:
            await asyncio.wait_for(self._catch_up(wanted), self._timeout)
        except Exception as err:  # store down or slow: what was read before still holds
            missing = [name for name in wanted if name not in self._versions]
            log.warning("revisions_read_failed", sidecarsets=wanted, error=repr(err))
            if missing:
                raise RevisionUnavailable(
                    f"the recorded revisions of SidecarSet {missing[0]!r} cannot be read from the event "
                    f"store: {err!r}"
                ) from err
        return {name: list(self._revisions.get(name, {}).values()) for name in wanted}

    async def _catch_up(self, names: list[str]) -> None:
        async with self._lock:  # one reader: versions and revisions move together
            if self._store is None:
                self._store = await self._connect_store()
            for name in names:
                version = self._versions.get(name, 0)
                stored = await self._store.read_stream(decisions_stream(name), version + 1)
                revisions = self._revisions.setdefault(name, {})
                for event in stored:
                    ss.fold_revision(revisions, event.envelope.payload)
                    version = event.envelope.stream_version
                self._versions[name] = version

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
