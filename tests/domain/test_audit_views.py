"""The SQL views of the audit trail (docs/sql.md) over event logs written through the real event store.

Each test writes one workload's trail (its own namespace) the way the services write it: observations on
``…/observed``, the planner's decisions on the workload stream, outcomes on ``…/actions``; then reads the
views with plain SQL. The end-to-end counterpart (views over a log written by the running services) is
tests/e2e/test_audit_views_e2e.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.domain import audit_queries
from services.domain.database import asyncpg_url
from services.domain.store import EventStore
from tests.domain.audit_helpers import NEW, OLD, T0, Trail

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _rows(database_url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return [dict(r) for r in await connection.fetch(sql, *args)]
    finally:
        await connection.close()


async def test_a_rollout_one_pod_at_a_time_reads_back_as_one_row_per_view(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.start_rollout(10)
    for index in range(3):
        await trail.update_in_place(f"web-{index}", 10 + 5 * index)
    await trail.complete(30)

    rollouts = await _rows(database_url, "SELECT * FROM rollouts WHERE namespace = $1", trail.namespace)
    assert len(rollouts) == 1
    rollout = rollouts[0]
    assert (rollout["rollout_id"], rollout["workload"], rollout["from_revision"], rollout["to_revision"]) == (
        trail.rollout, "web", OLD, NEW,
    )  # fmt: skip
    assert rollout["strategy_type"] == "InPlaceIfPossible"
    assert rollout["started"] == T0 + timedelta(seconds=10)
    assert rollout["finished"] == T0 + timedelta(seconds=30)
    assert rollout["duration"] == timedelta(seconds=20)
    assert rollout["outcome"] == "succeeded"

    revisions = await _rows(database_url, "SELECT * FROM revisions WHERE namespace = $1", trail.namespace)
    assert [(r["revision"], r["number"], r["images"]) for r in revisions] == [(NEW, 2, ["web:2"])]
    steps = await _rows(database_url, "SELECT * FROM partition_steps WHERE rollout_id = $1", trail.rollout)
    assert [(s["partition"], s["max_unavailable"], s["expected_updated"]) for s in steps] == [(0, 1, 3)]

    # The question of issue 5, as one SELECT: which pods were updated in place in rollout X, how long each.
    in_place = await _rows(
        database_url,
        "SELECT pod, requested, finished, duration, outcome FROM pod_actions"
        " WHERE rollout_id = $1 AND in_place ORDER BY requested",
        trail.rollout,
    )
    assert [r["pod"] for r in in_place] == ["web-0", "web-1", "web-2"]
    first = in_place[0]
    # From the markNotReady request (pod leaves service) to markReady's outcome (back in service).
    assert first["requested"] == T0 + timedelta(seconds=10)
    assert first["finished"] == T0 + timedelta(seconds=13.2)
    assert first["duration"] == timedelta(seconds=3.2)
    assert {r["outcome"] for r in in_place} == {"succeeded"}
    every = await _rows(database_url, "SELECT action FROM pod_actions WHERE namespace = $1", trail.namespace)
    assert {r["action"] for r in every} == {"updateInPlace"}  # the mark steps belong to their update

    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert [r["pod"] for r in await audit_queries.in_place_updates(connection, trail.rollout)] == [
            "web-0", "web-1", "web-2",
        ]  # fmt: skip
        assert [
            r
            for r in await audit_queries.max_unavailable_exceeded(connection)
            if r["namespace"] == trail.namespace
        ] == []
        assert [
            r for r in await audit_queries.actions_without_one_terminal(connection)
            if r["namespace"] == trail.namespace
        ] == []  # fmt: skip
    finally:
        await connection.close()


async def test_unavailability_counts_not_ready_missing_and_terminating_pods(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.observe_pod("web-0", 1, ready=False)
    await trail.observe_pod("web-1", 2, terminating=True)
    await trail.observe_pod("web-1", 3, deleted=True)
    await trail.observe_cloneset(4, 4)
    await trail.observe_pod("web-0", 5)
    rows = await _rows(
        database_url,
        "SELECT observed, replicas, pods, available, unavailable FROM unavailability"
        " WHERE namespace = $1 ORDER BY position",
        trail.namespace,
    )
    assert [(r["observed"], r["replicas"], r["pods"], r["available"], r["unavailable"]) for r in rows] == [
        ("CloneSet/web", 3, 0, 0, 3),
        ("Pod/web-0", 3, 1, 1, 2),
        ("Pod/web-1", 3, 2, 2, 1),
        ("Pod/web-2", 3, 3, 3, 0),
        ("Pod/web-0", 3, 3, 2, 1),  # not ready
        ("Pod/web-1", 3, 2, 1, 2),  # terminating: neither a pod nor available any more
        ("Pod/web-1", 3, 2, 1, 2),  # deleted
        ("CloneSet/web", 4, 2, 1, 3),  # scaled out: the missing pods count as unavailable
        ("Pod/web-0", 4, 2, 2, 2),
    ]


async def test_max_unavailable_exceeded_lists_the_moments_over_the_limit(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.start_rollout(10, max_unavailable=1)
    await trail.observe_pod("web-0", 11, ready=False)
    await trail.observe_pod("web-1", 12, ready=False)  # a second pod down: over the limit of 1
    await trail.observe_pod("web-0", 13)
    await trail.observe_pod("web-1", 14)
    await trail.complete(15)
    await trail.observe_pod("web-2", 16, ready=False)  # after the rollout: not its business
    await trail.observe_pod("web-0", 17, ready=False)

    rows = await _rows(
        database_url,
        "SELECT rollout_id, observed, unavailable, max_unavailable, at FROM max_unavailable_exceeded"
        " WHERE namespace = $1",
        trail.namespace,
    )
    assert [(r["rollout_id"], r["observed"], r["unavailable"], r["max_unavailable"]) for r in rows] == [
        (trail.rollout, "Pod/web-1", 2, 1)
    ]
    assert rows[0]["at"] == T0 + timedelta(seconds=12)


async def test_actions_without_exactly_one_terminal_event_are_listed(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    ok = await trail.request("createPod", "web-0", 1)
    await trail.succeed(ok, 2)
    missing = await trail.request("createPod", "web-1", 1)
    twice = await trail.request("createPod", "web-2", 1)
    await trail.succeed(twice, 2)
    await trail.fail(twice, 'pods "web-2" already exists', 3)
    failed = await trail.request("deletePod", "web-3", 1)
    await trail.fail(failed, "forbidden", 2)

    rows = await _rows(
        database_url,
        "SELECT action_id, terminal_events FROM actions_without_one_terminal WHERE namespace = $1",
        trail.namespace,
    )
    assert sorted((r["action_id"], r["terminal_events"]) for r in rows) == sorted([(missing, 0), (twice, 2)])
    outcomes = {
        r["action_id"]: (r["outcome"], r["reason"])
        for r in await _rows(database_url, "SELECT * FROM pod_actions WHERE namespace = $1", trail.namespace)
    }
    assert outcomes[ok] == ("succeeded", None)
    assert outcomes[missing] == ("pending", None)
    assert outcomes[failed] == ("failed", "forbidden")


async def test_an_in_place_update_whose_pod_never_came_back_is_pending(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    mark = await trail.request("markNotReady", "web-0", 1)
    await trail.succeed(mark, 1.1)
    update = await trail.request("updateInPlace", "web-0", 3)
    await trail.succeed(update, 3.1)
    rows = await _rows(
        database_url,
        "SELECT requested, started, finished, duration, outcome FROM pod_actions WHERE namespace = $1",
        trail.namespace,
    )
    assert rows == [
        {
            "requested": T0 + timedelta(seconds=1),
            "started": T0 + timedelta(seconds=3),
            "finished": None,
            "duration": None,
            "outcome": "pending",
        }
    ]


async def test_an_in_place_update_takes_its_steps_from_its_own_rollout_only(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    earlier = trail.rollout
    mark = await trail.request("markNotReady", "web-0", 1)  # an earlier rollout, superseded mid-way
    await trail.succeed(mark, 1.1)
    trail.rollout = f"{trail.namespace}/web@web-333"
    update = await trail.request("updateInPlace", "web-0", 5)  # no grace period in this one
    await trail.succeed(update, 5.1)
    ready = await trail.request("markReady", "web-0", 6)
    await trail.succeed(ready, 6.2)
    rows = await _rows(
        database_url,
        "SELECT rollout_id, requested, started, duration FROM pod_actions WHERE namespace = $1",
        trail.namespace,
    )
    assert rows == [
        {
            "rollout_id": f"{trail.namespace}/web@web-333",
            "requested": T0 + timedelta(seconds=5),
            "started": T0 + timedelta(seconds=5),
            "duration": timedelta(seconds=1.2),
        }
    ]
    assert earlier != trail.rollout
