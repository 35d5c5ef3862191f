"""One definition of "unavailable" (services/model/availability.py): the SQL view ``unavailability``,
``rollbook replay`` and ``rollbook what-if`` count the same pods on the same trail, and replay's
``updated`` counts the pods at the update revision whatever form their revision label takes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.kinds.cloneset.rules import model
from services.model.availability import pod_available, revision_hash, unavailable
from services.model.events import RolloutStarted
from services.replay.cluster_model import ClusterModel
from services.replay.operations import replay_lines, replay_records, what_if_rollout
from services.replay.simulation import WorkloadSimulation

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def pod(ready: str | None = "True", in_place: str | None = None, terminating: bool = False) -> dict[str, Any]:
    conditions = [
        {"type": t, "status": s} for t, s in (("Ready", ready), ("InPlaceUpdateReady", in_place)) if s
    ]
    metadata: dict[str, Any] = {"name": "p"}
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    return {"metadata": metadata, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("shape", "available"),
    [
        (pod(), True),
        (pod(in_place="True"), True),
        (pod(in_place="False"), False),  # marked not ready for an in-place update, kubelet not caught up
        (pod(ready="False"), False),
        (pod(ready=None), False),  # no Ready condition yet: starting
        (pod(terminating=True), False),
    ],
    ids=["ready", "ready-inplace-true", "inplace-false", "not-ready", "no-condition", "terminating"],
)
def test_what_available_means(shape: dict[str, Any], available: bool) -> None:
    assert pod_available(shape) is available


@pytest.mark.parametrize(
    ("replicas", "pods", "expected"),
    [
        (3, [pod(), pod(), pod()], 0),
        (3, [pod(), pod()], 1),  # a missing pod is unavailable
        (
            3,
            [pod(), pod(), pod(terminating=True), pod(ready="False")],
            1,
        ),  # recreate: old going, new starting
        (3, [pod(), pod(), pod(), pod(ready="False")], 0),  # a surge pod starting takes nothing away
        (2, [pod(in_place="False"), pod(ready="False")], 2),
        (0, [pod(ready="False")], 0),
    ],
)
def test_unavailable_counts_against_replicas(
    replicas: int, pods: list[dict[str, Any]], expected: int
) -> None:
    assert unavailable(replicas, pods) == expected


def test_revision_hash_reads_full_names_and_bare_hashes() -> None:
    assert revision_hash("sample-7656fc4998") == revision_hash("7656fc4998") == "7656fc4998"
    assert revision_hash("sample-data-66f47ff445") == "66f47ff445"
    assert revision_hash(None) == ""


@pytest.mark.parametrize(
    "strategy",
    [
        {"type": "InPlaceIfPossible", "maxUnavailable": 1},
        {"type": "ReCreate", "maxUnavailable": 1},
        {"type": "InPlaceIfPossible", "maxUnavailable": 2, "maxSurge": 1},
    ],
    ids=["in-place", "recreate", "in-place-surge"],
)
@pytest.mark.asyncio(loop_scope="session")
async def test_views_replay_and_what_if_agree_on_the_same_trail(
    event_store: EventStore, database_url: str, strategy: dict[str, Any]
) -> None:
    namespace = f"unavailable-{strategy['type'].lower()}-{strategy.get('maxSurge', 0)}"
    history = WorkloadSimulation(namespace, "web", replicas=4, start=T0, strategy=strategy).run()
    await event_store.import_events(history)
    started = next(e.payload for e in history if isinstance(e.payload, RolloutStarted))
    assert isinstance(started, RolloutStarted)
    rollout = started.rollout_id

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        span = await connection.fetchrow(
            "SELECT started_position, finished_position FROM rollouts WHERE rollout_id = $1", rollout
        )
        by_view = await connection.fetchval(
            "SELECT max(unavailable) FROM unavailability WHERE kind = 'CloneSet' AND namespace = $1"
            " AND workload = 'web' AND position > $2 AND position < $3",
            namespace, span["started_position"], span["finished_position"],
        )  # fmt: skip
    finally:
        await connection.close()
    records = await replay_records(event_store, rollout)
    by_replay = max(
        r["state"]["unavailable"]
        for r in records
        if span["started_position"] < r["position"] < span["finished_position"]
    )
    by_what_if = (await what_if_rollout(event_store, rollout, {})).recorded.max_unavailable
    assert by_view is not None and by_view >= 1  # the rollout did take pods out of service
    assert by_view == by_replay == by_what_if, (by_view, by_replay, by_what_if)
    assert by_view <= int(strategy["maxUnavailable"])

    # After the rollout every pod is at the update revision: replay says so (it said updated=0 when it
    # compared the pods' revision label with the revision's full name).
    last = (await replay_lines(event_store, f"{namespace}/web"))[-1]
    assert " updated=4 " in last and " unavailable=0 " in last, last


def _carried_out(actions: list[model.Action]) -> dict[str, Any]:
    running = {"metadata": {"name": "web-0", "uid": "u0"}, "spec": {"containers": [{"name": "app"}]}}
    running["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
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
