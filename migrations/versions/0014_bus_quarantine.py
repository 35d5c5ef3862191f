"""``bus_quarantine``: bus messages the auditor's audit found on an event subject with no matching event in
the store (nobody's relay published them). They are kept here for an operator to look at, never stored in
``events`` (docs/security-bus.md, docs/sql.md).

Revision ID: 0014_bus_quarantine
Revises: 0013_inplace_mark_of_its_own
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014_bus_quarantine"
down_revision: str | None = "0013_inplace_mark_of_its_own"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE bus_quarantine (
            id bigserial PRIMARY KEY,
            quarantined_at timestamptz NOT NULL DEFAULT now(),
            subject text NOT NULL,
            stream_sequence bigint NOT NULL,
            event_id uuid,
            event_type text,
            event_stream text,
            reason text NOT NULL,
            data bytea NOT NULL,
            UNIQUE (subject, stream_sequence)
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE bus_quarantine IS 'Bus messages on event subjects with no matching stored event: "
        "never stored in events (the auditor quarantines them)'"
    )


def downgrade() -> None:
    op.execute("DROP TABLE bus_quarantine")
