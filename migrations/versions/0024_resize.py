"""``pod_actions`` shows a ``resize`` (container resources changed in place through ``pods/resize``) as an
update of its own kind, from its request to the kubelet's actuation (columns in docs/sql.md).

Revision ID: 0024_resize
Revises: 0018_rollout_sequence
Create Date: 2026-12-06

A ``resize`` row has ``update_kind`` ``resize`` and ``in_place`` true. pods/resize writes no action id on
the pod, so its ``finished`` is the first observation of the pod, after the action succeeded, whose
``status.containerStatuses[].resources`` contain the requests and limits the action asked for each named
container, with no ``PodResizePending`` or ``PodResizeInProgress`` condition True: the time from request to
actuation is its ``duration``. Until then the row is ``pending`` (a resize the kubelet defers or finds
infeasible stays so; the planner recreates or refuses the pod, other rows show it).

The column list is unchanged, so the view is replaced in place; stored events are untouched. The downgrade
restores 0013's definition exactly, built from that migration's own text.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0024_resize"
down_revision: str | None = "0018_rollout_sequence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each (0013's text, this migration's), replaced exactly once.
_EDITS: tuple[tuple[str, str], ...] = (
    (
        """               CASE WHEN a.action IN ('updateInPlace', 'updateSidecarInPlace') THEN 'in place'
                    WHEN a.action = 'recreatePod' THEN 'recreate' END AS update_kind,
               a.action IN ('updateInPlace', 'updateSidecarInPlace') AS in_place,""",
        """               CASE WHEN a.action IN ('updateInPlace', 'updateSidecarInPlace') THEN 'in place'
                    WHEN a.action = 'resize' THEN 'resize'
                    WHEN a.action = 'recreatePod' THEN 'recreate' END AS update_kind,
               a.action IN ('updateInPlace', 'updateSidecarInPlace', 'resize') AS in_place,""",
    ),
    (
        """               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             ELSE a.finished END AS finished,
               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             ELSE a.finished END""",
        """               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             WHEN 'resize' THEN resized.finished
                             ELSE a.finished END AS finished,
               CASE a.action WHEN 'updateInPlace' THEN after.finished
                             WHEN 'updateSidecarInPlace' THEN back.finished
                             WHEN 'resize' THEN resized.finished
                             ELSE a.finished END""",
    ),
    (
        "                         OR (a.action = 'updateSidecarInPlace' AND back.finished IS NULL)"
        " THEN 'pending'",
        """                         OR (a.action = 'updateSidecarInPlace' AND back.finished IS NULL)
                         OR (a.action = 'resize' AND resized.finished IS NULL) THEN 'pending'""",
    ),
    (
        """        ) AS back ON true
        LEFT JOIN LATERAL (
            SELECT min(""",
        """        ) AS back ON true
        LEFT JOIN LATERAL (
            SELECT o.occurred_at AS finished
            FROM events AS o
            WHERE a.action = 'resize' AND a.outcome = 'succeeded'
              AND o.type = 'ObjectObserved'
              AND o.stream = a.kind || '/' || a.namespace || '/' || a.workload || '/observed'
              AND o.payload->>'kind' = 'Pod' AND o.payload->>'name' = a.pod
              AND o.global_position > a.position AND o.payload->>'change' <> 'DELETED'
              AND NOT EXISTS (
                  SELECT 1
                  FROM jsonb_array_elements(coalesce(o.payload->'object'->'status'->'conditions', '[]')) AS c
                  WHERE c->>'type' IN ('PodResizePending', 'PodResizeInProgress') AND c->>'status' = 'True')
              AND NOT EXISTS (
                  SELECT 1
                  FROM jsonb_each(coalesce(a.details->'resources', '{}')) AS want(container, resources)
                  WHERE NOT EXISTS (
                      SELECT 1
                      FROM jsonb_array_elements(
                               coalesce(o.payload->'object'->'status'->'containerStatuses', '[]')) AS s
                      WHERE s->>'name' = want.container
                        AND coalesce(s->'resources'->'requests', '{}')
                            @> coalesce(want.resources->'requests', '{}')
                        AND coalesce(s->'resources'->'limits', '{}')
                            @> coalesce(want.resources->'limits', '{}')))
            ORDER BY o.global_position
            LIMIT 1
        ) AS resized ON true
        LEFT JOIN LATERAL (
            SELECT min(""",
    ),
)


def _migration(file: str) -> ModuleType:
    """An earlier migration module, whose view text this one builds on or restores verbatim."""
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(f"rollbook_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path.name}, whose view 0024 redefines")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pod_actions_0013() -> tuple[str, str]:
    """The view and its comment as 0013_inplace_mark_of_its_own defined them (their latest definition)."""
    module = _migration("0013_inplace_mark_of_its_own.py")
    sql, comment = module._pod_actions_0012()
    return sql.replace(module._BEFORE_0005, module._BEFORE_0013), comment


def resize_view() -> str:
    sql, _ = _pod_actions_0013()
    for before, after in _EDITS:
        if sql.count(before) != 1:  # not an assert: `python -O` would let a wrong view through
            raise RuntimeError("0013's pod_actions no longer reads as 0024 expects")
        sql = sql.replace(before, after)
    return sql


def upgrade() -> None:
    _, comment = _pod_actions_0013()
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {resize_view()}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")


def downgrade() -> None:
    sql, comment = _pod_actions_0013()
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql}")
    op.execute(f"COMMENT ON VIEW pod_actions IS '{comment}'")
