"""``progress_deadlines``: every CloneSet rollout whose progress deadline passed (docs/sql.md).

Revision ID: 0010_parity_progress_deadline
Revises: 0009_operator_inplace_unavail
Create Date: 2026-12-01

The planner appends ``RolloutProgressDeadlineExceeded`` to a CloneSet's decisions stream in the round
whose planned status first carries ``Progressing=False`` with reason ``ProgressDeadlineExceeded``
(``spec.progressDeadlineSeconds``, docs/events.md). One row per such event.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010_parity_progress_deadline"
down_revision: str | None = "0009_operator_inplace_unavail"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PROGRESS_DEADLINES = """
    SELECT split_part(e.stream, '/', 2) AS namespace,
           split_part(e.stream, '/', 3) AS workload,
           e.payload->>'rollout_id' AS rollout_id,
           e.payload->>'revision' AS revision,
           (e.payload->>'progress_deadline_seconds')::int AS progress_deadline_seconds,
           (e.payload->>'progressing_since')::timestamptz AS progressing_since,
           e.occurred_at AS exceeded_at,
           e.global_position AS position
    FROM events AS e
    WHERE e.type = 'RolloutProgressDeadlineExceeded'
"""


def upgrade() -> None:
    op.execute(f"CREATE VIEW progress_deadlines AS {PROGRESS_DEADLINES}")
    op.execute(
        "COMMENT ON VIEW progress_deadlines IS 'CloneSet rollouts whose progressDeadlineSeconds passed "
        "(RolloutProgressDeadlineExceeded)'"
    )


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS progress_deadlines")
