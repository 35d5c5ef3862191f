"""Which bus messages the executor may act on (services/executor/authority.py): only planner event types,
on a planner's decisions stream, stored exactly as they came."""

from __future__ import annotations

import pytest

from services.executor.authority import planner_stream, refusal


@pytest.mark.parametrize(
    ("stream", "planned"),
    [
        ("CloneSet/default/web", True),
        ("SidecarSet//agent/decisions", True),
        ("CloneSet/default/web/actions", False),  # the executors' outcomes
        ("CloneSet/default/web/observed", False),  # the watcher's
        ("CloneSet/default/web/shadow", False),  # shadow mode acts on nothing
        ("CloneSet//web", False),
        ("Pod/default/web-0", False),
        ("SidecarSet//agent/actions", False),
        ("SidecarSet//agent", False),
        ("SidecarSet//agent/observed", False),
    ],
)
def test_only_a_planners_decisions_streams_count(stream: str, planned: bool) -> None:
    assert planner_stream(stream) is planned


def test_refusal_reasons() -> None:
    stream = "CloneSet/default/web"
    assert refusal("PodActionRequested", stream, True) is None
    assert refusal("StatusPlanned", stream, True) is None
    assert "not an event the executor acts on" in (refusal("PodActionSucceeded", stream, True) or "")
    assert "which no planner writes" in (refusal("PodActionRequested", stream + "/observed", True) or "")
    assert "no event with this id" in (refusal("PodActionRequested", stream, None) or "")
    assert "differs from the event stored" in (refusal("PodActionRequested", stream, False) or "")
