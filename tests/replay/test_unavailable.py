"""One definition of "unavailable" (services/model/availability.py; its table tests are
tests/model/test_availability.py, its SQL twin's tests/infra/test_availability_sql.py): the SQL view
``unavailability``, ``rollbook replay`` and ``rollbook what-if`` count the same pods on the same trail, and
replay's ``updated`` counts the pods at the update revision whatever form their revision label takes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.kinds.cloneset.rules import model
from services.model.availability import pod_available, revision_hash
from services.model.events import RolloutStarted
from services.replay.cluster_model import ClusterModel
from services.replay.operations import cloneset_frames, replay_lines, replay_records, what_if_rollout
from services.replay.simulation import WorkloadSimulation

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_revision_hash_reads_full_names_and_bare_hashes() -> None:
    assert revision_hash("sample-7656fc4998") == revision_hash("7656fc4998") == "7656fc4998"
    assert revision_hash("sample-data-66f47ff445") == "66f47ff445"
    assert revision_hash(None) == ""


@pytest.mark.parametrize(
    ("strategy", "min_ready"),
    [
        ({"type": "InPlaceIfPossible", "maxUnavailable": 1}, 0),
        ({"type": "ReCreate", "maxUnavailable": 1}, 0),
        ({"type": "InPlaceIfPossible", "maxUnavailable": 2, "maxSurge": 1}, 0),
        ({"type": "InPlaceIfPossible", "maxUnavailable": 1}, 4),
        ({"type": "ReCreate", "maxUnavailable": 2, "maxSurge": 1}, 4),
    ],
    ids=["in-place", "recreate", "in-place-surge", "in-place-min-ready", "recreate-surge-min-ready"],
)
@pytest.mark.asyncio(loop_scope="session")
async def test_views_replay_and_what_if_agree_on_the_same_trail(
    event_store: EventStore, database_url: str, strategy: dict[str, Any], min_ready: int
) -> None:
    namespace = f"unavailable-{strategy['type'].lower()}-{strategy.get('maxSurge', 0)}-{min_ready}"
    history = WorkloadSimulation(
        namespace, "web", replicas=4, start=T0, strategy=strategy, min_ready_seconds=min_ready
    ).run()
    await event_store.import_events(history)
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    rollout = started.rollout_id

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        span = await connection.fetchrow(
            "SELECT started_position, finished_position FROM rollouts WHERE rollout_id = $1", rollout
        )
        rows = await connection.fetch(
            "SELECT position, unavailable FROM unavailability WHERE kind = 'CloneSet' AND namespace = $1"
            " AND workload = 'web' AND position > $2 AND position < $3",
            namespace, span["started_position"], span["finished_position"],
        )  # fmt: skip
    finally:
        await connection.close()
    view = {r["position"]: r["unavailable"] for r in rows}
    records = await replay_records(event_store, rollout)
    replay = {r["position"]: r["state"]["unavailable"] for r in records if r["position"] in view}
    # Moment by moment (a pod waiting out minReadySeconds counted the same way), not only at the worst.
    assert replay == view
    by_view = max(view.values())
    by_what_if = (await what_if_rollout(event_store, rollout, {})).recorded.max_unavailable
    assert by_view >= 1  # the rollout did take pods out of service
    assert by_view == by_what_if, (by_view, by_what_if)
    assert by_view <= int(strategy["maxUnavailable"])
    # A pod back in service counts as available only minReadySeconds later (with nothing observed then):
    # with minReadySeconds some moments count more pods unavailable than are out of service.
    out_of_service = {
        r["position"]: max(4 - sum(pod["available"] for pod in r["state"]["pods"].values()), 0)
        for r in records
        if r["position"] in view
    }
    waiting = [p for p in view if view[p] > out_of_service[p]]
    assert bool(waiting) is bool(min_ready) and all(view[p] >= out_of_service[p] for p in view)

    # The UI's rollout reads the view's rows from the same fold as its frames: the same rows.
    ui_rows = [
        row
        for row in (await cloneset_frames(event_store, rollout)).unavailability
        if span["started_position"] <= row["position"] <= span["finished_position"]
    ]
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        sql_rows = await audit_queries.unavailability(
            connection, "CloneSet", namespace, "web", span["started_position"], span["finished_position"]
        )
    finally:
        await connection.close()
    assert ui_rows == [
        {key: value.isoformat() if isinstance(value, datetime) else value for key, value in r.items()}
        for r in sql_rows
    ]
    assert len(ui_rows) > 10

    # After the rollout every pod is at the update revision: replay says so (it said updated=0 when it
    # compared the pods' revision label with the revision's full name).
    last = (await replay_lines(event_store, f"{namespace}/web"))[-1]
    assert " updated=4 " in last and " unavailable=0 " in last, last


def _carried_out(actions: list[model.Action]) -> dict[str, Any]:
    running = {"metadata": {"name": "web-0", "uid": "u0"}, "spec": {"containers": [{"name": "app"}]}}
    running["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    cluster = ClusterModel({"spec": {}}, t0=T0, pods={"web-0": running})
    for action in actions:
        cluster.carry_out(action)
    return cluster.pods["web-0"]


def test_the_replay_cluster_takes_the_pod_out_of_service_for_both_shapes_of_an_in_place_update() -> None:
    # The merged updateInPlace (rules v10) writes its not-ready condition as the executor does, before its
    # patch; an older trail's markNotReady then updateInPlace leave the same pod.
    not_ready = {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}
    patch = {"spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]}}
    merged = _carried_out([model.UpdateInPlace(pod="web-0", revision="r2", patch=patch, not_ready=not_ready)])
    older = _carried_out(
        [
            model.MarkNotReady(pod="web-0", condition=not_ready, revision="r2"),
            model.UpdateInPlace(pod="web-0", revision="r2", patch=patch),
        ]
    )
    assert merged == older
    assert merged["spec"]["containers"][0]["image"] == "nginx:mainline"
    assert not pod_available(merged)  # InPlaceUpdateReady False before the kubelet turns Ready False
