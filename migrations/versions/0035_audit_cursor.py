"""``audit_cursor``: how far the auditor has audited the bus's event stream.

The audit no longer receives every message on the bus through a durable consumer. It walks the stream's
sequences: a message the relay beside it published (JetStream acknowledged that publish as new at that
sequence) is settled unread, and only the other sequences are read. What it has audited is this row:
every message of the stream created at ``stream_created`` up to ``audited_through`` (a stream sequence) is
audited. One row per JetStream stream name. It is a position, not part of the record: losing it only makes
the audit read those messages again.

The writer role (the auditor) may read, insert and update it (the default privileges of 0016 give SELECT
and INSERT; UPDATE is granted here); nobody but the owner may delete it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.db_roles import role_sql

revision: str = "0035_audit_cursor"
down_revision: str | None = "0034_round_inputs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE audit_cursor (
            bus_stream      text        PRIMARY KEY,
            stream_created  timestamptz NOT NULL,
            audited_through bigint      NOT NULL CHECK (audited_through >= 0),
            updated_at      timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE audit_cursor IS 'per JetStream stream: every message up to audited_through (a stream"
        " sequence) of the stream created at stream_created has been audited'"
    )
    op.execute(
        f"""
        DO $grants$
        BEGIN
            EXECUTE format('GRANT SELECT, INSERT, UPDATE ON audit_cursor TO %I', {role_sql("writer")});
        END
        $grants$
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE audit_cursor")
