"""``hook_waits``: how long each CloneSet lifecycle hook held each pod (columns and examples in docs/sql.md).

Revision ID: 0008_parity_hook_waits
Revises: 0007_shadow_trail
Create Date: 2026-12-01

The planner appends ``PodHookHeld`` to a CloneSet's decisions stream in the round that first sees a pod
waiting for a lifecycle hook (preDelete in PreparingDelete, inPlaceUpdate in PreparingUpdate or Updated,
preNormal in PreparingNormal), and ``PodHookReleased`` (with ``held_seconds``) in the round that sees the
hook no longer holding it (docs/events.md). One row per hold: the release is the first
``PodHookReleased`` of the same pod and hook after it; a hold without one is still running.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_parity_hook_waits"
down_revision: str | None = "0007_shadow_trail"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HOOK_WAITS = """
    SELECT split_part(h.stream, '/', 2) AS namespace,
           split_part(h.stream, '/', 3) AS workload,
           h.payload->>'pod' AS pod,
           h.payload->>'hook' AS hook,
           h.payload->>'state' AS state,
           h.occurred_at AS held_since,
           r.occurred_at AS released,
           (r.payload->>'held_seconds')::double precision AS held_seconds,
           r.global_position IS NULL AS still_held,
           h.global_position AS position
    FROM events AS h
    LEFT JOIN LATERAL (
        SELECT e.occurred_at, e.payload, e.global_position
        FROM events AS e
        WHERE e.type = 'PodHookReleased'
          AND e.stream = h.stream
          AND e.payload->>'pod' = h.payload->>'pod'
          AND e.payload->>'hook' = h.payload->>'hook'
          AND e.global_position > h.global_position
        ORDER BY e.global_position
        LIMIT 1
    ) AS r ON true
    WHERE h.type = 'PodHookHeld'
"""


def upgrade() -> None:
    op.execute(f"CREATE VIEW hook_waits AS {HOOK_WAITS}")
    op.execute(
        "COMMENT ON VIEW hook_waits IS 'How long each CloneSet lifecycle hook held each pod "
        "(PodHookHeld .. PodHookReleased; still_held when not released yet)'"
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS hook_waits")
