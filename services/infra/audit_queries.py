"""Read-side queries over the audit views (migrations/versions/0002_audit_views.py,
0003_sidecarset_audit_views.py and 0007_shadow_trail.py, docs/sql.md).

Plain SQL an operator could paste into psql; each function takes an open asyncpg connection. CloneSet and
SidecarSet rollouts are both listed (column ``kind``); a SidecarSet's ``namespace`` is ``''`` (it is
cluster-scoped) and its pods' own namespaces are in ``pod_namespace``.
"""

from __future__ import annotations

import asyncpg

ROLLOUTS_SQL = """
SELECT rollout_id, kind, namespace, workload, from_revision, to_revision, strategy_type, replicas,
       started, finished, duration, outcome, driven_by
FROM rollouts
WHERE ($1::text IS NULL OR namespace = $1) AND ($2::text IS NULL OR workload = $2)
  AND ($3::text IS NULL OR kind = $3)
ORDER BY started_position
"""

# "Which pods were updated in place during rollout X, and how long did each take" (all rollouts if NULL).
IN_PLACE_UPDATES_SQL = """
SELECT rollout_id, kind, pod_namespace, pod, action, requested, started, finished, duration, outcome
FROM pod_actions
WHERE in_place AND ($1::text IS NULL OR rollout_id = $1)
ORDER BY position
"""

POD_ACTIONS_SQL = """
SELECT rollout_id, kind, pod_namespace, pod, action, update_kind, requested, started, finished, duration,
       outcome, reason, driven_by
FROM pod_actions
WHERE namespace = $1 AND workload = $2
ORDER BY position
"""

CURRENT_ROLLOUT_SQL = """
SELECT r.rollout_id, r.from_revision, r.to_revision, r.strategy_type, r.started, r.outcome,
       (SELECT p.partition FROM partition_steps AS p
         WHERE p.rollout_id = r.rollout_id ORDER BY p.position DESC LIMIT 1) AS partition
FROM rollouts AS r
WHERE r.namespace = $1 AND r.workload = $2
ORDER BY r.started_position DESC
LIMIT 1
"""


async def rollouts(
    connection: asyncpg.Connection,
    namespace: str | None = None,
    workload: str | None = None,
    kind: str | None = None,
) -> list[asyncpg.Record]:
    """Rollouts in start order; ``None`` filters nothing (``kind``: ``CloneSet`` or ``SidecarSet``)."""
    return list(await connection.fetch(ROLLOUTS_SQL, namespace, workload, kind))


async def in_place_updates(
    connection: asyncpg.Connection, rollout_id: str | None = None
) -> list[asyncpg.Record]:
    return list(await connection.fetch(IN_PLACE_UPDATES_SQL, rollout_id))


async def pod_actions(connection: asyncpg.Connection, namespace: str, workload: str) -> list[asyncpg.Record]:
    return list(await connection.fetch(POD_ACTIONS_SQL, namespace, workload))


async def current_rollout(
    connection: asyncpg.Connection, namespace: str, workload: str
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(CURRENT_ROLLOUT_SQL, namespace, workload)
    return row


async def max_unavailable_exceeded(connection: asyncpg.Connection) -> list[asyncpg.Record]:
    """Moments during a rollout with more pods unavailable than allowed; empty means never exceeded."""
    return list(await connection.fetch("SELECT * FROM max_unavailable_exceeded ORDER BY position"))


async def actions_without_one_terminal(connection: asyncpg.Connection) -> list[asyncpg.Record]:
    """Requested actions with zero or several terminal events; empty means every action ended once."""
    return list(await connection.fetch("SELECT * FROM actions_without_one_terminal"))


LATEST_MAX_UNAVAILABLE_SQL = """
SELECT max_unavailable FROM partition_steps WHERE rollout_id = $1 ORDER BY position DESC LIMIT 1
"""


async def latest_max_unavailable(connection: asyncpg.Connection, rollout_id: str) -> int | None:
    """maxUnavailable (resolved to a pod count) of the rollout's latest partition step."""
    value = await connection.fetchval(LATEST_MAX_UNAVAILABLE_SQL, rollout_id)
    return None if value is None else int(value)


# Observed pod actions of a shadowed CloneSet with rollbook's verdict (docs/shadow.md), oldest first.
SHADOW_AGREEMENT_SQL = """
SELECT a.rollout_id, a.action, a.pod, a.revision, a.at, a.verdict, a.reason, a.pattern, a.unavailable,
       a.max_unavailable, a.rollbook, r.outcome AS rollout_outcome, r.from_revision, r.to_revision
FROM shadow_agreement AS a
LEFT JOIN rollouts AS r ON r.rollout_id = a.rollout_id AND r.driven_by = 'observed'
WHERE a.kind = 'CloneSet' AND a.namespace = $1 AND a.workload = $2
ORDER BY a.position
"""


async def shadow_agreement(
    connection: asyncpg.Connection, namespace: str, workload: str
) -> list[asyncpg.Record]:
    return list(await connection.fetch(SHADOW_AGREEMENT_SQL, namespace, workload))


async def quarantined_messages(connection: asyncpg.Connection) -> int:
    """Bus messages the audit quarantined (``bus_quarantine``: no matching stored event); 0 on a database
    from before that table."""
    try:
        return int(await connection.fetchval("SELECT count(*) FROM bus_quarantine"))
    except asyncpg.UndefinedTableError:
        return 0
