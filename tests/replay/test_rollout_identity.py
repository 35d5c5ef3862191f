"""Every rollout its own id (issue: a rollback reused the rollout id, mixing two rollouts in the trail).

A CloneSet rolled A -> B -> A (a rollback) and A -> B -> A -> B (a second roll to B) through the planner's
own code path (services/replay/simulation.py), stored, and read back by everything that names rollouts:
the decisions, the SQL views, the live tree's batches, replay and what-if."""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from datetime import timedelta

import asyncpg
import pytest

from services.cli.rollout_view import PodAction, RolloutView
from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.model.events import Envelope, PodActionRequested, RolloutCompleted, RolloutStarted
from services.planner.kinds import CLONESET
from services.replay.operations import replay_lines, what_if_rollout
from services.replay.reads import TargetError
from services.replay.simulation import T0, WorkloadSimulation
from services.replay.verify import verify_streams

SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")


def rolled(namespace: str, images: list[str]) -> tuple[WorkloadSimulation, list[Envelope]]:
    """The simulation's A -> B at 30 s, then one more template change per image, 90 s apart."""
    simulation = WorkloadSimulation(namespace, "web", replicas=3, start=T0)
    spec = copy.deepcopy(simulation.model.cloneset)
    for index, image in enumerate(images):
        spec = copy.deepcopy(spec)
        spec.pop("status", None)
        spec["spec"]["template"]["spec"]["containers"][0]["image"] = image
        spec["metadata"]["generation"] = 3 + index
        simulation.model.schedule_spec(120.0 + 90.0 * index, spec)
    return simulation, simulation.run(limit=5000)


def starts(events: list[Envelope]) -> list[RolloutStarted]:
    return [e.payload for e in events if isinstance(e.payload, RolloutStarted)]


def test_a_rollback_and_a_second_roll_are_rollouts_of_their_own() -> None:
    namespace = f"ri-{uuid.uuid4().hex[:8]}"
    _, events = rolled(namespace, ["nginx:alpine", "nginx:mainline"])  # A -> B -> A -> B
    rollouts = starts(events)
    a, b = rollouts[0].from_revision, rollouts[0].to_revision
    assert [(r.to_revision, r.rollout_id) for r in rollouts] == [
        (b, f"{namespace}/web@{b}#1"),
        (a, f"{namespace}/web@{a}#2"),
        (b, f"{namespace}/web@{b}#3"),
    ]
    completed = [e.payload for e in events if isinstance(e.payload, RolloutCompleted)]
    assert [c.rollout_id for c in completed if c.outcome == "succeeded"][-3:] == [
        r.rollout_id for r in rollouts
    ]
    # each rollout's actions are requested between its start and its end, none under another's id
    per_rollout = Counter(e.payload.rollout_id for e in events if isinstance(e.payload, PodActionRequested))
    assert set(per_rollout) == {f"{namespace}/web@{a}#0"} | {r.rollout_id for r in rollouts}
    # the recorded trail verifies exactly: the ids come from the folded state, not a clock
    report = verify_streams(
        CLONESET,
        f"{namespace}/web",
        *(
            [e for e in events if e.stream == stream]
            for stream in CLONESET.new_state(f"{namespace}/web").streams
        ),
    )
    assert report.divergence is None and report.rounds > 0


@SESSION_LOOP
async def test_views_tree_replay_and_what_if_keep_a_rollback_apart(
    event_store: EventStore, database_url: str
) -> None:
    namespace = f"ri-{uuid.uuid4().hex[:8]}"
    simulation, events = rolled(namespace, ["nginx:alpine"])  # A -> B -> A
    await event_store.import_events(events)
    forward, back = starts(events)
    a, b = forward.from_revision, forward.to_revision
    assert (forward.rollout_id, back.rollout_id) == (f"{namespace}/web@{b}#1", f"{namespace}/web@{a}#2")

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        rows = await connection.fetch(
            "SELECT rollout_id, to_revision, outcome FROM rollouts WHERE namespace = $1"
            " ORDER BY started_position",
            namespace,
        )
        actions = await connection.fetch(
            "SELECT pod, action, rollout_id, requested, finished, outcome, update_kind FROM pod_actions"
            " WHERE namespace = $1 ORDER BY position",
            namespace,
        )
    finally:
        await connection.close()
    assert [tuple(r) for r in rows] == [
        (forward.rollout_id, b, "succeeded"),
        (back.rollout_id, a, "succeeded"),
    ]
    by_rollout = Counter(r["rollout_id"] for r in actions if r["update_kind"] is not None)
    assert by_rollout == {forward.rollout_id: 3, back.rollout_id: 3}  # each updates the 3 pods once
    creations = {r["rollout_id"] for r in actions if r["action"] == "createPod"}
    assert creations == {f"{namespace}/web@{a}#0"}  # the first pods are not the rollback's

    # the live tree numbers the rollback's batches from 1
    cloneset = simulation.model.cloneset
    view = RolloutView.read(
        cloneset,
        list(simulation.model.pods.values()),
        [
            PodAction(
                r["pod"],
                r["action"],
                r["rollout_id"],
                r["requested"],
                r["finished"],
                r["outcome"],
                r["update_kind"] == "in place",
            )
            for r in actions
        ],  # fmt: skip
        None,
        back.rollout_id,
        "succeeded",
        T0 + timedelta(hours=1),
    )
    batches = sorted({p.batch for p in view.pods if p.batch is not None})
    assert batches and batches[0] == 1 and batches == list(range(1, len(batches) + 1))

    # replay of the rollback spans the rollback only; what-if re-plans the rollback, not the first rollout
    lines = await replay_lines(event_store, back.rollout_id)
    assert lines and not any("RolloutStarted" in line and f"@{b}" in line for line in lines)
    result = await what_if_rollout(event_store, back.rollout_id, {"maxUnavailable": 3})
    assert result.rollout_id == back.rollout_id
    assert result.recorded.completed
    # an id without its number names the one rollout to that revision
    assert (await what_if_rollout(event_store, f"{namespace}/web@{a}", {})).rollout_id == back.rollout_id


@SESSION_LOOP
async def test_an_id_naming_two_rollouts_is_refused(event_store: EventStore) -> None:
    namespace = f"ri-{uuid.uuid4().hex[:8]}"
    _, events = rolled(namespace, ["nginx:alpine", "nginx:mainline"])  # A -> B -> A -> B
    await event_store.import_events(events)
    b = starts(events)[0].to_revision
    with pytest.raises(TargetError, match="names 2 rollouts"):
        await what_if_rollout(event_store, f"{namespace}/web@{b}", {})
    second = await what_if_rollout(event_store, f"{namespace}/web@{b}#3", {})
    assert second.rollout_id == f"{namespace}/web@{b}#3"
