"""The read commands stay fast on a long trail: one workload's rows by index, one rollout's by its key.

Revision ID: 0027_trail_read_indexes
Revises: 0026_events_partitioned
Create Date: 2026-12-07

Measured by bench/trail.py at 10 million events (docs/performance.md, "A trail that stays fast"):

- ``events_workload_idx`` (namespace and workload, the stream's 2nd and 3rd segments, then ``type``):
  every view's ``namespace``/``workload`` is a ``split_part`` of the stream, which no index held, so
  `rollbook history`, `rollbook get` and the workload views read every request or observation of the log.
- ``events_rollout_pod_idx`` (rollout key and pod of a request): ``pod_actions`` folds an in-place update's
  ``markNotReady`` and ``markReady`` into its row by looking them up per update among the rollout's
  requests; by the rollout key alone each lookup read all of them (quadratic in the rollout's pods: 0.7 s
  for the 705 actions of a 200-pod CloneSet, 0.17 s with it).
- Statistics on ``payload ->> 'action_id'`` and on the rollout key: the planner ignores the statistics of
  a partial expression index, so it took each outcome lookup (``events_action_outcome_idx``) for 0.5% of
  the outcomes and ANDed it with a scan of the ``type`` index over all of them: per pod action, a scan
  growing with the log. Needs Postgres 14 (statistics on expressions); older servers skip them. On a
  partitioned ``events``, scans of one partition are estimated from that partition's statistics: create
  these on each partition too (not measured on a partitioned table).
- ``rollout_key`` (the rollout id before ``#``) as the last column of ``rollouts``, ``partition_steps``,
  ``actions_without_one_terminal`` and ``max_unavailable_exceeded``, as ``pod_actions`` and
  ``action_outcomes`` have it since 0023; ``events_rollout_started_key_idx`` holds it for
  ``RolloutStarted`` (``events_rollout_key_idx`` already does for requests and partition steps). A rollout
  id goes through ``rollout_of``, which no index can hold: ``WHERE rollout_key = split_part(id, '#', 1)
  AND rollout_id = id`` reads that rollout's rows only.
- ``events_rollout_started_idx`` (the positions of ``RolloutStarted``): the UI lists the newest rollouts
  (``/api/rollouts``) without computing every rollout of the log.
- ``max_unavailable_exceeded`` reads each rollout's workload through ``unavailability_of`` (a plpgsql
  function: Postgres pushes a constant workload filter into ``unavailability``'s window functions, never a
  join's), and its latest partition step by key. Same rows; one rollout no longer computes every
  workload's unavailability, and the whole-log check no longer scans every partition step per observation.

The views are edited as the database holds them (``pg_get_viewdef``), so this applies on top of whichever
migration defined them last. Stored events are untouched.

Locks: plain CREATE INDEX (CONCURRENTLY is refused on a partitioned ``events``) blocks appends while it
builds: the whole migration took 48 s on bench/trail.py's 10 million events (12 GB) on the 2-core
development machine. On a larger production trail, run it in a maintenance window (the services retry
appends; nothing is lost). ANALYZE at the end
reads a sample, not the table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from services.infra.database import migration_module

revision: str = "0027_trail_read_indexes"
down_revision: str | None = "0026_events_partitioned"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = "split_part(e.payload ->> 'rollout_id'::text, '#'::text, 1) AS rollout_key"
_DRIVEN_BY = "AS driven_by\n   FROM events e"
_DRIVEN_BY_KEY = f"AS driven_by,\n    {_KEY}\n   FROM events e"
# The key column as pg_get_viewdef renders it: Postgres 15 qualifies the column (e.payload), 18 does not
# and puts the operator in parentheses; the downgrade matches both.
_DRIVEN_BY_KEYED = re.compile(r"AS driven_by,\n    split_part\(.*\) AS rollout_key\n   FROM events e")
# pg_get_viewdef qualifies the column with its relation on Postgres 15 and not on 18 (embedded): both match.
_TERMINAL = re.compile(r"(action_outcomes\.)?terminal_events\n   FROM action_outcomes")
_TERMINAL_KEY = r"\1terminal_events,\n    action_outcomes.rollout_key\n   FROM action_outcomes"
_TERMINAL_KEYED = re.compile(
    r"(action_outcomes\.)?terminal_events,\n    (?:action_outcomes\.)?rollout_key\n   FROM action_outcomes"
)
_TERMINAL_UNKEYED = r"\1terminal_events\n   FROM action_outcomes"

INDEXES = {
    "events_workload_idx": "ON events (split_part(stream, '/', 2), split_part(stream, '/', 3), type)",
    "events_rollout_pod_idx": (
        "ON events (split_part(payload ->> 'rollout_id', '#', 1), (coalesce(payload ->> 'workload', payload ->> 'pod')))"
        " WHERE type = 'PodActionRequested'"
    ),
    "events_rollout_started_key_idx": (
        "ON events (split_part(payload ->> 'rollout_id', '#', 1)) WHERE type = 'RolloutStarted'"
    ),
    "events_rollout_started_idx": "ON events (global_position) WHERE type = 'RolloutStarted'",
}
STATISTICS = {
    "events_action_id_stats": "ON (payload ->> 'action_id') FROM events",
    "events_rollout_key_stats": "ON (split_part(payload ->> 'rollout_id', '#', 1)) FROM events",
}

# Not inlined (plpgsql): its arguments reach the view as constants, so the filter lands on the scan of
# ``events`` (events_workload_idx), below the window functions.
UNAVAILABILITY_OF = """
CREATE FUNCTION unavailability_of(of_kind text, of_namespace text, of_workload text)
RETURNS SETOF unavailability LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT * FROM unavailability AS u
    WHERE u.kind = of_kind AND u.namespace = of_namespace AND u.workload = of_workload;
END
$$
"""

MAX_UNAVAILABLE_EXCEEDED = """
SELECT r.rollout_id, u.kind, u.namespace, u.workload, u.position, u.at, u.observed,
       u.replicas, u.available, u.unavailable, step.max_unavailable, r.rollout_key
FROM rollouts AS r
CROSS JOIN LATERAL unavailability_of(r.kind, r.namespace, r.workload) AS u
CROSS JOIN LATERAL (
    SELECT p.max_unavailable
    FROM partition_steps AS p
    WHERE p.rollout_key = r.rollout_key AND p.rollout_id = r.rollout_id AND p.position < u.position
    ORDER BY p.position DESC
    LIMIT 1
) AS step
WHERE u.position > r.started_position
  AND u.position < coalesce(r.finished_position, 9223372036854775807)
  AND u.unavailable > step.max_unavailable
"""


def _views_0003() -> object:
    return migration_module("0003_sidecarset_audit_views.py")


def _definition(view: str) -> str:
    sql: str = (
        op.get_bind()
        .execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass), true)"), {"v": view})
        .scalar_one()
    )
    return sql.rstrip().rstrip(";")


def _comment(view: str) -> str | None:
    found: str | None = (
        op.get_bind()
        .execute(text("SELECT obj_description(CAST(:v AS regclass), 'pg_class')"), {"v": view})
        .scalar()
    )
    return found


def _replace(view: str, sql: str, comment: str | None) -> None:
    op.execute(f"CREATE VIEW {view} AS {sql}")
    if comment:
        quoted = comment.replace("'", "''")
        op.execute(f"COMMENT ON VIEW {view} IS '{quoted}'")


def _server_has_expression_statistics() -> bool:
    return int(op.get_bind().execute(text("SHOW server_version_num")).scalar_one()) >= 140000


def upgrade() -> None:
    for name, definition in INDEXES.items():
        op.execute(f"CREATE INDEX {name} {definition}")
    if _server_has_expression_statistics():
        for name, definition in STATISTICS.items():
            op.execute(f"CREATE STATISTICS {name} {definition}")
    # Columns are added last, so CREATE OR REPLACE keeps every view built on these.
    for view in ("rollouts", "partition_steps"):
        sql = _definition(view)
        assert sql.count(_DRIVEN_BY) == 1, f"{view} no longer ends with driven_by FROM events e"
        op.execute(f"CREATE OR REPLACE VIEW {view} AS {sql.replace(_DRIVEN_BY, _DRIVEN_BY_KEY)}")
    sql = _definition("actions_without_one_terminal")
    keyed, found = _TERMINAL.subn(_TERMINAL_KEY, sql)
    assert found == 1, "actions_without_one_terminal no longer ends with terminal_events"
    op.execute(f"CREATE OR REPLACE VIEW actions_without_one_terminal AS {keyed}")
    op.execute(UNAVAILABILITY_OF)
    op.execute(f"CREATE OR REPLACE VIEW max_unavailable_exceeded AS {MAX_UNAVAILABLE_EXCEEDED}")
    op.execute("ANALYZE events")


def downgrade() -> None:
    comment = _comment("max_unavailable_exceeded")
    op.execute("DROP VIEW max_unavailable_exceeded")
    op.execute("DROP FUNCTION unavailability_of(text, text, text)")
    for view in ("rollouts", "partition_steps"):
        sql, kept = _definition(view), _comment(view)
        op.execute(f"DROP VIEW {view}")
        unkeyed, found = _DRIVEN_BY_KEYED.subn(_DRIVEN_BY, sql)
        assert found == 1, f"{view} no longer ends with driven_by, rollout_key FROM events e"
        _replace(view, unkeyed, kept)
    sql, kept = _definition("actions_without_one_terminal"), _comment("actions_without_one_terminal")
    op.execute("DROP VIEW actions_without_one_terminal")
    _replace("actions_without_one_terminal", _TERMINAL_KEYED.sub(_TERMINAL_UNKEYED, sql), kept)
    _replace("max_unavailable_exceeded", _views_0003().VIEWS["max_unavailable_exceeded"], comment)  # type: ignore[attr-defined]
    for name in STATISTICS:
        op.execute(f"DROP STATISTICS IF EXISTS {name}")
    for name in INDEXES:
        op.execute(f"DROP INDEX {name}")
