"""The audit trail in SQL: views over the events' JSONB payloads (columns and examples in docs/sql.md).

Revision ID: 0002_audit_views
Revises: 0001_events
Create Date: 2026-11-30

Views, not tables: the event log stays the only truth and every view is correct the moment an event is
committed. Two expression indexes keep the joins the views make cheap on a long log: outcomes are found by
their action id, rollout events by type within a stream.

- rollouts, revisions, partition_steps: the planner's decisions, one row each.
- action_outcomes: every requested pod action with its terminal events (the "exactly one" check).
- pod_actions: pod actions as an operator sees them; an in-place update is one row spanning its
  markNotReady → grace period → image patch → markReady steps.
- unavailability: per workload and pod observation, how many pods were unavailable at that moment.
- max_unavailable_exceeded: the moments during a rollout when more pods were unavailable than the
  partition step in force allowed (empty = never exceeded).
- actions_without_one_terminal: requested actions with zero or several terminal events (empty = sound).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002_audit_views"
down_revision: str | None = "0001_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The workload a stream belongs to: CloneSet/<ns>/<name>[/observed|/actions] -> namespace, name.
_NAMESPACE = "split_part(e.stream, '/', 2)"
_WORKLOAD = "split_part(e.stream, '/', 3)"

VIEWS: dict[str, str] = {
    "revisions": f"""
        SELECT {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'name' AS revision,
               (e.payload->>'revision')::int AS number,
               e.payload->>'hash' AS hash,
               ARRAY(SELECT c->>'image'
                     FROM jsonb_array_elements(coalesce(e.payload->'template'->'spec'->'containers', '[]'))
                          AS c) AS images,
               e.occurred_at AS created,
               e.global_position AS position
        FROM events AS e
        WHERE e.type = 'RevisionCreated'
    """,
    "rollouts": f"""
        SELECT e.payload->>'rollout_id' AS rollout_id,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'from_revision' AS from_revision,
               e.payload->>'to_revision' AS to_revision,
               coalesce(e.payload->'strategy'->>'type', 'ReCreate') AS strategy_type,
               e.payload->'strategy' AS strategy,
               (e.payload->>'replicas')::int AS replicas,
               e.occurred_at AS started,
               done.occurred_at AS finished,
               done.occurred_at - e.occurred_at AS duration,
               coalesce(done.payload->>'outcome', 'in progress') AS outcome,
               e.global_position AS started_position,
               done.global_position AS finished_position
        FROM events AS e
        LEFT JOIN LATERAL (
            SELECT d.occurred_at, d.payload, d.global_position
            FROM events AS d
            WHERE d.stream = e.stream AND d.type = 'RolloutCompleted'
              AND d.payload->>'rollout_id' = e.payload->>'rollout_id'
              AND d.global_position > e.global_position
            ORDER BY d.global_position
            LIMIT 1
        ) AS done ON true
        WHERE e.type = 'RolloutStarted'
    """,
    "partition_steps": f"""
        SELECT e.payload->>'rollout_id' AS rollout_id,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               (e.payload->>'partition')::int AS partition,
               (e.payload->>'replicas')::int AS replicas,
               (e.payload->>'expected_updated')::int AS expected_updated,
               (e.payload->>'max_unavailable')::int AS max_unavailable,
               (e.payload->>'max_surge')::int AS max_surge,
               e.occurred_at AS planned,
               e.global_position AS position
        FROM events AS e
        WHERE e.type = 'PartitionStepPlanned'
    """,
    "action_outcomes": f"""
        SELECT e.payload->>'action_id' AS action_id,
               e.payload->>'rollout_id' AS rollout_id,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'pod' AS pod,
               e.payload->>'action' AS action,
               e.occurred_at AS requested,
               t.finished,
               t.finished - e.occurred_at AS duration,
               CASE WHEN t.terminal_events = 0 THEN 'pending'
                    WHEN t.failed THEN 'failed' ELSE 'succeeded' END AS outcome,
               t.reason,
               t.already_applied,
               t.terminal_events,
               e.global_position AS position
        FROM events AS e
        CROSS JOIN LATERAL (
            SELECT count(*) AS terminal_events,
                   min(o.occurred_at) AS finished,
                   bool_or(o.type = 'PodActionFailed') AS failed,
                   min(o.payload->>'reason') AS reason,
                   bool_or(coalesce((o.payload->>'already_applied')::boolean, false)) AS already_applied
            FROM events AS o
            WHERE o.type IN ('PodActionSucceeded', 'PodActionFailed')
              AND o.payload->>'action_id' = e.payload->>'action_id'
        ) AS t
        WHERE e.type = 'PodActionRequested'
    """,
    "actions_without_one_terminal": """
        SELECT action_id, rollout_id, namespace, workload, pod, action, requested, terminal_events
        FROM action_outcomes
        WHERE terminal_events <> 1
    """,
    # markNotReady / markReady are steps of the in-place update they surround, not actions of their own.
    "pod_actions": """
        SELECT a.action_id,
               a.rollout_id,
               a.namespace,
               a.workload,
               a.pod,
               a.action,
               CASE a.action WHEN 'updateInPlace' THEN 'in place' WHEN 'recreatePod' THEN 'recreate' END
                   AS update_kind,
               a.action = 'updateInPlace' AS in_place,
               coalesce(before.requested, a.requested) AS requested,
               a.requested AS started,
               CASE WHEN a.action = 'updateInPlace' THEN after.finished ELSE a.finished END AS finished,
               CASE WHEN a.action = 'updateInPlace' THEN after.finished ELSE a.finished END
                   - coalesce(before.requested, a.requested) AS duration,
               CASE WHEN 'failed' IN (a.outcome, before.outcome, after.outcome) THEN 'failed'
                    WHEN a.outcome = 'pending' OR (a.action = 'updateInPlace'
                         AND (after.outcome IS NULL OR after.outcome = 'pending')) THEN 'pending'
                    ELSE 'succeeded' END AS outcome,
               coalesce(a.reason, before.reason, after.reason) AS reason,
               a.position
        FROM action_outcomes AS a
        LEFT JOIN LATERAL (
            SELECT b.requested, b.outcome, b.reason
            FROM action_outcomes AS b
            WHERE a.action = 'updateInPlace' AND b.action = 'markNotReady'
              AND b.namespace = a.namespace AND b.workload = a.workload AND b.pod = a.pod
              AND b.rollout_id = a.rollout_id AND b.position < a.position
            ORDER BY b.position DESC
            LIMIT 1
        ) AS before ON true
        LEFT JOIN LATERAL (
            SELECT m.finished, m.outcome, m.reason
            FROM action_outcomes AS m
            WHERE a.action = 'updateInPlace' AND m.action = 'markReady'
              AND m.namespace = a.namespace AND m.workload = a.workload AND m.pod = a.pod
              AND m.rollout_id = a.rollout_id AND m.position > a.position
            ORDER BY m.position
            LIMIT 1
        ) AS after ON true
        WHERE a.action NOT IN ('markNotReady', 'markReady')
    """,
    # Per observation of a workload's pod or of the workload itself: the spec's replicas, how many pods
    # exist (not terminating) and how many are available (Ready). Running sums of per-pod changes, so the
    # whole log is read once (no self-join per moment).
    "unavailability": """
        WITH observed AS (
            SELECT e.stream,
                   e.global_position,
                   e.occurred_at,
                   e.payload->>'kind' AS kind,
                   e.payload->>'name' AS name,
                   CASE WHEN e.payload->>'kind' = 'CloneSet' AND e.payload->>'change' <> 'DELETED'
                        THEN (e.payload->'object'->'spec'->>'replicas')::int END AS replicas,
                   (e.payload->>'change' <> 'DELETED'
                    AND e.payload->'object'->'metadata'->>'deletionTimestamp' IS NULL)::int AS present,
                   (e.payload->>'change' <> 'DELETED'
                    AND e.payload->'object'->'metadata'->>'deletionTimestamp' IS NULL
                    AND EXISTS (SELECT 1
                                FROM jsonb_array_elements(
                                         coalesce(e.payload->'object'->'status'->'conditions', '[]')) AS c
                                WHERE c->>'type' = 'Ready' AND c->>'status' = 'True'))::int AS available
            FROM events AS e
            WHERE e.type = 'ObjectObserved' AND e.payload->>'kind' IN ('Pod', 'CloneSet')
              AND e.stream LIKE 'CloneSet/%/observed'
        ),
        changes AS (
            SELECT o.*,
                   CASE WHEN kind = 'Pod' THEN present - coalesce(lag(present) OVER pod, 0) ELSE 0 END
                       AS present_change,
                   CASE WHEN kind = 'Pod' THEN available - coalesce(lag(available) OVER pod, 0) ELSE 0 END
                       AS available_change,
                   count(replicas) OVER workload AS replicas_group
            FROM observed AS o
            WINDOW pod AS (PARTITION BY stream, kind, name ORDER BY global_position),
                   workload AS (PARTITION BY stream ORDER BY global_position)
        ),
        running AS (
            SELECT stream, global_position, occurred_at, kind, name,
                   max(replicas) OVER (PARTITION BY stream, replicas_group) AS replicas,
                   sum(present_change) OVER workload AS pods,
                   sum(available_change) OVER workload AS available
            FROM changes
            WINDOW workload AS (PARTITION BY stream ORDER BY global_position)
        )
        SELECT split_part(stream, '/', 2) AS namespace,
               split_part(stream, '/', 3) AS workload,
               global_position AS position,
               occurred_at AS at,
               kind || '/' || name AS observed,
               replicas,
               pods::int AS pods,
               available::int AS available,
               greatest(coalesce(replicas, 0) - available, 0)::int AS unavailable
        FROM running
    """,
    # During each rollout (RolloutStarted .. RolloutCompleted, or now), every moment at which more pods
    # were unavailable than the latest partition step of that rollout allowed.
    "max_unavailable_exceeded": """
        SELECT r.rollout_id, u.namespace, u.workload, u.position, u.at, u.observed,
               u.replicas, u.available, u.unavailable, step.max_unavailable
        FROM rollouts AS r
        JOIN unavailability AS u
          ON u.namespace = r.namespace AND u.workload = r.workload
         AND u.position > r.started_position
         AND u.position < coalesce(r.finished_position, 9223372036854775807)
        CROSS JOIN LATERAL (
            SELECT p.max_unavailable
            FROM partition_steps AS p
            WHERE p.rollout_id = r.rollout_id AND p.position < u.position
            ORDER BY p.position DESC
            LIMIT 1
        ) AS step
        WHERE u.unavailable > step.max_unavailable
    """,
}

COMMENTS = {
    "revisions": "one row per revision created (RevisionCreated)",
    "rollouts": "one row per rollout: workload, from/to revision, strategy, started, finished, outcome",
    "partition_steps": "one row per partition step planned",
    "action_outcomes": "every requested pod action with its terminal events",
    "actions_without_one_terminal": "requested actions with zero or several terminal events (empty = sound)",
    "pod_actions": "pod actions as an operator sees them; an in-place update spans its steps",
    "unavailability": "per pod/workload observation: replicas, pods, available and unavailable pods",
    "max_unavailable_exceeded": "rollout moments with more pods unavailable than allowed (empty = never)",
}


def upgrade() -> None:
    # Outcomes are joined to their request by action id; rollout events are looked up by type in a stream.
    op.execute(
        "CREATE INDEX events_action_id_idx ON events ((payload->>'action_id'))"
        " WHERE type IN ('PodActionRequested', 'PodActionSucceeded', 'PodActionFailed')"
    )
    op.execute("CREATE INDEX events_type_stream_idx ON events (type, stream)")
    # "Everything about rollout X" on the decision payloads (pod_actions, partition_steps by rollout_id).
    op.execute(
        "CREATE INDEX events_rollout_id_idx ON events ((payload->>'rollout_id'))"
        " WHERE type IN ('PodActionRequested', 'PartitionStepPlanned')"
    )
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
        op.execute(f"COMMENT ON VIEW {name} IS '{COMMENTS[name]}'")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.execute("DROP INDEX IF EXISTS events_rollout_id_idx")
    op.execute("DROP INDEX IF EXISTS events_type_stream_idx")
    op.execute("DROP INDEX IF EXISTS events_action_id_idx")
