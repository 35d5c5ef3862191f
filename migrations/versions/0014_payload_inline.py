"""``events`` keeps a payload of up to a page inline and uncompressed, and gathers no statistics on it.

Revision ID: 0014_payload_inline
Revises: 0013_inplace_mark_of_its_own
Create Date: 2026-12-02

Postgres compresses a column value (pglz) once its row passes about 2 kB, and moves it to the TOAST table if
it is still too long. An ObjectObserved carrying a pod is about 3.5 kB of JSON, more than half of a rollout's
rows: pglz was a tenth of the server's CPU in an in-place rollout (bench/postgres_statements.py under
perf), and every reader of those rows (the relay, the planner's catch-up, verify) paid to fetch and
decompress them again. ``toast_tuple_target = 8160`` (the most Postgres allows) makes the store try that
only for rows longer than a page: a rollout's rows are stored as they are. A longer payload is still
compressed and moved out of line, as before. Rows stored earlier stay as they are: both forms read alike.

No planner estimate uses statistics of the payload column itself: the queries filter on expressions
(``payload->>'action_id'``, whose expression indexes keep their own statistics) and nothing uses the
containment operators whose selectivity reads a jsonb column's most common values. ANALYZE (autovacuum
runs it several times while a rollout grows the table) sorted and compared every sampled payload for
them; ``SET STATISTICS 0`` leaves the column out of ANALYZE.

Neither changes a stored byte that is read: ``payload::text``, the hash chain's input, is the same however
the value is stored, so no hash changes and verify reads old and new rows alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014_payload_inline"
down_revision: str | None = "0013_inplace_mark_of_its_own"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Postgres's upper bound for toast_tuple_target: the longest row a heap page holds.
TOAST_TUPLE_TARGET = 8160


def upgrade() -> None:
    op.execute(f"ALTER TABLE events SET (toast_tuple_target = {TOAST_TUPLE_TARGET})")
    op.execute("ALTER TABLE events ALTER COLUMN payload SET STATISTICS 0")


def downgrade() -> None:
    op.execute("ALTER TABLE events ALTER COLUMN payload SET STATISTICS -1")
    op.execute("ALTER TABLE events RESET (toast_tuple_target)")
