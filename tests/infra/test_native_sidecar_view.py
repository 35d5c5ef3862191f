"""``pod_actions`` over a native sidecar's in-place upgrade (migration 0025_native_sidecar_actions): the
sidecar reports in ``status.initContainerStatuses``, and the row finishes as an ordinary sidecar's does, at
the first observation with the sidecar restarted on a new image id and the pod Ready again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from tests.infra.audit_helpers import T0, SidecarSetTrail

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _rows(database_url: str, rollout: str) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        sql = (
            "SELECT pod, action, update_kind, in_place, outcome, requested, finished, duration"
            " FROM pod_actions WHERE rollout_id = $1 ORDER BY requested"
        )
        return [dict(r) for r in await connection.fetch(sql, rollout)]
    finally:
        await connection.close()


async def test_a_native_sidecar_upgrade_reads_back_like_an_ordinary_one(
    event_store: EventStore, database_url: str
) -> None:
    trail = SidecarSetTrail(event_store, native=True)
    pods = ["default/web-0", "default/web-1"]
    await trail.observe_sidecarset(0)
    for index, pod in enumerate(pods):
        await trail.observe_pod(pod, 0.5 + index / 10)
    await trail.start_rollout(10, pods=2)
    first = await trail.request_upgrade(pods[0], 10)
    await trail.patched(pods[0], first, 10.1)
    # Patched, the old sidecar still running and Ready: not finished.
    [row] = await _rows(database_url, trail.rollout)
    assert (row["outcome"], row["finished"]) == ("pending", None)
    await trail.restart_sidecar(pods[0], 10.5)
    await trail.upgrade(pods[1], 15)
    await trail.complete(20)

    rows = await _rows(database_url, trail.rollout)
    assert [(r["pod"], r["action"], r["update_kind"], r["in_place"], r["outcome"]) for r in rows] == [
        ("web-0", "updateSidecarInPlace", "in place", True, "succeeded"),
        ("web-1", "updateSidecarInPlace", "in place", True, "succeeded"),
    ]
    for row, at in zip(rows, (10, 15), strict=True):
        assert row["requested"] == T0 + timedelta(seconds=at)
        assert row["finished"] == T0 + timedelta(seconds=at + 1.5)
        assert row["duration"] == timedelta(seconds=1.5)
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        assert [r["pod"] for r in await audit_queries.in_place_updates(connection, trail.rollout)] == [
            "web-0",
            "web-1",
        ]
    finally:
        await connection.close()
