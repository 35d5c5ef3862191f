"""The event ceiling: an observation over ``max_event_bytes`` is recorded as ObservationRejected (same
id, stream and correlation), anything else passes unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from services.model.events import ObjectObserved, ObservationRejected, RolloutPaused, encode, new_event
from services.watcher.objects import observation, within_ceiling
from tests.infra.bus_helpers import T0


def cloneset(env_value_bytes: int) -> dict[str, Any]:
    return {
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "prod", "uid": "u-1", "resourceVersion": "42"},
        "spec": {
            "template": {"spec": {"containers": [{"env": [{"name": "BIG", "value": "x" * env_value_bytes}]}]}}
        },
    }


@pytest.mark.parametrize(
    ("env_value_bytes", "limit", "rejected"),
    [
        (10, 4096, False),
        (1_200_000, 8 * 1024 * 1024, False),  # 1.2 MB: above a NATS message, below the default ceiling
        (1_200_000, 1024 * 1024, True),
        (3000, 3000, True),  # the envelope around the value counts too
    ],
)
def test_observations_over_the_ceiling_are_rejected(env_value_bytes: int, limit: int, rejected: bool) -> None:
    observed = observation(
        "CloneSet",
        cloneset(env_value_bytes),
        "MODIFIED",
        stream="CloneSet/prod/web/observed",
        correlation_id="r-1",
    )
    result = within_ceiling(observed, limit)
    if not rejected:
        assert result is observed
        return
    assert isinstance(result.payload, ObservationRejected)
    assert (result.event_id, result.stream, result.correlation_id) == (
        observed.event_id,
        observed.stream,
        observed.correlation_id,
    )
    assert result.payload.size_bytes == len(encode(observed)) > limit
    assert (result.payload.kind, result.payload.name, result.payload.resource_version) == (
        "CloneSet",
        "web",
        "42",
    )
    assert "event ceiling" in result.payload.reason and str(limit) in result.payload.reason
    assert len(encode(result)) < 1000


def test_other_events_are_not_the_watchers_to_reject() -> None:
    paused = new_event(
        RolloutPaused(rollout_id="r", reason="x" * 5000),
        stream="CloneSet/a/b",
        stream_version=1,
        occurred_at=T0,
    )
    assert within_ceiling(paused, 100) is paused
    assert isinstance(
        observation(
            "Pod", cloneset(0), "ADDED", stream="CloneSet/prod/web/observed", correlation_id=None
        ).payload,
        ObjectObserved,
    )
