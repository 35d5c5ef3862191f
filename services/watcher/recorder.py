"""The flight recorder's I/O (docs/kinds.md, "Recorded kinds"): for a workload rollbook records but does
not drive (a Deployment, a StatefulSet), catch its trail up with its observations and append what they mean
to ``<Kind>/<ns>/<name>/recorded``.

The fold is its kind's pure rules (services/kinds/<kind>/rules.py). A trail is rebuilt from the observed
stream on first sight (after a start or a leadership change) and only the events of the observations after
the stored trail's newest cause are appended (services/model/trail_resumption.py), numbered after its head
and with that version expected (the watcher leader is its single writer), so a re-derived trail never
stores anything twice, even where the rules changed since it was stored.
"""

from __future__ import annotations

from typing import Any

import structlog

from services.infra.metrics import EVENTS_APPENDED
from services.kinds import registry
from services.model.event_store import ConcurrencyError, EventStore
from services.model.trail_resumption import Resumption

log = structlog.get_logger("watcher")
PAGE = 500


class Recorder:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.trails: dict[str, Any] = {}  # observed stream -> its kind's trail
        self.stored: dict[str, int] = {}  # observed stream -> recorded stream version stored

    async def record(self, observed: str) -> int:
        """Fold the workload's new observations into its trail and append the events they mean; returns
        how many were appended."""
        found = registry.workload_of(observed)
        if found is None or found[0].trail is None:
            return 0
        kind, namespace, name = found
        make_trail = kind.trail
        assert make_trail is not None
        recorded = kind.recorded_stream(namespace, name)
        trail = self.trails.get(observed)
        resumption = None
        if trail is None:
            trail = self.trails[observed] = make_trail(namespace, name)
            self.stored[observed] = await self.store.stream_version(recorded)
            version = self.stored[observed]
            resumption = Resumption.after(version, await self.store.read_stream(recorded, version, 1))
        fresh = []
        while True:
            page = await self.store.read_stream(observed, trail.observed_version + 1, PAGE)
            for stored in page:
                derived = trail.fold(stored.envelope)
                if resumption is not None:
                    derived = resumption.take(trail, stored.envelope.event_id, derived)
                fresh += derived
            if len(page) < PAGE:
                break
        if resumption is not None:
            fresh += resumption.unmet()
        if not fresh:
            return 0
        try:
            await self.store.append(fresh, expected_version=self.stored[observed])
        except ConcurrencyError:
            # Another watcher wrote the trail (a hand-over): rebuild from the store next time.
            self.trails.pop(observed, None)
            raise
        self.stored[observed] = fresh[-1].stream_version
        for envelope in fresh:
            EVENTS_APPENDED.labels("watcher", envelope.type).inc()
        log.info("recorded", stream=recorded, events=[e.type for e in fresh])
        return len(fresh)
