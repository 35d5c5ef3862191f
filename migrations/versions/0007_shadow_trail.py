"""The audit views cover CloneSets rollbook only shadows (docs/shadow.md; columns in docs/sql.md).

Revision ID: 0007_shadow_trail
Revises: 0006_fast_hash_chain
Create Date: 2026-12-01

In shadow mode the planner records, on ``CloneSet/<ns>/<name>/shadow``, the rollouts and partition steps it
observed (the same ``RolloutStarted`` / ``RolloutCompleted`` / ``PartitionStepPlanned`` events as its own),
the pod actions the real controller took (``PodActionObserved``) and how each compares with what rollbook
would have done (``ShadowCompared``). So:

- ``rollouts`` and ``partition_steps`` gain ``driven_by`` (last column): ``rollbook``, or ``observed`` for
  those of the shadow stream (they already list both: the views select by event type). An observed one's
  positions (``started_position``, ``finished_position``, ``position``) are those of the observations that
  showed it, since the planner appends shadow events after the observations they reflect;
- ``pod_actions`` lists observed actions too (``driven_by`` = ``observed``): one row per
  ``PodActionObserved`` but ``becameReady``, which finishes the in-place update it completes as
  ``markReady`` does rollbook's; ``requested`` = ``started`` = when the pod first showed the action (an
  in-place update: when it left service), ``queued`` zero, ``finished`` the observation (create, delete)
  or the pod back in service (in-place update), ``outcome`` ``pending`` until then;
- a new view ``shadow_agreement``: each compared observed action with rollbook's verdict.

``unavailability`` and ``max_unavailable_exceeded`` need no change: they read the observations and the
rollouts and partition steps, whoever drove them. Two partial indexes keep the new joins per action.
Downgrade restores 0003's ``rollouts`` / ``partition_steps`` / ``max_unavailable_exceeded`` and 0005's
``pod_actions`` exactly, from those migrations' own text.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0007_shadow_trail"
down_revision: str | None = "0006_fast_hash_chain"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DRIVEN_BY = "CASE WHEN e.stream LIKE 'CloneSet/%/shadow' THEN 'observed' ELSE 'rollbook' END AS driven_by"
# Where an event stands in the log: its own position, or for an observed rollout's event the position of
# the observation that showed it. The planner appends shadow events after the observations they reflect,
# possibly after later ones too; a rollout's window in max_unavailable_exceeded must be the observed one.
_SEEN = (
    "CASE WHEN {e}.stream LIKE 'CloneSet/%/shadow'"
    " THEN (SELECT c.global_position FROM events AS c WHERE c.event_id = {e}.causation_id)"
    " ELSE {e}.global_position END"
)

ROLLOUTS = f"""
        SELECT e.payload->>'rollout_id' AS rollout_id,
               split_part(e.stream, '/', 1) AS kind,
               split_part(e.stream, '/', 2) AS namespace,
               split_part(e.stream, '/', 3) AS workload,
               e.payload->>'from_revision' AS from_revision,
               e.payload->>'to_revision' AS to_revision,
               coalesce(e.payload->'strategy'->>'type',
                        CASE split_part(e.stream, '/', 1) WHEN 'SidecarSet' THEN 'RollingUpdate'
                             ELSE 'ReCreate' END)
                   AS strategy_type,
               e.payload->'strategy' AS strategy,
               (e.payload->>'replicas')::int AS replicas,
               e.occurred_at AS started,
               done.occurred_at AS finished,
               done.occurred_at - e.occurred_at AS duration,
               coalesce(done.payload->>'outcome', 'in progress') AS outcome,
               {_SEEN.format(e="e")} AS started_position,
               done.seen AS finished_position,
               {_DRIVEN_BY}
        FROM events AS e
        LEFT JOIN LATERAL (
            SELECT d.occurred_at, d.payload, {_SEEN.format(e="d")} AS seen
            FROM events AS d
            WHERE d.stream = e.stream AND d.type = 'RolloutCompleted'
              AND d.payload->>'rollout_id' = e.payload->>'rollout_id'
              AND d.global_position > e.global_position
            ORDER BY d.global_position
            LIMIT 1
        ) AS done ON true
        WHERE e.type = 'RolloutStarted'
"""

PARTITION_STEPS = f"""
        SELECT e.payload->>'rollout_id' AS rollout_id,
               split_part(e.stream, '/', 1) AS kind,
               split_part(e.stream, '/', 2) AS namespace,
               split_part(e.stream, '/', 3) AS workload,
               (e.payload->>'partition')::int AS partition,
               (e.payload->>'replicas')::int AS replicas,
               (e.payload->>'expected_updated')::int AS expected_updated,
               (e.payload->>'max_unavailable')::int AS max_unavailable,
               (e.payload->>'max_surge')::int AS max_surge,
               e.occurred_at AS planned,
               {_SEEN.format(e="e")} AS position,
               {_DRIVEN_BY}
        FROM events AS e
        WHERE e.type = 'PartitionStepPlanned'
"""

# An observed in-place update (and create) is completed by the becameReady naming it.
OBSERVED_POD_ACTIONS = """
        SELECT o.payload->>'action_id' AS action_id,
               o.payload->>'rollout_id' AS rollout_id,
               split_part(o.stream, '/', 1) AS kind,
               split_part(o.stream, '/', 2) AS namespace,
               split_part(o.stream, '/', 3) AS workload,
               o.payload->>'namespace' AS pod_namespace,
               o.payload->>'pod' AS pod,
               o.payload->>'action' AS action,
               CASE o.payload->>'action' WHEN 'updateInPlace' THEN 'in place'
                                         WHEN 'recreatePod' THEN 'recreate' END AS update_kind,
               o.payload->>'action' = 'updateInPlace' AS in_place,
               (o.payload->>'started_at')::timestamptz AS requested,
               (o.payload->>'started_at')::timestamptz AS started,
               interval '0' AS queued,
               CASE o.payload->>'action' WHEN 'updateInPlace' THEN back.at ELSE o.occurred_at END AS finished,
               CASE o.payload->>'action' WHEN 'updateInPlace' THEN back.at ELSE o.occurred_at END
                   - (o.payload->>'started_at')::timestamptz AS duration,
               CASE WHEN o.payload->>'action' = 'updateInPlace' AND back.at IS NULL THEN 'pending'
                    ELSE 'succeeded' END AS outcome,
               NULL::text AS reason,
               o.global_position AS position,
               'observed' AS driven_by
        FROM events AS o
        LEFT JOIN LATERAL (
            SELECT r.occurred_at AS at
            FROM events AS r
            WHERE r.type = 'PodActionObserved' AND r.stream = o.stream
              AND r.payload->>'completes' = o.payload->>'action_id'
            ORDER BY r.global_position
            LIMIT 1
        ) AS back ON true
        WHERE o.type = 'PodActionObserved' AND o.payload->>'action' <> 'becameReady'
"""

SHADOW_AGREEMENT = """
        SELECT split_part(o.stream, '/', 1) AS kind,
               split_part(o.stream, '/', 2) AS namespace,
               split_part(o.stream, '/', 3) AS workload,
               o.payload->>'rollout_id' AS rollout_id,
               o.payload->>'action_id' AS action_id,
               o.payload->>'action' AS action,
               o.payload->>'pod' AS pod,
               o.payload->>'revision' AS revision,
               (o.payload->>'started_at')::timestamptz AS at,
               c.payload->>'verdict' AS verdict,
               c.payload->>'reason' AS reason,
               c.payload->>'pattern' AS pattern,
               (c.payload->>'unavailable')::int AS unavailable,
               (c.payload->>'max_unavailable')::int AS max_unavailable,
               c.payload->'rollbook' AS rollbook,
               c.payload->>'decision' AS decision,
               o.global_position AS position
        FROM events AS o
        JOIN events AS c
          ON c.type = 'ShadowCompared' AND c.stream = o.stream
         AND c.payload->>'action_id' = o.payload->>'action_id'
        WHERE o.type = 'PodActionObserved'
"""

COMMENTS = {
    "rollouts": "one row per rollout: kind, workload, from/to revision, strategy, started, finished, outcome,"
    " driven_by (rollbook | observed)",
    "partition_steps": "one row per partition step planned (rollbook) or observed (shadow)",
    "pod_actions": "pod actions as an operator sees them, taken by rollbook or observed (driven_by)",
    "shadow_agreement": "each observed pod action compared with what rollbook would have done",
}

_INDEXES = {
    "events_shadow_compared_idx": "CREATE INDEX events_shadow_compared_idx ON events"
    " (stream, (payload->>'action_id')) WHERE type = 'ShadowCompared'",
    "events_shadow_completes_idx": "CREATE INDEX events_shadow_completes_idx ON events"
    " (stream, (payload->>'completes')) WHERE type = 'PodActionObserved'",
}


def _migration(file: str) -> ModuleType:
    """An earlier migration module, whose view text this one builds on or restores verbatim."""
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(f"rollbook_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rollbook_pod_actions() -> str:
    """0005's pod_actions with ``driven_by`` = rollbook as its last column."""
    sql = str(_migration("0005_pod_action_started.py").POD_ACTIONS)
    tail = "a.position\n        FROM action_outcomes AS a"
    assert sql.count(tail) == 1, "0005's pod_actions text is not the one this migration extends"
    return sql.replace(
        tail, "a.position,\n               'rollbook' AS driven_by\n        FROM action_outcomes AS a"
    )


def upgrade() -> None:
    for sql in _INDEXES.values():
        op.execute(sql)
    # New columns come last, so CREATE OR REPLACE keeps max_unavailable_exceeded, which reads both.
    op.execute(f"CREATE OR REPLACE VIEW rollouts AS {ROLLOUTS}")
    op.execute(f"CREATE OR REPLACE VIEW partition_steps AS {PARTITION_STEPS}")
    op.execute(
        f"CREATE OR REPLACE VIEW pod_actions AS {_rollbook_pod_actions()} UNION ALL {OBSERVED_POD_ACTIONS}"
    )
    op.execute(f"CREATE VIEW shadow_agreement AS {SHADOW_AGREEMENT}")
    for name, comment in COMMENTS.items():
        op.execute(f"COMMENT ON VIEW {name} IS '{comment}'")


def downgrade() -> None:
    views_0003 = _migration("0003_sidecarset_audit_views.py")
    views_0005 = _migration("0005_pod_action_started.py")
    op.execute("DROP VIEW shadow_agreement")
    # No CASCADE: a view an operator built on these makes the downgrade fail instead of vanishing.
    op.execute("DROP VIEW pod_actions")
    op.execute("DROP VIEW max_unavailable_exceeded")
    op.execute("DROP VIEW partition_steps")
    op.execute("DROP VIEW rollouts")
    for name in ("rollouts", "partition_steps", "max_unavailable_exceeded"):
        op.execute(f"CREATE VIEW {name} AS {views_0003.VIEWS[name]}")
        op.execute(f"COMMENT ON VIEW {name} IS '{views_0003.COMMENTS[name]}'")
    op.execute(f"CREATE VIEW pod_actions AS {views_0005.POD_ACTIONS}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{views_0005.COMMENT}'")
    for name in _INDEXES:
        op.execute(f"DROP INDEX {name}")
