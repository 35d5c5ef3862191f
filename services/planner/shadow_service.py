"""The planner's shadow hook (docs/shadow.md): for a CloneSet rollbook does not drive, catch its shadow
trail up with the workload's observations and append what it means to ``CloneSet/<ns>/<name>/shadow``.

The trail (services/planner/shadow_trail.py) is pure and deterministic; this is its I/O. A trail is rebuilt
from the observed stream on first sight (after a start or a leadership change) and only the events of the
observations after the stored trail's newest cause are appended (services/model/trail_resumption.py),
numbered after its head and with that version expected (the planner leader is its single writer), so a
re-derived trail never stores anything twice, even where the rules changed since it was stored.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from services.infra.metrics import EVENTS_APPENDED
from services.infra.store import ConcurrencyError, EventStore
from services.kinds.registry import CLONESET
from services.model.events import PodActionObserved, ShadowCompared
from services.model.trail_resumption import Resumption
from services.planner.shadow_trail import ShadowTrail

log = structlog.get_logger("planner")
# What a shadow stream holds (docs/shadow.md): its first event is one of these.
SHADOW_EVENT_TYPES = (
    "RolloutStarted",
    "RolloutCompleted",
    "PartitionStepPlanned",
    "PodActionObserved",
    "ShadowCompared",
    "ShadowPlanned",
)


class ShadowRecorder:
    def __init__(
        self, store: EventStore, *, shadow_all: bool, rules: int, since: datetime | None = None
    ) -> None:
        """``since``: when shadow mode began (``rollbook up --shadow``: the planner's start). A trail with
        nothing stored yet starts with the first observation made then or later, not with the workload's
        first observation: what happened before (rollbook driving it, say) is not the shadowed
        controller's doing. None: a trail starts with the first observation showing the shadow label."""
        self.store = store
        self.shadow_all = shadow_all
        self.rules = rules
        self.since = since
        self.trails: dict[str, ShadowTrail] = {}
        self.stored: dict[str, int] = {}  # workload -> shadow stream version stored

    async def record(self, namespace: str, name: str) -> int:
        """Fold the workload's new observations into its trail and append the events they mean; returns
        how many were appended."""
        key = f"{namespace}/{name}"
        trail = self.trails.get(key)
        resumption = None
        if trail is None:
            shadow = CLONESET.shadow_stream(namespace, name)
            version = await self.store.stream_version(shadow)
            resumption = Resumption.after(version, await self.store.read_stream(shadow, version, 1))
            start = await self._recorded_start(namespace, name) if version else None
            trail = self.trails[key] = ShadowTrail(
                namespace,
                name,
                self.shadow_all,
                self.rules,
                start_version=start,
                since=None if start is not None else self.since,
            )
            self.stored[key] = version
        fresh = []
        observed = await self.store.read_stream(
            CLONESET.observed_stream(namespace, name), trail.observed_version + 1
        )
        for stored in observed:
            derived = trail.step(stored.envelope)
            if resumption is not None:
                derived = resumption.take(trail, stored.envelope.event_id, derived)
            fresh += derived
        if resumption is not None:
            fresh += resumption.unmet()
        if not fresh:
            return 0
        try:
            await self.store.append(fresh, expected_version=self.stored[key])
        except ConcurrencyError:
            # Another planner wrote the trail (a hand-over): rebuild from the store on the next wake-up.
            self.trails.pop(key, None)
            raise
        self.stored[key] = fresh[-1].stream_version
        for envelope in fresh:
            EVENTS_APPENDED.labels("planner", envelope.type).inc()
        observed_actions = [e.payload for e in fresh if isinstance(e.payload, PodActionObserved)]
        compared = [e.payload for e in fresh if isinstance(e.payload, ShadowCompared)]
        differ = [c for c in compared if c.verdict == "differ"]
        log.info(
            "shadow_recorded",
            workload=key,
            events=len(fresh),
            observed=[f"{a.action}:{a.pod}" for a in observed_actions],
            differ=[f"{d.action}:{d.pod}: {d.reason}" for d in differ],
        )
        return len(fresh)

    async def _recorded_start(self, namespace: str, name: str) -> int | None:
        """The observed stream's version where the stored trail started: its first event's cause (the
        first observation the trail recorded always records rollbook's decision on it)."""
        first = await self.store.read_stream_page(
            CLONESET.shadow_stream(namespace, name), 1, list(SHADOW_EVENT_TYPES), 1
        )
        cause = first[0].envelope.causation_id if first else None
        observation = await self.store.read_event(cause) if cause is not None else None
        if observation is None or observation.stream != CLONESET.observed_stream(namespace, name):
            return None
        return observation.stream_version
