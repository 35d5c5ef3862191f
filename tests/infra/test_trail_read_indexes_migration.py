"""Migration 0027: the views answer exactly as before, one workload and one rollout through indexes.

A trail is stored at 0026: a CloneSet observed with two ready pods, a rollout whose partition step allows
no pod unavailable, a pod observed not ready during it (a row of ``max_unavailable_exceeded``), an in-place
update with its marks and outcomes, and a request with no outcome (a row of
``actions_without_one_terminal``). After the upgrade every view returns the same rows (plus
``rollout_key`` where it is new), the read commands' queries go through the new indexes (the plan says
so, with sequential scans off so that a tiny table cannot hide it), and the downgrade restores the views
and drops what the upgrade added."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from services.model.events import (
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionRequested,
    PodActionSucceeded,
    RolloutCompleted,
    RolloutStarted,
)
from tests.infra.store_helpers import import_trail
from tests.infra.test_store_migrations import _alembic, _views
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 12, 7, tzinfo=UTC)
STREAM, OBSERVED, ACTIONS = "CloneSet/ops/web", "CloneSet/ops/web/observed", "CloneSet/ops/web/actions"
ROLLOUT = "ops/web@web-2#1"
VIEWS = (
    "rollouts",
    "partition_steps",
    "pod_actions",
    "action_outcomes",
    "actions_without_one_terminal",
    "unavailability",
    "max_unavailable_exceeded",
)
NEW_INDEXES = {
    "events_workload_idx",
    "events_rollout_pod_idx",
    "events_rollout_started_key_idx",
    "events_rollout_started_idx",
}


def _pod(name: str, ready: bool) -> ObjectObserved:
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    pod = {"metadata": {"name": name}, "status": status}
    return ObjectObserved(kind="Pod", namespace="ops", name=name, uid=name, resource_version="1",
                          change="MODIFIED", object=pod)  # fmt: skip


def _request(action_id: str, action: str, details: dict[str, Any] | None = None) -> PodActionRequested:
    return PodActionRequested(action_id=action_id, action=action, namespace="ops", pod="web-a",
                              rollout_id=ROLLOUT, details=details or {})  # fmt: skip


def _trail() -> list[tuple[str, Event]]:
    cloneset = ObjectObserved(kind="CloneSet", namespace="ops", name="web", uid="cs", resource_version="1",
                              change="ADDED", object={"spec": {"replicas": 2}})  # fmt: skip
    not_ready = {"condition": {"type": "InPlaceUpdateReady", "status": "False"}}
    return [
        (OBSERVED, cloneset),
        (OBSERVED, _pod("web-a", True)),
        (OBSERVED, _pod("web-b", True)),
        (
            STREAM,
            RolloutStarted(
                rollout_id=ROLLOUT,
                from_revision="web-1",
                to_revision="web-2",
                strategy={"type": "InPlaceIfPossible"},
                replicas=2,
            ),
        ),  # fmt: skip
        (
            STREAM,
            PartitionStepPlanned(
                rollout_id=ROLLOUT,
                partition=0,
                replicas=2,
                expected_updated=2,
                max_unavailable=0,
                max_surge=0,
            ),
        ),  # fmt: skip
        (STREAM, _request("a-mark", "markNotReady", not_ready)),
        (ACTIONS, PodActionSucceeded(action_id="a-mark", executor="e")),
        (OBSERVED, _pod("web-a", False)),
        (STREAM, _request("a-update", "updateInPlace")),
        (ACTIONS, PodActionSucceeded(action_id="a-update", executor="e")),
        (STREAM, _request("a-ready", "markReady")),
        (ACTIONS, PodActionSucceeded(action_id="a-ready", executor="e")),
        (OBSERVED, _pod("web-a", True)),
        (STREAM, _request("b-update", "updateInPlace")),  # no outcome: a row of actions_without_one_terminal
        (STREAM, RolloutCompleted(rollout_id=ROLLOUT, revision="web-2")),
    ]


async def _rows(conn: asyncpg.Connection, view: str, columns: list[str]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch(f"SELECT {', '.join(columns)} FROM {view} ORDER BY 1, 2, 3")]


async def _plan(conn: asyncpg.Connection, sql: str) -> str:
    return "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {sql}"))


async def _uses(conn: asyncpg.Connection, plan: str, index: str) -> bool:
    """Whether the plan reads through ``index``: on the partitioned ``events`` a plan names each
    partition's copy of the index, not the parent's."""
    names = {index} | {
        r[0]
        for r in await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1",
            index,
        )
    }
    return any(f" {name} " in plan or plan.endswith(f" {name}") for name in names)


async def test_views_answer_as_before_and_one_rollout_reads_through_indexes(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0026_events_partitioned")
        original = await _views(url)
        await import_trail(url, _trail(), T0)  # not appends: they read tables of 0028
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            columns = {
                view: [r[0] for r in await conn.fetch(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $1"
                    " ORDER BY ordinal_position", view)]
                for view in VIEWS
            }  # fmt: skip
            before = {view: await _rows(conn, view, columns[view]) for view in VIEWS}
            assert len(before["max_unavailable_exceeded"]) == 1
            assert [r[0] for r in before["actions_without_one_terminal"]] == ["b-update"]
        finally:
            await conn.close()

        _alembic(url, "upgrade", "0027_trail_read_indexes")
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            for view in VIEWS:
                assert await _rows(conn, view, columns[view]) == before[view], view
            for view in (
                "rollouts",
                "partition_steps",
                "actions_without_one_terminal",
                "max_unavailable_exceeded",
            ):
                keys = {r[0] for r in await conn.fetch(f"SELECT rollout_key FROM {view}")}
                assert keys == {"ops/web@web-2"}, view
            # The read commands' queries, as they run them.
            current = await audit_queries.current_rollout(conn, "ops", "web")
            assert current is not None and current["rollout_id"] == ROLLOUT and current["partition"] == 0
            assert await audit_queries.latest_max_unavailable(conn, ROLLOUT) == 0
            assert [r["rollout_id"] for r in await audit_queries.timeline_rollouts(conn, ROLLOUT)] == [
                ROLLOUT
            ]
            assert [r["partition"] for r in await audit_queries.partition_steps(conn, ROLLOUT)] == [0]
            await conn.execute("SET enable_seqscan = off")
            pod_actions = audit_queries.POD_ACTIONS_SQL.replace("$1", "'ops'").replace("$2", "'web'")
            workload = await _plan(conn, pod_actions.replace("$3", "NULL"))
            assert await _uses(conn, workload, "events_workload_idx"), workload
            # The marks' lookup by rollout and pod: which index a plan picks for it on tables this small
            # varies with the partitions; that every partition has it is what the migration owes.
            partitions = await conn.fetchval(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
                " WHERE p.relname = 'events'"
            )
            copies = await conn.fetchval(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
                " WHERE p.relname = 'events_rollout_pod_idx'"
            )
            assert partitions >= 2 and copies == partitions
            one = "rollout_key = split_part($1, '#', 1) AND rollout_id = $1"
            literal = one.replace("$1", f"'{ROLLOUT}'")
            plan = await _plan(conn, f"SELECT * FROM rollouts WHERE {literal}")
            assert await _uses(conn, plan, "events_rollout_started_key_idx"), plan
            plan = await _plan(conn, f"SELECT * FROM max_unavailable_exceeded WHERE {literal}")
            assert await _uses(conn, plan, "events_rollout_started_key_idx"), plan
            assert "unavailability_of" in plan, plan
            assert [r["rollout_id"] for r in await audit_queries.timeline_rollouts(conn)] == [ROLLOUT]
            plan = await _plan(conn, audit_queries.TIMELINE_NEWEST_SQL.replace("$1", "500"))
            assert await _uses(conn, plan, "events_rollout_started_idx"), plan
            assert await _uses(conn, plan, "events_rollout_started_key_idx"), plan
        finally:
            await conn.close()

        _alembic(url, "downgrade", "0026_events_partitioned")
        assert await _views(url) == original
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            indexes = {
                r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'events'")
            }
            assert not indexes & NEW_INDEXES
            assert not await conn.fetchval("SELECT count(*) FROM pg_statistic_ext")
            assert not await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'unavailability_of'")
        finally:
            await conn.close()
