"""Migration 0031: ``max_unavailable_exceeded`` reads a rollout's partition steps once and answers exactly as
0027's view did.

A trail is stored at 0030: a 3-pod CloneSet whose rollout plans three partition steps with different
limits (0, then 2, then 1) and observes pods going unavailable before the first step, under and over each
limit, and after the rollout. Each moment must be held against the latest step before it: the view lists
two moments (2 unavailable over a limit of 0, 3 over 1), the same before and after the upgrade, one rollout
at a time and the whole log; the downgrade restores 0030's views."""

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
    RolloutCompleted,
    RolloutStarted,
)
from tests.infra.store_helpers import import_trail
from tests.infra.test_store_migrations import _alembic, _views
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 12, 7, tzinfo=UTC)
STREAM, OBSERVED = "CloneSet/ops/web", "CloneSet/ops/web/observed"
ROLLOUT = "ops/web@web-2#1"
ONE_ROLLOUT = "rollout_key = split_part($1, '#', 1) AND rollout_id = $1"


def _pod(name: str, ready: bool) -> ObjectObserved:
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    pod = {"metadata": {"name": name}, "status": status}
    return ObjectObserved(kind="Pod", namespace="ops", name=name, uid=name, resource_version="1",
                          change="MODIFIED", object=pod)  # fmt: skip


def _step(max_unavailable: int) -> PartitionStepPlanned:
    return PartitionStepPlanned(rollout_id=ROLLOUT, partition=0, replicas=3, expected_updated=3,
                                max_unavailable=max_unavailable, max_surge=0)  # fmt: skip


def _trail() -> list[tuple[str, Event]]:
    cloneset = ObjectObserved(kind="CloneSet", namespace="ops", name="web", uid="cs", resource_version="1",
                              change="ADDED", object={"spec": {"replicas": 3}})  # fmt: skip
    started = RolloutStarted(rollout_id=ROLLOUT, from_revision="web-1", to_revision="web-2",
                             strategy={"type": "InPlaceIfPossible"}, replicas=3)  # fmt: skip
    return [
        (OBSERVED, cloneset),
        (OBSERVED, _pod("web-a", True)),
        (OBSERVED, _pod("web-b", True)),
        (OBSERVED, _pod("web-c", True)),
        (STREAM, started),
        (OBSERVED, _pod("web-a", False)),  # 1 unavailable before any step: no limit yet
        (STREAM, _step(0)),
        (OBSERVED, _pod("web-b", False)),  # 2 > 0: listed
        (STREAM, _step(2)),
        (OBSERVED, _pod("web-a", True)),  # 1 <= 2
        (OBSERVED, _pod("web-c", False)),  # 2 <= 2
        (STREAM, _step(1)),
        (OBSERVED, _pod("web-a", False)),  # 3 > 1: listed
        (STREAM, RolloutCompleted(rollout_id=ROLLOUT, revision="web-2")),
        (OBSERVED, _pod("web-a", False)),  # after the rollout
    ]


async def _exceeded(conn: asyncpg.Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows of one rollout (as docs/sql.md asks for them) and of the whole log, in position order."""
    one = await conn.fetch(
        f"SELECT * FROM max_unavailable_exceeded WHERE {ONE_ROLLOUT} ORDER BY position", ROLLOUT
    )
    return [tuple(r) for r in one], [tuple(r) for r in await audit_queries.max_unavailable_exceeded(conn)]


async def test_exceeded_moments_are_held_against_the_latest_step_as_before(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0030_partition_statistics")
        original = await _views(url)
        await import_trail(url, _trail(), T0)
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            before = await _exceeded(conn)
        finally:
            await conn.close()
        one, whole = before
        assert [(r[9], r[10]) for r in one] == [(2, 0), (3, 1)]  # (unavailable, max_unavailable)
        assert whole == one

        _alembic(url, "upgrade", "0031_exceeded_steps_once")
        conn = await asyncpg.connect(asyncpg_url(url))
        try:
            assert await _exceeded(conn) == before
        finally:
            await conn.close()

        _alembic(url, "downgrade", "0030_partition_statistics")
        assert await _views(url) == original
