"""``pod_actions.started`` is when an executor took the action (``PodActionStarted``), and a new ``queued``
column says how long it waited on the bus before that (columns and examples in docs/sql.md).

Revision ID: 0005_pod_action_started
Revises: 0004_event_hash_chain
Create Date: 2026-12-01

The executor appends ``PodActionStarted`` to the actions stream when it takes a requested action, before
any API call (docs/events.md). Until now ``pod_actions.started`` was a request time, so the time an action
waited before an executor took it was invisible. Redefined:

- ``started``: the first ``PodActionStarted`` of the row's first step: the action itself, or for a CloneSet
  in-place update (one row spanning ``markNotReady`` .. ``markReady``, ``requested`` being the
  ``markNotReady`` request and ``finished`` the ``markReady`` outcome) the ``markNotReady`` step, the
  moment an executor began taking the pod out of service. No ``PodActionStarted`` (events recorded before
  executors wrote them) falls back to ``requested``.
- ``queued`` (new, right after ``started``): ``started - requested``, the time the row's first step waited
  between the planner's request and an executor taking it (zero where ``started`` fell back).

Every other column is computed as in 0003. Only ``pod_actions`` is replaced (no view depends on it); the
new definition is stated here in full, and the downgrade restores 0003's definition exactly, read from that
migration's own text.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0005_pod_action_started"
down_revision: str | None = "0004_event_hash_chain"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The JSON the planner wrote into the pod's kruise.io/sidecarset-inplace-update-state for this upgrade:
# {<sidecarset>: {lastContainerStatuses: {<container>: {imageID}}}}, the image ids before the patch.
_SIDECAR_IDS_BEFORE = (
    "((a.details->'patch'->'metadata'->'annotations'->>'kruise.io/sidecarset-inplace-update-state')::jsonb"
    " -> (a.details->>'sidecarSet') -> 'lastContainerStatuses')"
)

# markNotReady / markReady are steps of the CloneSet in-place update they surround, not actions of their
# own. A SidecarSet's updateSidecarInPlace has no such steps: the pod leaves service when the kubelet
# restarts the sidecar, and is back once the watcher sees it complete and ready. ``took`` is the first
# PodActionStarted of the row's first step (the markNotReady when there is one).
POD_ACTIONS = f"""
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
               coalesce(took.started, before.requested, a.requested) AS started,
               coalesce(took.started, before.requested, a.requested)
                   - coalesce(before.requested, a.requested) AS queued,
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
            SELECT b.action_id, b.requested, b.outcome, b.reason
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
        LEFT JOIN LATERAL (
            SELECT min(s.occurred_at) AS started
            FROM events AS s
            WHERE s.type = 'PodActionStarted'
              AND s.payload->>'action_id' = coalesce(before.action_id, a.action_id)
        ) AS took ON true
        WHERE a.action NOT IN ('markNotReady', 'markReady')
"""

COMMENT = (
    "pod actions as an operator sees them; an in-place update (pod, sidecar) spans its steps;"
    " started/queued from PodActionStarted"
)


def _audit_views_0003() -> ModuleType:
    """The 0003 migration module, whose pod_actions view the downgrade restores verbatim."""
    path = Path(__file__).with_name("0003_sidecarset_audit_views.py")
    spec = importlib.util.spec_from_file_location("rollbook_migration_0003_sidecarset_audit_views", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replace_pod_actions(sql: str, comment: str) -> None:
    # DROP + CREATE, not CREATE OR REPLACE: a column is inserted in the middle. No CASCADE, so a view an
    # operator built on pod_actions makes the migration fail instead of vanishing silently.
    op.execute("DROP VIEW IF EXISTS pod_actions")
    op.execute(f"CREATE VIEW pod_actions AS {sql}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")


def upgrade() -> None:
    _replace_pod_actions(POD_ACTIONS, COMMENT)


def downgrade() -> None:
    previous = _audit_views_0003()
    _replace_pod_actions(previous.VIEWS["pod_actions"], previous.COMMENTS["pod_actions"])
