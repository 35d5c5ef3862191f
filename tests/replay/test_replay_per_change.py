"""Replay, what-if and the UI's frames do their per-pod work once per change to a pod, not once per event
(issue 27): what they print and answer is what summarising and counting every pod after every event gave,
which the reference functions here still do."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from functools import cache
from typing import Any

import msgspec
import pytest

from services.kinds.cloneset.rules.names import REVISION_LABEL
from services.model.availability import pod_available, revision_hash, unavailable
from services.model.cloneset import desired_replicas
from services.model.event_store import StoredEvent
from services.model.events import Envelope, ObjectObserved, RolloutStarted
from services.model.memory_store import InMemoryEventStore
from services.replay import whatif
from services.replay.cluster_model import ClusterModel
from services.replay.operations import replay_frames, replay_lines, replay_records
from services.replay.simulation import WorkloadSimulation
from services.replay.timeline import (
    PodTally,
    Step,
    event_text,
    fold_timeline,
    one_line,
    pod_summary,
    summarise,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

HISTORIES: dict[str, dict[str, Any]] = {
    "in place, 2 at a time": dict(replicas=7, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2}),
    "recreate": dict(replicas=5, strategy={"type": "ReCreate", "maxUnavailable": 1}),
    "in place, a partition": dict(
        replicas=6, strategy={"type": "InPlaceIfPossible", "maxUnavailable": 1, "partition": 2}
    ),
    "recreate with a claim per pod": dict(
        replicas=3,
        strategy={"type": "ReCreate", "maxUnavailable": 1},
        volume_claim_templates=[
            {
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        ],
    ),
    "resized in place": dict(
        replicas=4,
        resize=(
            {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
            {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
        ),
    ),
    "scaled out only": dict(replicas=8, rollout=False),
}


ROLLED = sorted(case for case, options in HISTORIES.items() if options.get("rollout", True))


@cache
def simulated(case: str) -> list[Envelope]:
    return WorkloadSimulation("team-a", "web", start=T0, **HISTORIES[case]).run()


def stored(events: list[Envelope]) -> list[StoredEvent]:
    return [StoredEvent(i, e.occurred_at, e) for i, e in enumerate(events, 1)]


# --- the behaviour before: every pod summarised and counted after every event ------------------------


def line_from_scratch(step: Step) -> str:
    stored_event, state = step.event, step.state
    envelope = stored_event.envelope
    stream_kind = envelope.stream.rsplit("/", 1)[-1] if envelope.stream.count("/") > 2 else "decisions"
    ready = sum(1 for p in state.pods.values() if pod_summary(p)["ready"])
    updated = 0
    if state.update_revision:
        wanted = revision_hash(state.update_revision)
        updated = sum(
            1
            for p in state.pods.values()
            if revision_hash(((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)) == wanted
        )
    replicas = desired_replicas(state.cloneset)
    return (
        f"{stored_event.global_position:>8} {stored_event.recorded_at.isoformat(timespec='milliseconds')}"
        f" {stream_kind:<9} v{envelope.stream_version:<5} {event_text(envelope)}"
        f"  | pods={len(state.pods)} ready={ready} updated={updated}"
        f" unavailable={unavailable(replicas, state.pods.values())} pending={len(state.pending())}"
    )


def summarise_from_scratch(step: Step) -> dict[str, Any]:
    state = step.state
    summary = summarise(state)
    summary["pods"] = {name: pod_summary(pod) for name, pod in sorted(state.pods.items())}
    summary["unavailable"] = unavailable(desired_replicas(state.cloneset), state.pods.values())
    summary["actions"]["pending"] = sorted(p.event.action_id for p in state.pending())
    return summary


@pytest.mark.parametrize("case", sorted(HISTORIES))
def test_every_replay_line_and_state_is_what_summarising_every_pod_gives(case: str) -> None:
    events = stored(simulated(case))
    # Two folds of their own: asking for pending actions settles some in the state asked.
    steps = 0
    for step, before in zip(
        fold_timeline("team-a", "web", events), fold_timeline("team-a", "web", events), strict=True
    ):
        assert one_line(step) == line_from_scratch(before)
        assert summarise(step.state, step.pods) == summarise_from_scratch(before)
        steps += 1
    assert steps > 50


@pytest.mark.parametrize("case", sorted(HISTORIES))
def test_a_tally_kept_only_from_a_rollouts_first_event_gives_the_same_lines_and_states(case: str) -> None:
    # A rollout's replay summarises the pods observed before its span once, at its first event.
    events = stored(simulated(case))
    for tally_from in (1, len(events) // 3, len(events) // 2, len(events)):
        late = fold_timeline("team-a", "web", events, tally_from)
        for step, before in zip(late, fold_timeline("team-a", "web", events), strict=True):
            if step.event.global_position >= tally_from:
                assert one_line(step) == one_line(before)
                assert summarise(step.state, step.pods) == summarise(before.state, before.pods)
                if step.event.global_position == tally_from:
                    assert sorted(step.pods.changed) == sorted(step.state.pods)


def test_a_late_tally_holds_each_pod_to_the_min_ready_seconds_it_was_observed_under() -> None:
    # minReadySeconds rises to 1000 just before the rollout's first event: the pods observed before it
    # stay held to 0 until observed again, in the tally kept all along and in the one kept from there.
    events = stored(simulated("in place, 2 at a time"))
    middle = len(events) // 2
    index = max(
        i
        for i, e in enumerate(events[:middle])
        if isinstance(e.envelope.payload, ObjectObserved) and e.envelope.payload.kind == "CloneSet"
    )
    observed = events[index].envelope.payload
    assert isinstance(observed, ObjectObserved)
    cloneset = copy.deepcopy(observed.object)
    cloneset["spec"]["minReadySeconds"] = 1000
    changed = msgspec.structs.replace(observed, object=cloneset)
    events[index] = msgspec.structs.replace(
        events[index], envelope=msgspec.structs.replace(events[index].envelope, payload=changed)
    )
    tally_from = events[index + 1].global_position
    compared = 0
    late = fold_timeline("team-a", "web", events, tally_from)
    for step, before in zip(late, fold_timeline("team-a", "web", events), strict=True):
        if step.event.global_position >= tally_from:
            assert one_line(step) == one_line(before)
            compared += 1
    assert compared > 10


def test_the_tally_looks_again_only_at_a_pod_whose_object_changed() -> None:
    def pod(name: str, revision: str, ready: bool) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": {REVISION_LABEL: f"web-{revision}"}},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    tally = PodTally()
    pods: dict[str, dict[str, Any]] = {}
    # (what happens to the pods, pod refreshed) -> (changed, ready, available, at revision "b")
    table: list[tuple[str, dict[str, Any] | None, str, list[str], int, int, int]] = [
        ("a new pod, not ready", pod("p0", "a", False), "p0", ["p0"], 0, 0, 0),
        ("another, ready at b", pod("p1", "b", True), "p1", ["p1"], 1, 1, 1),
        ("the first ready at b", pod("p0", "b", True), "p0", ["p0"], 2, 2, 2),
        ("an event about p1 that left its object as it was", None, "p1", [], 2, 2, 2),
        ("the second gone", {}, "p1", ["p1"], 1, 1, 1),
        ("a pod never seen, gone", {}, "p9", [], 1, 1, 1),
    ]
    for what, change, name, changed, ready, available, at_b in table:
        if change == {}:
            pods.pop(name, None)
        elif change is not None:
            pods[name] = change
        tally.refresh(pods, name, T0)
        assert (tally.changed, tally.ready, tally.available, tally.updated("web-b")) == (
            changed,
            ready,
            available,
            at_b,
        ), what
        assert tally.summaries() == {n: pod_summary(p) for n, p in sorted(pods.items())}, what
    assert tally.updated(None) == 0


# --- what-if --------------------------------------------------------------------------------------


class EveryPodKubelet(ClusterModel):
    """The model as it was: its kubelet looked at every pod after every event."""

    def kubelet(self) -> None:
        self.kubelet_due = set(self.pods)
        super().kubelet()


def observe_every_pod(
    metrics: whatif.RolloutMetrics,
    moment: float,
    pods: dict[str, dict[str, Any]],
    replicas: int,
    changed: Any = None,
    min_ready: int = 0,
) -> None:
    """RolloutMetrics.observe as it was: every pod looked at on every call (these rollouts have
    minReadySeconds 0, so no pod waits out its time between two calls)."""
    assert min_ready == 0
    metrics.max_unavailable = max(metrics.max_unavailable, unavailable(replicas, pods.values()))
    down = {name for name, pod in pods.items() if not pod_available(pod)}
    for name in down:
        metrics._down_since.setdefault(name, moment)
    for name in list(metrics._down_since):
        if name not in down:
            metrics.longest_unavailable_seconds = max(
                metrics.longest_unavailable_seconds, moment - metrics._down_since.pop(name)
            )


@pytest.mark.parametrize("case", ROLLED)
@pytest.mark.parametrize("overrides", [{}, {"maxUnavailable": 2}, {"maxUnavailable": "100%"}], ids=str)
def test_what_if_gives_what_looking_at_every_pod_gave(
    case: str, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = stored(simulated(case))
    rollout = next(e.payload.rollout_id for e in simulated(case) if isinstance(e.payload, RolloutStarted))
    now = whatif.what_if("team-a", "web", events, rollout, copy.deepcopy(overrides))
    monkeypatch.setattr(whatif, "ClusterModel", EveryPodKubelet)
    monkeypatch.setattr(whatif.RolloutMetrics, "observe", observe_every_pod)
    before = whatif.what_if("team-a", "web", events, rollout, copy.deepcopy(overrides))
    assert now.recorded.as_dict() == before.recorded.as_dict()
    assert now.replanned.as_dict() == before.replanned.as_dict()
    assert now.replanned.pods_touched == before.replanned.pods_touched
    assert now.timings == before.timings


# --- the UI's frames --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(HISTORIES))
async def test_the_pods_rebuilt_from_the_frames_are_the_replayed_states_pods(case: str) -> None:
    history = simulated(case)
    store = InMemoryEventStore(history)
    rollouts = [e.payload.rollout_id for e in history if isinstance(e.payload, RolloutStarted)]
    for target in ("team-a/web", *rollouts):
        frames = await replay_frames(store, target)
        records = await replay_records(store, target)
        assert len(frames) == len(records) == len(await replay_lines(store, target))
        pods: dict[str, Any] = {}
        for frame, record in zip(frames, records, strict=True):
            assert {k: v for k, v in frame.items() if k != "pods"} == {
                k: v for k, v in record.items() if k != "state"
            }
            apply_frame(pods, frame)
            assert pods == record["state"]["pods"]
        assert frames[0]["pods"] == records[0]["state"]["pods"]  # the first frame: every pod
        assert sum(len(f["pods"]) for f in frames[1:]) < len(frames)  # then only what changed


def apply_frame(pods: dict[str, Any], frame: dict[str, Any]) -> None:
    """The pods after a UI frame: the frame carries the pods that changed, a removed one as None."""
    for name, summary in frame["pods"].items():
        if summary is None:
            del pods[name]
        else:
            pods[name] = summary
