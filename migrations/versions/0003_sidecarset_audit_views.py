"""The audit views cover SidecarSet in-place upgrades too (columns and examples in docs/sql.md).

Revision ID: 0003_sidecarset_audit_views
Revises: 0002_audit_views
Create Date: 2026-12-01

A SidecarSet records the CloneSet's decision events on its own streams (``SidecarSet//<name>/decisions``,
``/observed``, ``/actions``: empty namespace, it is cluster-scoped), so the views are recreated to tell the
two apart and to read what differs:

- every view gains ``kind`` (``CloneSet`` | ``SidecarSet``, the stream's first segment);
- ``action_outcomes`` / ``pod_actions`` gain ``pod_namespace`` (a SidecarSet's pods span namespaces, the
  stream's namespace is ``''``) and ``action_outcomes`` the request's ``details``;
- ``pod_actions``: ``updateSidecarInPlace`` is an in-place update; it finishes when the watcher first sees
  the pod carrying the action's id, Running and Ready, every restarted sidecar on a new image id (the
  planner's completion rule, docs/sidecarset.md);
- ``unavailability`` folds ``SidecarSet//<name>/observed`` too, its total being the ``replicas`` (matched
  pods) of the SidecarSet's latest ``PartitionStepPlanned``; so ``max_unavailable_exceeded`` checks
  SidecarSet rollouts as well;
- ``revisions`` reads a SidecarSet revision's images (its template is ``{containers}``, not ``{spec}``).

One partial index keeps the completion lookup a short index range per action: SidecarSet pod observations
by stream, pod name and position. Downgrade restores the 0002 views exactly (from that migration's own text).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0003_sidecarset_audit_views"
down_revision: str | None = "0002_audit_views"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A workload's streams: CloneSet/<ns>/<name>[/observed|/actions],
# SidecarSet//<name>/decisions|observed|actions.
_KIND = "split_part(e.stream, '/', 1)"
_NAMESPACE = "split_part(e.stream, '/', 2)"
_WORKLOAD = "split_part(e.stream, '/', 3)"

# The JSON the planner wrote into the pod's kruise.io/sidecarset-inplace-update-state for this upgrade:
# {<sidecarset>: {lastContainerStatuses: {<container>: {imageID}}}}, the image ids before the patch.
_SIDECAR_IDS_BEFORE = (
    "((a.details->'patch'->'metadata'->'annotations'->>'kruise.io/sidecarset-inplace-update-state')::jsonb"
    " -> (a.details->>'sidecarSet') -> 'lastContainerStatuses')"
)

VIEWS: dict[str, str] = {
    "revisions": f"""
        SELECT {_KIND} AS kind,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'name' AS revision,
               (e.payload->>'revision')::int AS number,
               e.payload->>'hash' AS hash,
               ARRAY(SELECT c->>'image'
                     FROM jsonb_array_elements(coalesce(e.payload->'template'->'spec'->'containers',
                                                        e.payload->'template'->'containers', '[]')) AS c)
                   AS images,
               e.occurred_at AS created,
               e.global_position AS position
        FROM events AS e
        WHERE e.type = 'RevisionCreated'
    """,
    "rollouts": f"""
        SELECT e.payload->>'rollout_id' AS rollout_id,
               {_KIND} AS kind,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'from_revision' AS from_revision,
               e.payload->>'to_revision' AS to_revision,
               coalesce(e.payload->'strategy'->>'type',
                        CASE {_KIND} WHEN 'SidecarSet' THEN 'RollingUpdate' ELSE 'ReCreate' END)
                   AS strategy_type,
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
               {_KIND} AS kind,
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
               {_KIND} AS kind,
               {_NAMESPACE} AS namespace,
               {_WORKLOAD} AS workload,
               e.payload->>'namespace' AS pod_namespace,
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
               coalesce(e.payload->'details', '{{}}') AS details,
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
        SELECT action_id, rollout_id, kind, namespace, workload, pod_namespace, pod, action, requested,
               terminal_events
        FROM action_outcomes
        WHERE terminal_events <> 1
    """,
    # markNotReady / markReady are steps of the CloneSet in-place update they surround, not actions of
    # their own. A SidecarSet's updateSidecarInPlace has no such steps: the pod leaves service when the
    # kubelet restarts the sidecar, and is back once the watcher sees it complete and ready.
    "pod_actions": f"""
        SELECT a.action_id,
               a.rollout_id,
               a.kind,
               a.namespace,
               a.workload,
               a.pod_namespace,
               a.pod,
               a.action,
               CASE WHEN a.action IN ('updateInPlace', 'updateSidecarInPlace') THEN 'in place'
                    WHEN a.action = 'recreatePod' THEN 'recreate' END AS update_kind,
               a.action IN ('updateInPlace', 'updateSidecarInPlace') AS in_place,
               coalesce(before.requested, a.requested) AS requested,
               a.requested AS started,
               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             ELSE a.finished END AS finished,
               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             ELSE a.finished END
                   - coalesce(before.requested, a.requested) AS duration,
               CASE WHEN 'failed' IN (a.outcome, before.outcome, after.outcome) THEN 'failed'
                    WHEN a.outcome = 'pending'
                         OR (a.action = 'updateInPlace'
                             AND (after.outcome IS NULL OR after.outcome = 'pending'))
                         OR (a.action = 'updateSidecarInPlace' AND back.finished IS NULL) THEN 'pending'
                    ELSE 'succeeded' END AS outcome,
               coalesce(a.reason, before.reason, after.reason) AS reason,
               a.position
        FROM action_outcomes AS a
        LEFT JOIN LATERAL (
            SELECT b.requested, b.outcome, b.reason
            FROM action_outcomes AS b
            WHERE a.action = 'updateInPlace' AND b.action = 'markNotReady'
              AND b.kind = a.kind AND b.namespace = a.namespace AND b.workload = a.workload
              AND b.pod = a.pod AND b.rollout_id = a.rollout_id AND b.position < a.position
            ORDER BY b.position DESC
            LIMIT 1
        ) AS before ON true
        LEFT JOIN LATERAL (
            SELECT m.finished, m.outcome, m.reason
            FROM action_outcomes AS m
            WHERE a.action = 'updateInPlace' AND m.action = 'markReady'
              AND m.kind = a.kind AND m.namespace = a.namespace AND m.workload = a.workload
              AND m.pod = a.pod AND m.rollout_id = a.rollout_id AND m.position > a.position
            ORDER BY m.position
            LIMIT 1
        ) AS after ON true
        LEFT JOIN LATERAL (
            SELECT o.occurred_at AS finished
            FROM events AS o
            WHERE a.action = 'updateSidecarInPlace' AND a.outcome = 'succeeded'
              AND o.type = 'ObjectObserved' AND o.stream LIKE 'SidecarSet/%/observed'
              AND o.stream = 'SidecarSet//' || a.workload || '/observed'
              AND o.payload->>'name' = a.pod AND o.global_position > a.position
              AND o.payload->>'kind' = 'Pod' AND o.payload->>'namespace' = a.pod_namespace
              AND o.payload->>'change' <> 'DELETED'
              AND o.payload->'object'->'metadata'->>'deletionTimestamp' IS NULL
              AND o.payload->'object'->'metadata'->'annotations'->>'rollbook.io/sidecarset-action-id'
                  = a.action_id
              AND o.payload->'object'->'status'->>'phase' = 'Running'
              AND EXISTS (SELECT 1
                          FROM jsonb_array_elements(
                                   coalesce(o.payload->'object'->'status'->'conditions', '[]')) AS c
                          WHERE c->>'type' = 'Ready' AND c->>'status' = 'True')
              AND NOT EXISTS (
                  SELECT 1
                  FROM jsonb_each(coalesce({_SIDECAR_IDS_BEFORE}, '{{}}')) AS was(container, status)
                  WHERE NOT EXISTS (
                      SELECT 1
                      FROM jsonb_array_elements(
                               coalesce(o.payload->'object'->'status'->'containerStatuses', '[]')) AS s
                      WHERE s->>'name' = was.container AND coalesce(s->>'imageID', '') <> ''
                        AND s->>'imageID' IS DISTINCT FROM was.status->>'imageID'))
            ORDER BY o.global_position
            LIMIT 1
        ) AS back ON true
        WHERE a.action NOT IN ('markNotReady', 'markReady')
    """,
    # Per observation of a workload's pod or of the workload itself: the total (a CloneSet's spec.replicas,
    # a SidecarSet's matched pods from its latest partition step), how many pods exist (not terminating)
    # and how many are available (Ready). Running sums of per-pod changes, so the whole log is read once
    # (no self-join per moment). A SidecarSet's steps are folded in for their total but are not moments.
    "unavailability": """
        WITH observed AS (
            SELECT split_part(e.stream, '/', 1) AS workload_kind,
                   split_part(e.stream, '/', 2) AS namespace,
                   split_part(e.stream, '/', 3) AS workload,
                   e.global_position,
                   e.occurred_at,
                   e.payload->>'kind' AS kind,
                   e.payload->>'namespace' AS object_namespace,
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
            WHERE e.type = 'ObjectObserved'
              AND ((e.payload->>'kind' IN ('Pod', 'CloneSet') AND e.stream LIKE 'CloneSet/%/observed')
                   OR (e.payload->>'kind' IN ('Pod', 'SidecarSet') AND e.stream LIKE 'SidecarSet/%/observed'))
            UNION ALL
            SELECT 'SidecarSet', split_part(e.stream, '/', 2), split_part(e.stream, '/', 3),
                   e.global_position, e.occurred_at, 'PartitionStep', NULL, NULL,
                   (e.payload->>'replicas')::int, 0, 0
            FROM events AS e
            WHERE e.type = 'PartitionStepPlanned' AND e.stream LIKE 'SidecarSet/%/decisions'
        ),
        changes AS (
            SELECT o.*,
                   CASE WHEN kind = 'Pod' THEN present - coalesce(lag(present) OVER pod, 0) ELSE 0 END
                       AS present_change,
                   CASE WHEN kind = 'Pod' THEN available - coalesce(lag(available) OVER pod, 0) ELSE 0 END
                       AS available_change,
                   count(replicas) OVER workload AS replicas_group
            FROM observed AS o
            WINDOW pod AS (PARTITION BY workload_kind, namespace, workload, kind, object_namespace, name
                           ORDER BY global_position),
                   workload AS (PARTITION BY workload_kind, namespace, workload ORDER BY global_position)
        ),
        running AS (
            SELECT workload_kind, namespace, workload, global_position, occurred_at, kind, object_namespace,
                   name,
                   max(replicas) OVER (PARTITION BY workload_kind, namespace, workload, replicas_group)
                       AS replicas,
                   sum(present_change) OVER workload AS pods,
                   sum(available_change) OVER workload AS available
            FROM changes
            WINDOW workload AS (PARTITION BY workload_kind, namespace, workload ORDER BY global_position)
        )
        SELECT workload_kind AS kind,
               namespace,
               workload,
               global_position AS position,
               occurred_at AS at,
               CASE WHEN workload_kind = 'SidecarSet' AND kind = 'Pod'
                    THEN 'Pod/' || object_namespace || '/' || name
                    ELSE kind || '/' || name END AS observed,
               replicas,
               pods::int AS pods,
               available::int AS available,
               greatest(coalesce(replicas, 0) - available, 0)::int AS unavailable
        FROM running
        WHERE kind <> 'PartitionStep'
    """,
    # During each rollout (RolloutStarted .. RolloutCompleted, or now), every moment at which more pods
    # were unavailable than the latest partition step of that rollout allowed.
    "max_unavailable_exceeded": """
        SELECT r.rollout_id, u.kind, u.namespace, u.workload, u.position, u.at, u.observed,
               u.replicas, u.available, u.unavailable, step.max_unavailable
        FROM rollouts AS r
        JOIN unavailability AS u
          ON u.kind = r.kind AND u.namespace = r.namespace AND u.workload = r.workload
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
    "revisions": "one row per revision created (RevisionCreated), CloneSet or SidecarSet",
    "rollouts": "one row per rollout: kind, workload, from/to revision, strategy, started, finished, outcome",
    "partition_steps": "one row per partition step planned",
    "action_outcomes": "every requested pod action with its terminal events",
    "actions_without_one_terminal": "requested actions with zero or several terminal events (empty = sound)",
    "pod_actions": "pod actions as an operator sees them; an in-place update (pod, sidecar) spans its steps",
    "unavailability": "per pod/workload observation: total, pods, available and unavailable pods",
    "max_unavailable_exceeded": "rollout moments with more pods unavailable than allowed (empty = never)",
}

# A SidecarSet upgrade's completion is looked up per action: its pod's observations after the request.
_SIDECARSET_POD_INDEX = (
    "CREATE INDEX events_sidecarset_pod_idx ON events (stream, (payload->>'name'), global_position)"
    " WHERE type = 'ObjectObserved' AND stream LIKE 'SidecarSet/%/observed'"
)


def _audit_views_0002() -> ModuleType:
    """The 0002 migration module, whose views the downgrade restores verbatim."""
    path = Path(__file__).with_name("0002_audit_views.py")
    spec = importlib.util.spec_from_file_location("rollbook_migration_0002_audit_views", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replace_views(old: dict[str, str], new: dict[str, str], comments: dict[str, str]) -> None:
    # Views depend on each other (pod_actions on action_outcomes, ...): drop dependants first. No CASCADE,
    # so a view an operator built on top of these makes the migration fail instead of vanishing silently.
    for name in reversed(list(old)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, sql in new.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
        op.execute(f"COMMENT ON VIEW {name} IS '{comments[name]}'")


def upgrade() -> None:
    op.execute(_SIDECARSET_POD_INDEX)
    _replace_views(_audit_views_0002().VIEWS, VIEWS, COMMENTS)


def downgrade() -> None:
    previous = _audit_views_0002()
    _replace_views(VIEWS, previous.VIEWS, previous.COMMENTS)
    op.execute("DROP INDEX IF EXISTS events_sidecarset_pod_idx")
