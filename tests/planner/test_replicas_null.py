"""``replicas: null`` (which validation accepts) means the default 1 everywhere: in the plan, in the
rollout events, in the completion check (services/model/cloneset.py ``desired_replicas``)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.progress import rollout_progress
from services.model.cloneset import desired_replicas
from services.model.events import RolloutCompleted, RolloutStarted
from services.replay.simulation import WorkloadSimulation
from tests.planner.builders import cloneset, plan_input


def test_desired_replicas_resolves_absent_and_null_to_one() -> None:
    assert desired_replicas(cloneset(replicas=None)) == 1
    nulled = cloneset()
    nulled["spec"]["replicas"] = None
    assert desired_replicas(nulled) == 1
    assert desired_replicas(cloneset(replicas=0)) == 0
    assert desired_replicas(None) == 1


def test_null_replicas_plans_one_pod_and_reports_complete() -> None:
    cs = cloneset()
    cs["spec"]["replicas"] = None
    result = plan(plan_input(cs, []))
    assert result.rejected is None
    assert [type(a).__name__ for a in result.actions] == ["CreatePod"]
    assert result.status is not None and result.status["expectedUpdatedReplicas"] == 1
    done = {
        "replicas": 1,
        "updatedReplicas": 1,
        "updatedReadyReplicas": 1,
        "currentRevision": "r",
        "updateRevision": "r",
        "expectedUpdatedReplicas": 1,
    }
    assert rollout_progress(cs, done).complete


def test_a_null_replicas_cloneset_rollout_completes() -> None:
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    events = WorkloadSimulation("team-a", "web", replicas=None, start=start).run()
    started = [e.payload for e in events if isinstance(e.payload, RolloutStarted)]
    assert [s.replicas for s in started] == [1]
    completed = [
        e.payload
        for e in events
        if isinstance(e.payload, RolloutCompleted) and e.payload.rollout_id == started[0].rollout_id
    ]
    assert [c.outcome for c in completed] == ["succeeded"]


def test_the_demo_waits_and_the_timeline_read_null_replicas_as_one() -> None:
    from services.cli.demo import updated_at
    from services.kinds.cloneset.rules.workload_state import WorkloadState
    from services.replay.timeline import summarise

    cs = cloneset()
    cs["spec"]["replicas"] = None
    cs["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "readyReplicas": 1,
        "updatedReplicas": 1,
        "updatedReadyReplicas": 1,
        "currentRevision": "sample-1",
        "updateRevision": "sample-1",
    }
    assert updated_at(0)(cs)
    state = WorkloadState("default", "sample")
    state.cloneset = cs
    assert summarise(state)["replicas"] == 1
