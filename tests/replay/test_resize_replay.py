"""A rollout that resizes pods in place (pods/resize) through the replay simulation: recorded with resize
actions and no recreation, verified clean, its timeline and what-if read it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.model.events import Envelope, PodActionRequested, RolloutStarted
from services.replay.simulation import WorkloadSimulation
from services.replay.verify import verify_workload
from services.replay.whatif import what_if
from tests.replay.test_verify_pure import stored

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BEFORE = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
AFTER = {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}


@pytest.fixture(scope="module")
def history() -> list[Envelope]:
    return WorkloadSimulation("team-a", "sized", replicas=4, start=T0, resize=(BEFORE, AFTER)).run()


def _actions(history: list[Envelope]) -> list[PodActionRequested]:
    return [e.payload for e in history if isinstance(e.payload, PodActionRequested)]


def test_the_rollout_resizes_every_pod_and_recreates_none(history: list[Envelope]) -> None:
    kinds = [a.action for a in _actions(history)]
    assert kinds.count("resize") == 4
    assert "recreatePod" not in kinds and "deletePod" not in kinds
    resized = {a.pod for a in _actions(history) if a.action == "resize"}
    created = {a.pod for a in _actions(history) if a.action == "createPod"}
    assert resized == created  # the pods created at first are the ones resized


def test_the_resize_history_verifies_clean(history: list[Envelope]) -> None:
    report = verify_workload("team-a", "sized", history)
    assert report.clean, report.divergence and report.divergence.describe()


def test_what_if_replays_the_resize_rollout_resizing_every_pod_at_once(history: list[Envelope]) -> None:
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    result = what_if("team-a", "sized", stored(history), started.rollout_id, {"maxUnavailable": 1})
    assert result.recorded.completed and result.replanned.completed
    # A resize that restarts nothing keeps every pod Ready and in its Services and is chosen without using
    # up maxUnavailable (docs/plan.md), so all 4 pods resize at once, recorded and replanned alike, and none
    # counts as unavailable though each is in lifecycle state Updating meanwhile
    # (services/model/availability.py).
    assert result.recorded.max_unavailable == result.replanned.max_unavailable == 0
    assert result.replanned.actions >= 8  # an updateInPlace and a resize per pod
