"""Replay of a recorded Deployment (docs/kinds.md): its observations folded again by its kind's rules must
give exactly the trail the watcher's recorder stored; a trail that differs is named at its first differing
event. On the in-memory event store, with the recorder the watcher runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from services.model.events import Envelope, RolloutCompleted, new_event
from services.model.memory_store import InMemoryEventStore
from services.replay.operations import (
    replay_at,
    replay_frames,
    replay_lines,
    replay_records,
    verify_recorded,
)
from services.replay.reads import TargetError
from services.watcher.objects import observation
from services.watcher.recorder import Recorder
from tests.kinds.test_recorded_rules import T0, deployment, pod, replicaset
from tests.replay.test_replay_per_change import apply_frame

pytestmark = pytest.mark.asyncio(loop_scope="session")

OBSERVED, RECORDED = "Deployment/ops/web/observed", "Deployment/ops/web/recorded"
FIRST, UNDO = "ops/web@web-b#1", "ops/web@web-a#2"

# Rolled to nginx:2, a pod created and ready, then `kubectl rollout undo` (docs/kinds.md).
HISTORY = [
    replicaset("a", 1, 3, "nginx:1"),
    deployment(1, 1, updated=3, available=3),
    replicaset("b", 2, 1, "nginx:2"),
    deployment(2, 2, updated=1, available=3, total=4),
    pod("web-b-1", "b", 1, ready=False),
    pod("web-b-1", "b", 2),
    replicaset("a", 3, 3, "nginx:1"),
    deployment(3, 3, updated=3, available=2, total=4, manager="kubectl-rollout"),
    pod("web-b-1", "b", 3, deleting=True),
    deployment(3, 3, updated=3, available=3, manager="kubectl-rollout"),
]


def observations(objects: list[dict[str, Any]]) -> list[Envelope]:
    return [
        msgspec.structs.replace(
            observation(o["kind"], o, "MODIFIED", stream=OBSERVED, correlation_id=None),
            stream_version=index,
            occurred_at=T0 + timedelta(seconds=index),
        )
        for index, o in enumerate(objects, start=1)
    ]


async def recorded_store(objects: list[dict[str, Any]] = HISTORY) -> InMemoryEventStore:
    """The observations stored as the watcher stores them, and the trail its recorder appends."""
    store = InMemoryEventStore()
    for envelope in observations(objects):
        await store.append([envelope], expected_version=envelope.stream_version - 1)
        await Recorder(store).record(OBSERVED)  # a recorder per observation: as after a restart each time
    return store


async def test_a_recorded_trail_replays_to_what_was_stored() -> None:
    store = await recorded_store()
    report = await verify_recorded(store, "Deployment/ops/web")
    assert report.divergence is None and report.pending == 0
    assert (report.observations, report.recorded) == (len(HISTORY), report.refolded)
    assert report.describe() == (
        f"OK Deployment ops/web: {report.recorded} recorded events are what its {len(HISTORY)} observations"
        " fold into"
    )
    # A restarted recorder derives the same trail: it appends nothing.
    assert await Recorder(store).record(OBSERVED) == 0


async def test_replay_shows_each_event_with_the_workload_after_it() -> None:
    store = await recorded_store()
    records = await replay_records(store, "deployment/ops/web")  # the kind in any case
    assert [r["position"] for r in records] == list(range(1, await store.head_position() + 1))
    started = [r["state"]["activeRollout"] for r in records if r["type"] == "RolloutStarted"]
    assert started == [FIRST, UNDO]
    last = records[-1]["state"]
    assert last["updateRevision"] == "web-a" and last["activeRollout"] is None
    assert last["revisions"] == {"web-a": 3, "web-b": 2}
    assert last["pods"]["web-b-1"]["terminating"] and not last["pods"]["web-b-1"]["available"]
    # Within one rollout: from its first recorded event to its last.
    undo = await replay_records(store, f"Deployment/{UNDO}")
    stored = {e.envelope.event_id: e for e in store.events}
    in_span = [e for e in store.events if e.envelope.correlation_id == UNDO]
    assert undo[0]["position"] == in_span[0].global_position
    assert undo[-1]["position"] == in_span[-1].global_position
    assert all(
        str(stored[e.envelope.event_id].envelope.event_id) in {r["eventId"] for r in undo} for e in in_span
    )
    lines = await replay_lines(store, f"Deployment/{FIRST}")
    assert any("PodActionObserved createPod web-b-1" in line for line in lines)
    assert any("RolloutCompleted rolled back" in line for line in lines)
    state, at = await replay_at(store, "Deployment/ops/web", at_position=10)  # the pod's first observation
    assert at is not None and at.global_position == 10
    assert state["pods"]["web-b-1"]["ready"] is False  # its second observation (ready) comes later


async def test_a_stored_trail_that_differs_from_its_observations_is_named() -> None:
    store = await recorded_store(HISTORY[:4])  # up to the start of the first rollout
    tampered = InMemoryEventStore([e.envelope for e in store.events])
    # An insider appends that the rollout succeeded: no observation says so.
    version = await tampered.stream_version(RECORDED)
    forged = new_event(
        RolloutCompleted(rollout_id=FIRST, revision="web-b", outcome="succeeded"),
        stream=RECORDED,
        stream_version=version + 1,
        occurred_at=T0,
    )
    await tampered.append([forged], expected_version=version)
    report = await verify_recorded(tampered, "Deployment/ops/web")
    assert report.divergence == (
        f"RolloutCompleted at version {version + 1} has no observation behind it (the observations fold"
        f" into {version} events)"
    )
    assert report.describe().startswith("DIVERGED Deployment ops/web: ")

    # The same trail with one event's payload changed.
    recorded = [e.envelope for e in store.events if e.envelope.stream == RECORDED]
    step = next(e for e in recorded if e.type == "PartitionStepPlanned")
    edited = [
        msgspec.structs.replace(e, payload=msgspec.structs.replace(e.payload, max_surge=9))
        if e is step
        else e
        for e in recorded
    ]
    rewritten = InMemoryEventStore(
        [e.envelope for e in store.events if e.envelope.stream == OBSERVED] + edited
    )
    report = await verify_recorded(rewritten, "Deployment/ops/web")
    assert report.divergence == (
        f"PartitionStepPlanned at version {step.stream_version} differs from the fold's PartitionStepPlanned"
        " in its payload"
    )


async def test_a_recorder_behind_its_observations_is_pending_not_diverged() -> None:
    store = await recorded_store(HISTORY[:4])
    for envelope in observations(HISTORY)[4:]:
        await store.append([envelope], expected_version=envelope.stream_version - 1)  # not recorded yet
    report = await verify_recorded(store, "Deployment/ops/web")
    assert report.divergence is None and report.pending > 0
    assert report.describe().endswith(f"({report.pending} not recorded yet)")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("DaemonSet/ops/web", "'DaemonSet' is not a recorded kind (Deployment, StatefulSet)"),
        ("Deployment/ops/nothing", "no events for Deployment ops/nothing"),
    ],
)
async def test_a_recorded_target_that_names_nothing_is_one_line(target: str, message: str) -> None:
    store = await recorded_store(HISTORY[:2])
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        await replay_lines(store, target)


async def test_the_ui_frames_of_a_recorded_trail_rebuild_each_state_s_pods() -> None:
    store = await recorded_store()
    for target in ("Deployment/ops/web", f"Deployment/{FIRST}", f"Deployment/{UNDO}"):
        frames, records = await replay_frames(store, target), await replay_records(store, target)
        assert [f["position"] for f in frames] == [r["position"] for r in records]
        pods: dict[str, Any] = {}
        for frame, record in zip(frames, records, strict=True):
            apply_frame(pods, frame)
            assert pods == record["state"]["pods"]
        # Only what changed after the first: the pod's three observations, not every event's pods.
        assert sum(len(f["pods"]) for f in frames[1:]) <= 3
