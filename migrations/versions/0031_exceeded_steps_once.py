"""``max_unavailable_exceeded`` reads a rollout's partition steps once, not once per observation.

Revision ID: 0031_exceeded_steps_once
Revises: 0030_partition_statistics
Create Date: 2026-12-07

0027's view found, for each observation during the rollout, the latest partition step before it by a
lateral ``LIMIT 1`` over ``partition_steps``: one index lookup of the rollout's requests and steps per
observation, which Postgres ANDed with a bitmap of every ``PartitionStepPlanned`` of the partition. For the
627 observations of a 200-pod CloneSet's rollout on a 2-million-event trail that was 135 of its 185 ms
(bench/trail.py, docs/performance.md). Now the rollout's steps are read once and merged with its
observations in position order; each observation takes the limit of the last step before it (a step at
the same position comes after the observation, as ``p.position < u.position`` had it). Same rows and
columns; 48 ms.

Nothing recorded changes. The downgrade puts 0027's view back.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.database import migration_module

revision: str = "0031_exceeded_steps_once"
down_revision: str | None = "0030_partition_statistics"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# ``steps_before`` numbers the steps in position order; an observation belongs to the group of the last
# step before it, whose limit is the only non-NULL ``step_limit`` of the group. Observations before the
# first step (group 0) have no limit and no row, as the lateral LIMIT 1 gave none.
MAX_UNAVAILABLE_EXCEEDED = """
SELECT r.rollout_id, m.kind, m.namespace, m.workload, m.position, m.at, m.observed,
       m.replicas, m.available, m.unavailable, m.max_unavailable, r.rollout_key
FROM rollouts AS r
CROSS JOIN LATERAL (
    SELECT s.kind, s.namespace, s.workload, s.position, s.at, s.observed, s.replicas, s.available,
           s.unavailable, s.is_step, max(s.step_limit) OVER (PARTITION BY s.steps_before) AS max_unavailable
    FROM (
        SELECT t.*, count(*) FILTER (WHERE t.is_step)
                        OVER (ORDER BY t.position, t.is_step ROWS UNBOUNDED PRECEDING) AS steps_before
        FROM (
            SELECT u.kind, u.namespace, u.workload, u.position, u.at, u.observed, u.replicas, u.available,
                   u.unavailable, NULL::integer AS step_limit, false AS is_step
            FROM unavailability_of(r.kind, r.namespace, r.workload) AS u
            WHERE u.position > r.started_position
              AND u.position < coalesce(r.finished_position, 9223372036854775807)
            UNION ALL
            SELECT NULL, NULL, NULL, p.position, NULL, NULL, NULL, NULL, NULL, p.max_unavailable, true
            FROM partition_steps AS p
            WHERE p.rollout_key = r.rollout_key AND p.rollout_id = r.rollout_id AND p.position IS NOT NULL
        ) AS t
    ) AS s
) AS m
WHERE NOT m.is_step AND m.unavailable > m.max_unavailable
"""


def _replace(sql: str) -> None:
    # Same columns in the same order and types: CREATE OR REPLACE keeps the comment and the grants.
    op.execute(f"CREATE OR REPLACE VIEW max_unavailable_exceeded AS {sql}")


def upgrade() -> None:
    _replace(MAX_UNAVAILABLE_EXCEEDED)


def downgrade() -> None:
    _replace(migration_module("0027_trail_read_indexes.py").MAX_UNAVAILABLE_EXCEEDED)
