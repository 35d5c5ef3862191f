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

The view is edited as the database holds it (``pg_get_viewdef``), so this applies on top of whichever
migration defined it last; its columns are unchanged, so it is replaced in place. Stored events are
untouched. The downgrade removes exactly what the upgrade added.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0024_resize"
down_revision: str | None = "0023_operator_finish"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RESIZED = """ LEFT JOIN LATERAL ( SELECT o.occurred_at AS finished
           FROM events o
          WHERE ((a.action = 'resize'::text) AND (a.outcome = 'succeeded'::text)
            AND (o.type = 'ObjectObserved'::text)
            AND (o.stream = ((((a.kind || '/'::text) || a.namespace) || '/'::text) || a.workload) || '/observed'::text)
            AND ((o.payload ->> 'kind'::text) = 'Pod'::text) AND ((o.payload ->> 'name'::text) = a.pod)
            AND (o.global_position > a."position") AND ((o.payload ->> 'change'::text) <> 'DELETED'::text)
            AND (NOT (EXISTS ( SELECT 1
                   FROM jsonb_array_elements(COALESCE((((o.payload -> 'object'::text) -> 'status'::text) -> 'conditions'::text), '[]'::jsonb)) c(value)
                  WHERE ((c.value ->> 'type'::text) = ANY (ARRAY['PodResizePending'::text, 'PodResizeInProgress'::text]))
                    AND ((c.value ->> 'status'::text) = 'True'::text))))
            AND (NOT (EXISTS ( SELECT 1
                   FROM jsonb_each(COALESCE((a.details -> 'resources'::text), '{}'::jsonb)) want(container, resources)
                  WHERE (NOT (EXISTS ( SELECT 1
                           FROM jsonb_array_elements(COALESCE((((o.payload -> 'object'::text) -> 'status'::text) -> 'containerStatuses'::text), '[]'::jsonb)) s(value)
                          WHERE (((s.value ->> 'name'::text) = want.container)
                            AND (COALESCE(((s.value -> 'resources'::text) -> 'requests'::text), '{}'::jsonb) @> COALESCE((want.resources -> 'requests'::text), '{}'::jsonb))
                            AND (COALESCE(((s.value -> 'resources'::text) -> 'limits'::text), '{}'::jsonb) @> COALESCE((want.resources -> 'limits'::text), '{}'::jsonb))))))))))
          ORDER BY o.global_position
         LIMIT 1) resized ON (true))
    """

# (as the database prints the view, what this migration makes of it, how many times it is there)
_EDITS: tuple[tuple[str, str, int], ...] = (
    (
        "WHEN (a.action = 'recreatePod'::text) THEN 'recreate'::text",
        "WHEN (a.action = 'resize'::text) THEN 'resize'::text WHEN (a.action = 'recreatePod'::text) THEN 'recreate'::text",
        1,
    ),
    (
        "(a.action = ANY (ARRAY['updateInPlace'::text, 'updateSidecarInPlace'::text])) AS in_place",
        "(a.action = ANY (ARRAY['updateInPlace'::text, 'updateSidecarInPlace'::text, 'resize'::text])) AS in_place",
        1,
    ),
    (
        "WHEN 'updateSidecarInPlace'::text THEN back.finished\n",
        "WHEN 'updateSidecarInPlace'::text THEN back.finished WHEN 'resize'::text THEN resized.finished\n",
        2,
    ),
    (
        "(back.finished IS NULL))) THEN 'pending'::text",
        "(back.finished IS NULL)) OR ((a.action = 'resize'::text) AND (resized.finished IS NULL))) THEN 'pending'::text",
        1,
    ),
    ("FROM ((((action_outcomes a", "FROM (((((action_outcomes a", 1),
    (
        "LIMIT 1) back ON (true))\n     LEFT JOIN LATERAL ( SELECT min(",
        "LIMIT 1) back ON (true))\n    " + _RESIZED + " LEFT JOIN LATERAL ( SELECT min(",
        1,
    ),
)


def _definition() -> str:
    sql = op.get_bind().execute(text("SELECT pg_get_viewdef('pod_actions'::regclass)")).scalar_one()
    return str(sql).rstrip().rstrip(";")


def resize_view(sql: str) -> str:
    """``sql`` (the view as the database prints it) with the resize rows' columns and their join."""
    for old, new, count in _EDITS:
        if sql.count(old) != count:  # not an assert: `python -O` would let a wrong view through
            raise RuntimeError(f"pod_actions: expected {count} of {old!r} in its definition")
        sql = sql.replace(old, new)
    return sql


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {resize_view(_definition())}")


def downgrade() -> None:
    sql = _definition()
    sql, joins = re.subn(
        r"\n\s*LEFT JOIN LATERAL \( SELECT o\.occurred_at AS finished\s+FROM events o\s+WHERE \(\(a\.action = "
        r"'resize'::text\).*?\) resized ON \(true\)\)",
        "",
        sql,
        flags=re.S,
    )
    sql, froms = re.subn(r"FROM \(\(\(\(\((action_outcomes a)", r"FROM ((((\1", sql)
    sql, kinds = re.subn(r"\s*WHEN \(a\.action = 'resize'::text\) THEN 'resize'::text", "", sql)
    sql, ins = re.subn(r", 'resize'::text\]\)\) AS in_place", "])) AS in_place", sql)
    sql, ends = re.subn(r"\s*WHEN 'resize'::text THEN resized\.finished", "", sql)
    sql, pend = re.subn(r" OR \(\(a\.action = 'resize'::text\) AND \(resized\.finished IS NULL\)\)", "", sql)
    if (joins, froms, kinds, ins, ends, pend) != (1, 1, 1, 1, 2, 1):
        raise RuntimeError("pod_actions no longer reads as 0024_resize left it")
    op.execute(f"CREATE OR REPLACE VIEW pod_actions AS {sql}")
