"""Migration 0018: trails recorded before rollout ids were numbered read with their rollouts apart.

Rows recorded under the old ids (``<ns>/<name>@<revision>``, shared by a rollback and the rollout it
returns to) are stored, then the database is migrated: the views give each rollout the id the planner
gives it now (``...#<sequence>``), so a rollback is its own row with its own actions; the downgrade
restores the views exactly."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import asyncpg

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.model.events import (
    Event,
    PartitionStepPlanned,
    PodActionRequested,
    RolloutCompleted,
    RolloutStarted,
    new_event,
)
from tests.infra.test_store_migrations import _alembic, _views
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 12, 1, tzinfo=UTC)
STREAM = "CloneSet/default/web"


def _legacy_trail() -> list[Event]:
    """first sight at A (2 pods created), A -> B, B -> A (the rollback), each one pod per action."""
    a, b = "default/web@web-a", "default/web@web-b"
    return [
        RolloutCompleted(rollout_id=a, revision="web-a"),
        PodActionRequested(action_id="c1", action="createPod", namespace="default", pod="p1", rollout_id=a),
        PodActionRequested(action_id="c2", action="createPod", namespace="default", pod="p2", rollout_id=a),
        RolloutStarted(rollout_id=b, from_revision="web-a", to_revision="web-b", strategy={}, replicas=2),
        PartitionStepPlanned(
            rollout_id=b, partition=0, replicas=2, expected_updated=2, max_unavailable=1, max_surge=0
        ),
        PodActionRequested(action_id="u1", action="recreatePod", namespace="default", pod="p1", rollout_id=b),
        RolloutCompleted(rollout_id=b, revision="web-b"),
        RolloutStarted(rollout_id=a, from_revision="web-b", to_revision="web-a", strategy={}, replicas=2),
        PartitionStepPlanned(
            rollout_id=a, partition=0, replicas=2, expected_updated=2, max_unavailable=1, max_surge=0
        ),
        PodActionRequested(action_id="u2", action="recreatePod", namespace="default", pod="p1", rollout_id=a),
        RolloutCompleted(rollout_id=a, revision="web-a"),
    ]


async def test_old_trail_rollouts_split_by_their_sequence(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0013_inplace_mark_of_its_own")
        original = await _views(url)
        store = await EventStore.connect(url)
        try:
            events = [
                new_event(p, stream=STREAM, stream_version=i + 1, occurred_at=T0 + timedelta(seconds=i))
                for i, p in enumerate(_legacy_trail())
            ]
            # COPY: the store's versioned appends read tables of later migrations (0026).
            await store.import_events(events)
        finally:
            await store.close()
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            before = await conn.fetch("SELECT rollout_id FROM rollouts ORDER BY started_position")
            assert [r[0] for r in before] == ["default/web@web-b", "default/web@web-a"]
            _alembic(url, "upgrade", "0018_rollout_sequence")
            rollouts = await conn.fetch("SELECT rollout_id, outcome FROM rollouts ORDER BY started_position")
            assert [tuple(r) for r in rollouts] == [
                ("default/web@web-b#1", "succeeded"),
                ("default/web@web-a#2", "succeeded"),
            ]
            actions = await conn.fetch("SELECT action_id, rollout_id FROM pod_actions ORDER BY position")
            assert [tuple(r) for r in actions] == [
                ("c1", "default/web@web-a#0"),
                ("c2", "default/web@web-a#0"),
                ("u1", "default/web@web-b#1"),
                ("u2", "default/web@web-a#2"),
            ]
            steps = await conn.fetch("SELECT rollout_id FROM partition_steps ORDER BY position")
            assert [r[0] for r in steps] == ["default/web@web-b#1", "default/web@web-a#2"]
            # a numbered id (recorded by this rollbook) reads as recorded
            assert await conn.fetchval("SELECT rollout_of('x', 1, 'default/web@web-a#7')") == (
                "default/web@web-a#7"
            )
        finally:
            await conn.close()
        _alembic(url, "downgrade", "0013_inplace_mark_of_its_own")
        # The views are rewritten from their stored text, which Postgres re-parses: the same views, up to
        # the parentheses its deparser puts around a chain of ORs.
        assert _unparenthesised(await _views(url)) == _unparenthesised(original)


def _unparenthesised(views: dict[str, tuple[str, str | None]]) -> dict[str, tuple[str, str | None]]:
    return {name: (re.sub(r"[()\s]", "", sql), comment) for name, (sql, comment) in views.items()}
