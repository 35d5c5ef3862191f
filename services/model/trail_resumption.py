"""Taking over a derived trail (the flight recorder's of a recorded kind, a CloneSet's shadow trail) after a
restart or a hand-over. The trail is folded again from its observations; what the observations up to the
stored trail's newest cause meant is on record already, and only what the later ones mean is appended,
numbered after the stored head.

Cutting at the newest cause rather than at the stored version keeps recording when the fold's rules
changed since the stored trail was derived (say one observation now means one event more): the stored
trail stays as it was recorded (``verify`` reports where it differs from the fold), and the new events
follow it. Cut at the version instead, a stored trail with one event more made the first later event
look stored (lost), and one with one event fewer made the first append repeat a stored event (skipped by
its id in Postgres, refused on every wake-up by a store that checks versions: the trail stopped).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Protocol

from services.model.event_store import StoredEvent
from services.model.events import Envelope


class DerivedTrail(Protocol):
    """A trail that numbers the events it derives: ``version`` is the last number it gave."""

    version: int


@dataclass
class Resumption:
    """Which of the events a trail folded anew derives are to be appended. ``stored_version``: the stored
    trail's head; ``last_cause``: the id of the observation that caused its newest event (None when nothing
    is stored: every event derived is new)."""

    stored_version: int
    last_cause: uuid.UUID | None
    _met: bool = False
    # What the fold derived before meeting ``last_cause``, for ``unmet``.
    _held: list[Envelope] = field(default_factory=list)

    @classmethod
    def after(cls, version: int, head: list[StoredEvent]) -> Resumption:
        """Taking over from a stream stored up to ``version``, ``head`` its event at that version (a read of
        one from ``version``; empty when nothing is stored)."""
        return cls(version, head[0].envelope.causation_id if version and head else None)

    def take(self, trail: DerivedTrail, cause: uuid.UUID, derived: list[Envelope]) -> list[Envelope]:
        """The events to append of ``derived``, what folding the observation ``cause`` gave ``trail``."""
        if self.last_cause is None or self._met:
            return derived
        self._held += derived
        if cause == self.last_cause:
            self._met = True
            trail.version = self.stored_version  # what follows is numbered after the stored head
        return []

    def unmet(self) -> list[Envelope]:
        """Once every observation is folded: the events to append if the stored trail's newest cause was
        not among them (an observation no longer readable); cut at the stored version then."""
        if self.last_cause is None or self._met:
            return []
        self._met = True
        return [e for e in self._held if e.stream_version > self.stored_version]
