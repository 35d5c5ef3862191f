"""The SQL views (docs/sql.md) over the trail the four running services write for a partitioned in-place
rollout: the issue's questions answered with one SELECT each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "sample-data"
GRACE = 1


async def settled(cluster: Cluster, updated: int, image: str) -> Any:
    pods = await cluster.pods(NAME)
    status = (await cluster.cloneset(NAME)).get("status") or {}
    if (
        len(pods) == 5
        and all(is_ready(p) for p in pods.values())
        and sum(image_of(p) == image for p in pods.values()) == updated
        and status.get("updatedReadyReplicas") == updated
    ):
        return pods
    return None


async def query(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


async def test_views_answer_the_rollout_questions_from_the_services_trail(
    stack: Stack, cluster: Cluster
) -> None:
    await stack.start("auditor", "watcher", "planner", "executor")
    strategy = {
        "type": "InPlaceIfPossible",
        "partition": 2,
        "maxUnavailable": "20%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": GRACE},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: settled(cluster, 5, "nginx:alpine"), within=60, what="5 ready pods")
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    await wait_for(lambda: settled(cluster, 3, "nginx:mainline"), within=60, what="partition 2 reached")
    await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"partition": 0}}})
    pods = await wait_for(lambda: settled(cluster, 5, "nginx:mainline"), within=60, what="all updated")
    revision = (await cluster.cloneset(NAME))["status"]["updateRevision"]
    database_url = stack.settings.database_url
    rollout_id = f"default/{NAME}@{revision}#1"

    async def finished() -> list[asyncpg.Record]:
        rows = await query(database_url, "SELECT * FROM rollouts WHERE finished IS NOT NULL")
        pending = await query(database_url, "SELECT * FROM actions_without_one_terminal")
        return rows if rows and not pending else []

    rollouts = await wait_for(finished, within=30, what="the rollout and every action finished in SQL")
    assert [(r["rollout_id"], r["to_revision"], r["strategy_type"], r["outcome"]) for r in rollouts] == [
        (rollout_id, revision, "InPlaceIfPossible", "succeeded")
    ]
    steps = await query(
        database_url, "SELECT partition, max_unavailable FROM partition_steps WHERE rollout_id = $1"
        " ORDER BY position", rollout_id,
    )  # fmt: skip
    assert [(s["partition"], s["max_unavailable"]) for s in steps] == [(2, 1), (0, 1)]

    # Which pods were updated in place during the rollout, and how long did each take: one SELECT.
    updates = await query(
        database_url,
        "SELECT pod, requested, started, finished, duration, outcome FROM pod_actions"
        " WHERE rollout_id = $1 AND in_place",
        rollout_id,
    )
    assert sorted(u["pod"] for u in updates) == sorted(pods)
    assert {u["outcome"] for u in updates} == {"succeeded"}
    # Marked not ready, then (after the grace period) the image patch, then back in service. The planner
    # records the grace start with whole-second precision (as Kubernetes timestamps are), so the wait
    # between the first two can be up to a second shorter than gracePeriodSeconds: not asserted here.
    for u in updates:
        assert u["requested"] <= u["started"] <= u["finished"], u
        assert timedelta(0) < u["duration"] == u["finished"] - u["requested"] < timedelta(seconds=30)
    # When each action waited on the bus: every row started (an executor took its first step) between
    # its request and its end. Every outcome says when its action was taken; an action that had to wait
    # (an API retry, a hand-back) has one PodActionStarted as well, before its outcome, and no other has.
    every = await query(
        database_url,
        "SELECT action, pod, requested, started, queued, finished FROM pod_actions WHERE workload = $1",
        NAME,
    )
    assert len(every) > len(updates)  # the creates of the scale-up as well
    for a in every:
        assert a["requested"] <= a["started"] <= a["finished"], a
        assert a["queued"] == a["started"] - a["requested"], a
    taken = await query(
        database_url,
        "SELECT a.action_id, a.action, a.terminal_events, count(s.event_id) AS started_events,"
        " o.payload->>'started_at' AS taken_at, o.payload->>'executor' AS executor"
        " FROM action_outcomes AS a"
        " JOIN events AS o ON o.type IN ('PodActionSucceeded', 'PodActionFailed')"
        "  AND o.payload->>'action_id' = a.action_id"
        " LEFT JOIN events AS s ON s.type = 'PodActionStarted' AND s.payload->>'action_id' = a.action_id"
        " WHERE a.workload = $1 GROUP BY a.action_id, a.action, a.terminal_events, o.payload",
        NAME,
    )
    assert {"markNotReady", "updateInPlace", "markReady", "createPod"} <= {t["action"] for t in taken}
    for t in taken:
        assert t["terminal_events"] == 1 and t["taken_at"] and t["executor"], t
        assert t["started_events"] <= 1, t
    orphans = await query(
        database_url,
        "SELECT s.event_id FROM events AS s WHERE s.type = 'PodActionStarted' AND NOT EXISTS"
        " (SELECT 1 FROM events AS r WHERE r.type = 'PodActionRequested'"
        "  AND r.payload->>'action_id' = s.payload->>'action_id')",
    )
    assert orphans == []
    recreated = await query(
        database_url,
        "SELECT pod FROM pod_actions WHERE rollout_id = $1 AND update_kind = 'recreate'",
        rollout_id,
    )
    assert recreated == []

    # Pods really were unavailable during the rollout (one at a time), and never more than allowed.
    window = await query(
        database_url,
        "SELECT max(u.unavailable) FROM unavailability AS u JOIN rollouts AS r"
        " ON u.namespace = r.namespace AND u.workload = r.workload"
        " AND u.position > r.started_position AND u.position < r.finished_position WHERE r.rollout_id = $1",
        rollout_id,
    )
    assert window[0][0] == 1
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert await audit_queries.max_unavailable_exceeded(connection) == []
        assert await audit_queries.actions_without_one_terminal(connection) == []
    finally:
        await connection.close()
    assert stack.dead() == []


async def test_an_update_without_grace_is_one_action_and_the_views_see_the_pod_unavailable(
    stack: Stack, cluster: Cluster
) -> None:
    # No grace period: the planner asks for one updateInPlace per pod carrying its InPlaceUpdateReady=False
    # condition (no markNotReady); the trail still shows each pod out of service, within maxUnavailable.
    await stack.start("auditor", "watcher", "planner", "executor")
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 1}
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: settled(cluster, 5, "nginx:alpine"), within=60, what="5 ready pods")
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    pods = await wait_for(lambda: settled(cluster, 5, "nginx:mainline"), within=60, what="all updated")
    revision = (await cluster.cloneset(NAME))["status"]["updateRevision"]
    database_url = stack.settings.database_url
    rollout_id = f"default/{NAME}@{revision}#1"

    async def finished() -> list[asyncpg.Record]:
        rows = await query(database_url, "SELECT * FROM rollouts WHERE finished IS NOT NULL")
        pending = await query(database_url, "SELECT * FROM actions_without_one_terminal")
        return rows if rows and not pending else []

    await wait_for(finished, within=30, what="the rollout and every action finished in SQL")
    requested = await query(
        database_url,
        "SELECT payload->>'action' AS action, payload->>'pod' AS pod,"
        " payload->'details'->'notReady' AS not_ready FROM events"
        " WHERE type = 'PodActionRequested' AND payload->>'rollout_id' = $1",
        rollout_id,
    )
    assert "markNotReady" not in {r["action"] for r in requested}
    updates = [r for r in requested if r["action"] == "updateInPlace"]
    assert sorted(r["pod"] for r in updates) == sorted(pods)  # one action per pod
    assert all('"InPlaceUpdateReady"' in r["not_ready"] for r in updates)
    rows = await query(
        database_url,
        "SELECT pod, requested, started, finished, outcome FROM pod_actions"
        " WHERE rollout_id = $1 AND in_place",
        rollout_id,
    )
    assert sorted(r["pod"] for r in rows) == sorted(pods)
    for r in rows:  # from the updateInPlace request (the pod leaves service) to markReady's outcome
        assert r["outcome"] == "succeeded" and r["requested"] <= r["started"] <= r["finished"], r
    # Each pod was seen out of service (InPlaceUpdateReady False), one at a time, never more than allowed.
    window = await query(
        database_url,
        "SELECT max(u.unavailable) FROM unavailability AS u JOIN rollouts AS r"
        " ON u.namespace = r.namespace AND u.workload = r.workload"
        " AND u.position > r.started_position AND u.position < r.finished_position WHERE r.rollout_id = $1",
        rollout_id,
    )
    assert window[0][0] == 1
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert await audit_queries.max_unavailable_exceeded(connection) == []
        assert await audit_queries.actions_without_one_terminal(connection) == []
    finally:
        await connection.close()
    assert stack.dead() == []
