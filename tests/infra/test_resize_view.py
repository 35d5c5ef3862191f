"""``pod_actions`` over a resize (migration 0024_resize): one row of kind ``resize`` from its request to the
kubelet's actuation, pending while the kubelet defers it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from tests.infra.audit_helpers import T0, Trail

pytestmark = pytest.mark.asyncio(loop_scope="session")

TARGET = {"app": {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}}


def _pod(name: str, namespace: str, cpu: str, condition: str | None = None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    conditions = [{"type": "Ready", "status": "True"}]
    if condition is not None:
        conditions.append({"type": condition, "status": "True", "reason": "Deferred"})
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": conditions, "containerStatuses": [{"name": "app", "resources": resources}]},
    }


async def _rows(database_url: str, namespace: str) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        sql = "SELECT * FROM pod_actions WHERE namespace = $1 AND action = 'resize'"
        return [dict(r) for r in await connection.fetch(sql, namespace)]
    finally:
        await connection.close()


async def test_a_resize_spans_its_request_to_the_kubelets_actuation(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.observe_cloneset(1, 0)
    await trail._observe("Pod", "web-0", _pod("web-0", trail.namespace, "100m"), "MODIFIED", 0.5)
    await trail.start_rollout(10, replicas=1)
    resize = await trail.request(
        "resize", "web-0", 10, {"action": "resize", "pod": "web-0", "resources": TARGET}
    )
    await trail.succeed(resize, 10.2, taken=10.1)
    # Deferred by the kubelet, then in progress: not finished yet.
    pending = _pod("web-0", trail.namespace, "100m", "PodResizePending")
    await trail._observe("Pod", "web-0", pending, "MODIFIED", 11)
    [row] = await _rows(database_url, trail.namespace)
    assert (row["update_kind"], row["in_place"], row["outcome"], row["finished"]) == (
        "resize",
        True,
        "pending",
        None,
    )
    in_progress = _pod("web-0", trail.namespace, "200m", "PodResizeInProgress")
    await trail._observe("Pod", "web-0", in_progress, "MODIFIED", 13)
    await trail._observe("Pod", "web-0", _pod("web-0", trail.namespace, "200m"), "MODIFIED", 14)
    [row] = await _rows(database_url, trail.namespace)
    assert row["outcome"] == "succeeded"
    assert row["requested"] == T0 + timedelta(seconds=10)
    assert row["finished"] == T0 + timedelta(seconds=14)
    assert row["duration"] == timedelta(seconds=4)
