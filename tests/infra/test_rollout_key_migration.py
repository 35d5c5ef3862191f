"""Migration 0023: pod_actions joins an in-place update to its marks through an index again.

A trail with a legacy rollout id (``...@web-b``, read as ``...#1``) and a numbered one is stored, then the
database is migrated: pod_actions answers exactly as before, plus ``rollout_key`` (the id before ``#``);
its joins and a query naming the key go through ``events_rollout_key_idx`` (the plan says so, with
sequential scans off so that a tiny table cannot hide it), the "started" lookup through
``events_action_outcome_idx``; the downgrade restores the views and drops the indexes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import asyncpg

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.model.events import (
    Event,
    PodActionRequested,
    PodActionSucceeded,
    RolloutStarted,
    new_event,
)
from tests.infra.test_store_migrations import _alembic, _views
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 12, 6, tzinfo=UTC)
STREAM = "CloneSet/default/web"
ACTIONS_STREAM = "CloneSet/default/web/actions"


def _in_place(rollout: str, pod: str, tag: str) -> list[tuple[str, Event]]:
    """markNotReady, updateInPlace, markReady of one pod in one rollout, each with its outcome."""
    steps: list[tuple[str, Event]] = []
    for action, details in (
        ("markNotReady", {"condition": {"type": "InPlaceUpdateReady", "status": "False"}}),
        ("updateInPlace", {}),
        ("markReady", {}),
    ):
        action_id = f"{tag}-{action}"
        steps.append(
            (STREAM, PodActionRequested(action_id=action_id, action=action, namespace="default", pod=pod,
                                        rollout_id=rollout, details=details))
        )  # fmt: skip
        steps.append((ACTIONS_STREAM, PodActionSucceeded(action_id=action_id, executor="e")))
    return steps


def _trail() -> list[tuple[str, Event]]:
    legacy, numbered = "default/web@web-b", "default/web@web-c#2"
    started = [
        (STREAM, RolloutStarted(rollout_id=r, from_revision="x", to_revision="y", strategy={}, replicas=1))
        for r in (legacy, numbered)
    ]
    return [started[0], *_in_place(legacy, "p1", "b"), started[1], *_in_place(numbered, "p1", "c")]


ACTIONS_SQL = (
    "SELECT action_id, rollout_id, pod, action, update_kind, requested, started, finished, outcome"
    " FROM pod_actions ORDER BY position"
)


async def test_pod_actions_reach_one_rollout_through_an_index(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0019_recorded_kinds")
        original = await _views(url)
        store = await EventStore.connect(url)
        versions: dict[str, int] = {}
        try:
            for i, (stream, payload) in enumerate(_trail()):
                versions[stream] = versions.get(stream, 0) + 1
                event = new_event(
                    payload,
                    stream=stream,
                    stream_version=versions[stream],
                    occurred_at=T0 + timedelta(seconds=i),
                )
                # COPY: the store's versioned appends read tables of later migrations (0026).
                await store.import_events([event])
        finally:
            await store.close()
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            before = [tuple(r) for r in await conn.fetch(ACTIONS_SQL)]
            assert [(r[1], r[4]) for r in before] == [
                ("default/web@web-b#1", "in place"),
                ("default/web@web-c#2", "in place"),
            ]
            _alembic(url, "upgrade", "0023_operator_finish")
            assert [tuple(r) for r in await conn.fetch(ACTIONS_SQL)] == before
            keys = await conn.fetch("SELECT rollout_id, rollout_key FROM pod_actions ORDER BY position")
            assert [tuple(r) for r in keys] == [
                ("default/web@web-b#1", "default/web@web-b"),
                ("default/web@web-c#2", "default/web@web-c"),
            ]
            await conn.execute("SET enable_seqscan = off")
            plan = "\n".join(
                r[0] for r in await conn.fetch("EXPLAIN SELECT * FROM pod_actions WHERE workload = 'web'")
            )
            assert "events_rollout_key_idx" in plan and "events_action_outcome_idx" in plan, plan
            one = (
                "SELECT action_id FROM pod_actions"
                " WHERE rollout_key = split_part($1, '#', 1) AND rollout_id = $1"
            )
            assert [r[0] for r in await conn.fetch(one, "default/web@web-b#1")] == ["b-updateInPlace"]
            literal = one.replace("$1", "'x#1'")
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {literal}"))
            assert "events_rollout_key_idx" in plan, plan
        finally:
            await conn.close()
        _alembic(url, "downgrade", "0019_recorded_kinds")
        assert _unparenthesised(await _views(url)) == _unparenthesised(original)
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            indexes = {
                r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'events'")
            }
            assert not indexes & {"events_rollout_key_idx", "events_action_outcome_idx"}
        finally:
            await conn.close()


def _unparenthesised(views: dict[str, tuple[str, str | None]]) -> dict[str, tuple[str, str | None]]:
    return {name: (re.sub(r"[()\s]", "", sql), comment) for name, (sql, comment) in views.items()}
