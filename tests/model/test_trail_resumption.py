"""Taking over a derived trail (services/model/trail_resumption.py): what a trail folded anew appends is
what the observations after the stored trail's newest cause mean, numbered after its head, whatever the
fold now derives from the observations before."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from services.model.events import Envelope, RequeueDue, new_event
from services.model.trail_resumption import Resumption

pytestmark = pytest.mark.pure

T0 = datetime(2026, 12, 8, tzinfo=UTC)
OBSERVATIONS = [uuid.uuid5(uuid.NAMESPACE_URL, f"observation-{i}") for i in range(5)]


@dataclass
class Trail:
    """A fold that derives ``per_observation[i]`` events from observation i, numbered as it goes."""

    per_observation: list[int]
    version: int = 0

    def fold(self, index: int) -> list[Envelope]:
        derived = []
        for n in range(self.per_observation[index]):
            self.version += 1
            derived.append(
                new_event(
                    RequeueDue(due_at=T0, scheduled_by=OBSERVATIONS[index]),
                    stream="s/recorded",
                    stream_version=self.version,
                    occurred_at=T0,
                    event_id=uuid.uuid5(OBSERVATIONS[index], str(n)),
                    causation_id=OBSERVATIONS[index],
                )
            )
        return derived


def take_over(stored: list[Envelope], now: Trail) -> list[tuple[int, uuid.UUID | None]]:
    """(version, cause) of what a trail folded anew by ``now``'s rules appends after ``stored``."""
    resumption = Resumption(len(stored), stored[-1].causation_id if stored else None)
    fresh = []
    for index in range(len(OBSERVATIONS)):
        fresh += resumption.take(now, OBSERVATIONS[index], now.fold(index))
    fresh += resumption.unmet()
    return [(e.stream_version, e.causation_id) for e in fresh]


def recorded(rules: list[int], observations: int) -> list[Envelope]:
    """The trail stored by a fold with ``rules`` from the first ``observations`` observations."""
    trail = Trail(rules)
    return [e for index in range(observations) for e in trail.fold(index)]


@pytest.mark.parametrize(
    ("stored_by", "folded_by", "stored_through", "appended"),
    [
        # Nothing stored: everything the fold derives.
        ([1, 1, 1, 1, 1], [1, 1, 1, 1, 1], 0, [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]),
        # The same rules: the events of the observations after the stored ones (a plain restart).
        ([1, 2, 0, 1, 1], [1, 2, 0, 1, 1], 2, [(4, 3), (5, 4)]),
        # The fold now derives one event more from an observation already on record: it is not appended
        # (the stored trail stays as recorded), and what follows is numbered after the stored head.
        ([0, 1, 1, 1, 1], [1, 1, 1, 1, 1], 3, [(3, 3), (4, 4)]),
        # One event fewer: nothing is lost after the head either.
        ([2, 1, 1, 1, 1], [1, 1, 1, 1, 1], 3, [(5, 3), (6, 4)]),
        # Everything observed is on record: nothing to append.
        ([1, 1, 1, 1, 1], [2, 1, 1, 1, 1], 5, []),
    ],
)
def test_a_trail_taken_over_appends_what_the_later_observations_mean(
    stored_by: list[int], folded_by: list[int], stored_through: int, appended: list[tuple[int, int]]
) -> None:
    stored = recorded(stored_by, stored_through)
    assert take_over(stored, Trail(folded_by)) == [
        (version, OBSERVATIONS[index]) for version, index in appended
    ]


def test_a_stored_head_whose_cause_is_not_folded_again_is_cut_at_its_version() -> None:
    """The stored trail's newest cause is no observation folded again (no longer readable, say): the
    events past the stored version are appended, as a trail derived by the same rules would need."""
    stored = recorded([1, 1, 1, 1, 1], 2)
    lost = Resumption(2, uuid.uuid4())
    now = Trail([1, 1, 1, 1, 1])
    fresh = [e for index in range(5) for e in lost.take(now, OBSERVATIONS[index], now.fold(index))]
    assert fresh == []
    assert [(e.stream_version, e.causation_id) for e in lost.unmet()] == [
        (3, OBSERVATIONS[2]),
        (4, OBSERVATIONS[3]),
        (5, OBSERVATIONS[4]),
    ]
    assert len(stored) == 2
