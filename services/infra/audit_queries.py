"""Read-side queries over the audit views (migrations/versions/0002_audit_views.py,
0003_sidecarset_audit_views.py and 0007_shadow_trail.py, docs/sql.md).

Plain SQL an operator could paste into psql; each function takes an open asyncpg connection. One
rollout's rows are asked for by ``rollout_key`` (its id before ``#``, indexed) as well as by id: the id
alone is computed per row (``rollout_of``), which reads every rollout of the log. CloneSet and
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
WHERE namespace = $1 AND workload = $2 AND ($3::text IS NULL OR kind = $3)
ORDER BY position
"""

CURRENT_ROLLOUT_SQL = """
SELECT r.rollout_id, r.from_revision, r.to_revision, r.strategy_type, r.started, r.outcome,
       (SELECT p.partition FROM partition_steps AS p
         WHERE p.rollout_key = r.rollout_key AND p.rollout_id = r.rollout_id
         ORDER BY p.position DESC LIMIT 1) AS partition
FROM rollouts AS r
WHERE r.namespace = $1 AND r.workload = $2 AND ($3::text IS NULL OR r.kind = $3)
ORDER BY r.started_position DESC
LIMIT 1
"""


ARCHIVED_SQL = """
SELECT EXISTS (
    SELECT 1 FROM archived_stream_heads h
     WHERE split_part(h.stream, '/', 2) = $1 AND split_part(h.stream, '/', 3) = $2
       AND ($3::text IS NULL OR split_part(h.stream, '/', 1) = $3)
)
"""


async def has_archived_events(
    connection: asyncpg.Connection, namespace: str, workload: str, kind: str | None = None
) -> bool:
    """Whether ``rollbook archive`` moved some of this workload's events out of the database
    (docs/retention.md): what the views show of it then starts after those."""
    return bool(await connection.fetchval(ARCHIVED_SQL, namespace, workload, kind))


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


async def pod_actions(
    connection: asyncpg.Connection, namespace: str, workload: str, kind: str | None = None
) -> list[asyncpg.Record]:
    """The pod actions of a workload (of ``kind``; None: of any kind of that name), in order."""
    return list(await connection.fetch(POD_ACTIONS_SQL, namespace, workload, kind))


async def current_rollout(
    connection: asyncpg.Connection, namespace: str, workload: str, kind: str | None = None
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await connection.fetchrow(CURRENT_ROLLOUT_SQL, namespace, workload, kind)
    return row


async def max_unavailable_exceeded(connection: asyncpg.Connection) -> list[asyncpg.Record]:
    """Moments during a rollout with more pods unavailable than allowed; empty means never exceeded."""
    return list(await connection.fetch("SELECT * FROM max_unavailable_exceeded ORDER BY position"))


async def actions_without_one_terminal(connection: asyncpg.Connection) -> list[asyncpg.Record]:
    """Requested actions with zero or several terminal events; empty means every action ended once."""
    return list(await connection.fetch("SELECT * FROM actions_without_one_terminal"))


LATEST_MAX_UNAVAILABLE_SQL = """
SELECT max_unavailable FROM partition_steps WHERE rollout_key = split_part($1, '#', 1) AND rollout_id = $1
ORDER BY position DESC LIMIT 1
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


async def view_missing(connection: asyncpg.Connection, view: str) -> bool:
    """Whether ``view`` (a view or table of the audit schema) is missing: the migrations have not run."""
    return bool(await connection.fetchval("SELECT to_regclass($1) IS NULL", view))


async def event_count(connection: asyncpg.Connection) -> int:
    return int(await connection.fetchval("SELECT count(*) FROM events"))


async def head_position(connection: asyncpg.Connection) -> int:
    """The highest global position stored (0 when empty)."""
    return int(await connection.fetchval("SELECT coalesce(max(global_position), 0) FROM events"))


# --- the timeline page (services/cli/ui.py): every kind's rollouts, driven or recorded ------------------

_TIMELINE_COLUMNS = """
SELECT rollout_id, kind, namespace, workload, from_revision, to_revision, strategy_type, replicas, started,
       finished, duration, outcome, driven_by, started_position, finished_position
FROM rollouts
"""

TIMELINE_ROLLOUT_SQL = f"""{_TIMELINE_COLUMNS}
WHERE kind <> 'SidecarSet' AND rollout_key = split_part($1, '#', 1) AND rollout_id = $1
ORDER BY started_position DESC
"""

# The newest rollouts: their starts found newest first by events_rollout_started_idx, then read by key, so
# the page's list costs the same on a trail of any length (every rollout of the log was seconds at 10
# million events).
TIMELINE_NEWEST_SQL = f"""{_TIMELINE_COLUMNS}
WHERE kind <> 'SidecarSet' AND rollout_key IN (
    SELECT split_part(payload ->> 'rollout_id', '#', 1) FROM events
    WHERE type = 'RolloutStarted' AND split_part(stream, '/', 1) <> 'SidecarSet'
    ORDER BY global_position DESC LIMIT $1)
ORDER BY started_position DESC
LIMIT $1
"""

NEWEST_ROLLOUTS = 500  # the timeline page's list

ROLLOUT_ACTIONS_SQL = """
SELECT pod, action, update_kind, in_place, requested, started, finished, outcome, reason
FROM pod_actions WHERE rollout_key = split_part($1, '#', 1) AND rollout_id = $1 ORDER BY position
"""

PARTITION_STEPS_SQL = """
SELECT partition, replicas, expected_updated, max_unavailable, planned, position
FROM partition_steps WHERE rollout_key = split_part($1, '#', 1) AND rollout_id = $1 ORDER BY position
"""

PAUSES_SQL = """
SELECT type, occurred_at AS at, payload ->> 'reason' AS reason
FROM events
WHERE type IN ('RolloutPaused', 'RolloutResumed') AND stream = $2
  AND rollout_of(stream, global_position, payload ->> 'rollout_id') = $1
ORDER BY global_position
"""

UNAVAILABILITY_SQL = """
SELECT position, at, replicas, available, unavailable
FROM unavailability
WHERE kind = $1 AND namespace = $2 AND workload = $3 AND position >= $4 AND position <= $5
ORDER BY position
"""


async def timeline_rollouts(
    connection: asyncpg.Connection, rollout_id: str | None = None, newest: int = NEWEST_ROLLOUTS
) -> list[asyncpg.Record]:
    """The rollouts of CloneSets and recorded kinds with their start and end positions: the ``newest``,
    newest first, or the one ``rollout_id``."""
    if rollout_id is not None:
        return list(await connection.fetch(TIMELINE_ROLLOUT_SQL, rollout_id))
    return list(await connection.fetch(TIMELINE_NEWEST_SQL, newest))


async def rollout_actions(connection: asyncpg.Connection, rollout_id: str) -> list[asyncpg.Record]:
    return list(await connection.fetch(ROLLOUT_ACTIONS_SQL, rollout_id))


async def partition_steps(connection: asyncpg.Connection, rollout_id: str) -> list[asyncpg.Record]:
    return list(await connection.fetch(PARTITION_STEPS_SQL, rollout_id))


async def pause_transitions(
    connection: asyncpg.Connection, rollout_id: str, stream: str
) -> list[asyncpg.Record]:
    """RolloutPaused / RolloutResumed of the rollout in ``stream`` (its decisions or recorded stream)."""
    return list(await connection.fetch(PAUSES_SQL, rollout_id, stream))


async def unavailability(
    connection: asyncpg.Connection, kind: str, namespace: str, workload: str, first: int, last: int
) -> list[asyncpg.Record]:
    """The workload's unavailable pods over time between global positions ``first`` and ``last``."""
    return list(await connection.fetch(UNAVAILABILITY_SQL, kind, namespace, workload, first, last))


# --- `rollbook rollout history` (services/cli/rollout_history.py) ----------------------------------------

REVISION_EVENTS_SQL = """
SELECT type, global_position, occurred_at, payload FROM events
WHERE stream = $1 AND type IN ('RevisionCreated', 'RevisionsPruned') ORDER BY global_position
"""

OBSERVED_TEMPLATES_SQL = """
SELECT global_position, payload -> 'object' -> 'spec' -> 'template' AS template,
       payload -> 'object' -> 'metadata' -> 'annotations' AS annotations
FROM events
WHERE stream = $1 AND type = 'ObjectObserved' AND payload ->> 'kind' = $2
  AND payload ->> 'change' <> 'DELETED'
ORDER BY global_position
"""


async def revision_events(connection: asyncpg.Connection, stream: str) -> list[asyncpg.Record]:
    """RevisionCreated / RevisionsPruned of ``stream``, in order: (type, global_position, occurred_at,
    payload)."""
    return list(await connection.fetch(REVISION_EVENTS_SQL, stream))


async def observed_templates(connection: asyncpg.Connection, stream: str, kind: str) -> list[asyncpg.Record]:
    """The pod template and annotations of every observation of the ``kind`` object in ``stream`` (deletions
    left out), in order: (global_position, template, annotations)."""
    return list(await connection.fetch(OBSERVED_TEMPLATES_SQL, stream, kind))
