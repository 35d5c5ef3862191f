"""``rounds.all_folded``: whether the events a workload's wake-ups announce are all folded already, so
the planner settles them without reading the store again (services/planner/service.py)."""

from __future__ import annotations

import pytest

from services.model.rounds import all_folded

OBSERVED, ACTIONS = "CloneSet/ns/web/observed", "CloneSet/ns/web/actions"


@pytest.mark.parametrize(
    ("folded", "announced", "expected"),
    [
        ({OBSERVED: 5}, {OBSERVED: 5}, True),  # exactly the last event folded
        ({OBSERVED: 7}, {OBSERVED: 5}, True),  # a round read past it
        ({OBSERVED: 4}, {OBSERVED: 5}, False),  # one event not folded yet
        ({OBSERVED: 9, ACTIONS: 2}, {OBSERVED: 3, ACTIONS: 3}, False),  # one stream behind is enough
        ({OBSERVED: 9, ACTIONS: 3}, {OBSERVED: 3, ACTIONS: 3}, True),
        ({}, {OBSERVED: 1}, False),  # a state rebuilt from nothing (a new owner, a stream moved)
        ({OBSERVED: 5}, {}, False),  # nothing announced (a timer, a retry): the round runs
    ],
)
def test_all_folded(folded: dict[str, int], announced: dict[str, int], expected: bool) -> None:
    assert all_folded(folded, announced) is expected
