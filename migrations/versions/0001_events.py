"""The append-only events table, its writer serialisation and its append-only guard.

Revision ID: 0001_events
Revises:
Create Date: 2026-11-30

Why the writers are serialised: ``global_position`` comes from a sequence, and sequence values are handed
out when a row is inserted, not when its transaction commits. With two writers, position 11 can become
visible before position 10 commits; a catch-up reader at 11 would then skip 10 forever (the gap problem).
A BEFORE INSERT statement trigger takes one transaction-scoped advisory lock before any row (and so any
sequence value) is produced, and Postgres releases it only after the commit is visible. Positions
therefore become visible in order, and every row visible to a reader has every lower position either
visible or rolled back for good. The lock is in the database, so every insert path (the store, COPY,
psql) obeys it. The identity sequence must keep CACHE 1: a per-session cache would hand out positions
out of commit order again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0001_events"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# int.from_bytes(b"rollbook", "big"): the advisory lock key every writer of `events` takes.
APPEND_LOCK_KEY = 8245928655502405483


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE events (
            global_position bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
            event_id        uuid        NOT NULL,
            stream          text        NOT NULL,
            stream_version  integer     NOT NULL,
            type            text        NOT NULL,
            schema_version  integer     NOT NULL,
            occurred_at     timestamptz NOT NULL,
            recorded_at     timestamptz NOT NULL DEFAULT now(),
            causation_id    uuid,
            correlation_id  text,
            payload         jsonb       NOT NULL,
            CONSTRAINT events_event_id_key UNIQUE (event_id),
            CONSTRAINT events_stream_version_key UNIQUE (stream, stream_version),
            CONSTRAINT events_stream_version_positive CHECK (stream_version >= 1),
            CONSTRAINT events_stream_not_empty CHECK (stream <> '')
        )
        """
    )
    op.execute("COMMENT ON TABLE events IS 'rollbook event log: append-only, one row per event'")
    op.execute("COMMENT ON COLUMN events.correlation_id IS 'the rollout id the event belongs to'")
    op.execute("COMMENT ON COLUMN events.recorded_at IS 'when the recording transaction began'")
    # correlation_id is the rollout id: "everything about rollout X" is the common history query.
    op.execute(
        "CREATE INDEX events_correlation_id_idx ON events (correlation_id) WHERE correlation_id IS NOT NULL"
    )

    op.execute(
        f"""
        CREATE FUNCTION events_append_lock() RETURNS void LANGUAGE sql AS
        $$ SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY}) $$
        """
    )
    op.execute(
        """
        COMMENT ON FUNCTION events_append_lock() IS
        'Serialises writers of events until commit, so global positions become visible in order'
        """
    )
    op.execute(
        """
        CREATE FUNCTION events_serialise_writers() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM events_append_lock();
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER events_serialise_writers BEFORE INSERT ON events
        FOR EACH STATEMENT EXECUTE FUNCTION events_serialise_writers()
        """
    )
    op.execute(
        """
        CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'events is append-only: % refused', TG_OP
                USING ERRCODE = 'restrict_violation',
                      HINT = 'Events are never changed or removed; append an event that corrects the record.';
        END
        $$
        """
    )
    # Statement-level, so even an UPDATE/DELETE matching no row is refused (no silent "0 rows" success).
    op.execute(
        """
        CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change()
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS events")
    op.execute("DROP FUNCTION IF EXISTS events_refuse_change()")
    op.execute("DROP FUNCTION IF EXISTS events_serialise_writers()")
    op.execute("DROP FUNCTION IF EXISTS events_append_lock()")
