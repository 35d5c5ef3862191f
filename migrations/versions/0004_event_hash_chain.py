"""Tamper evidence: every event row carries a hash chained to the previous event of its stream, and a global
chain hash linking it to the row before it in global order; checkpoints of the global chain.

Revision ID: 0004_event_hash_chain
Revises: 0003_sidecarset_audit_views
Create Date: 2026-11-30

How the hashes are computed (services/model/hashchain.py recomputes exactly this in Python, from the raw
columns, to verify; docs/replay.md):

    content      = UTF-8 of the columns joined by U+001F: event_id, stream, stream_version, type,
                   schema_version, occurred_at and recorded_at as integer microseconds since the epoch,
                   causation_id ('' if null), correlation_id ('' if null), payload::text
    stream_hash  = sha256(stream_hash of the stream's previous version (32 zero bytes for the first)
                          || content)
    chain_hash   = sha256(chain_hash of the previous row in global order (32 zero bytes for the first)
                          || global_position as 8 big-endian bytes || stream_hash)

Computed by a BEFORE INSERT row trigger, so every insert path (the store's statements, COPY, psql) gets
them and no writer can supply its own. It is correct because writers are serialised (0001's statement
trigger takes the append lock before any row is produced): the "previous" row each trigger reads is
final. Rows inserted earlier in the same statement are visible to the later rows' trigger.

``event_checkpoints`` records (global_position, chain_hash) at intervals for convenience; a checkpoint is
only worth something when it is also kept outside the database (JetStream, a file) — see docs/replay.md.
Existing rows (a database migrated with events in it) are chained in global order by the upgrade.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004_event_hash_chain"
down_revision: str | None = "0003_sidecarset_audit_views"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CONTENT = r"""
    convert_to(concat_ws(E'\x1f',
        {r}.event_id::text, {r}.stream, {r}.stream_version::text, {r}.type, {r}.schema_version::text,
        (extract(epoch FROM {r}.occurred_at) * 1000000)::bigint::text,
        (extract(epoch FROM {r}.recorded_at) * 1000000)::bigint::text,
        coalesce({r}.causation_id::text, ''), coalesce({r}.correlation_id, ''), {r}.payload::text), 'UTF8')
"""


def upgrade() -> None:
    op.execute("ALTER TABLE events ADD COLUMN stream_hash bytea, ADD COLUMN chain_hash bytea")
    op.execute(
        "COMMENT ON COLUMN events.stream_hash IS"
        " 'sha256(previous stream_hash of the stream || row content): tamper evidence'"
    )
    op.execute(
        "COMMENT ON COLUMN events.chain_hash IS"
        " 'sha256(previous chain_hash in global order || global_position || stream_hash)'"
    )
    op.execute(
        f"""
        CREATE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            previous_stream bytea;
            previous_chain bytea;
        BEGIN
            SELECT e.stream_hash INTO previous_stream FROM events e
             WHERE e.stream = NEW.stream AND e.stream_version < NEW.stream_version
             ORDER BY e.stream_version DESC LIMIT 1;
            SELECT e.chain_hash INTO previous_chain FROM events e
             ORDER BY e.global_position DESC LIMIT 1;
            NEW.stream_hash := sha256(coalesce(previous_stream, '\\x{"00" * 32}'::bytea)
                                      || {_CONTENT.format(r="NEW")});
            NEW.chain_hash := sha256(coalesce(previous_chain, '\\x{"00" * 32}'::bytea)
                                     || int8send(NEW.global_position) || NEW.stream_hash);
            RETURN NEW;
        END
        $$
        """
    )
    # Existing rows, chained in order while no trigger writes (the table is append-only: the guard is
    # lifted for this one statement inside the migration's transaction).
    op.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
    op.execute(
        f"""
        DO $$
        DECLARE
            r record;
            streams jsonb := '{{}}';
            previous_chain bytea := '\\x{"00" * 32}'::bytea;
            sh bytea;
        BEGIN
            FOR r IN SELECT * FROM events ORDER BY global_position LOOP
                sh := sha256(coalesce(decode(streams ->> r.stream, 'hex'), '\\x{"00" * 32}'::bytea)
                             || {_CONTENT.format(r="r")});
                previous_chain := sha256(previous_chain || int8send(r.global_position) || sh);
                UPDATE events SET stream_hash = sh, chain_hash = previous_chain
                 WHERE global_position = r.global_position;
                streams := jsonb_set(streams, ARRAY[r.stream], to_jsonb(encode(sh, 'hex')));
            END LOOP;
        END
        $$
        """
    )
    op.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    op.execute(
        "ALTER TABLE events ALTER COLUMN stream_hash SET NOT NULL, ALTER COLUMN chain_hash SET NOT NULL"
    )
    op.execute(
        """
        CREATE TRIGGER events_chain BEFORE INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION events_chain()
        """
    )
    op.execute(
        """
        CREATE TABLE event_checkpoints (
            global_position bigint      PRIMARY KEY,
            chain_hash      bytea       NOT NULL,
            created_at      timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE event_checkpoints IS 'global chain hash at a position; copies are kept outside"
        " the database (JetStream, files) so a rewrite of the chain is detectable'"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS event_checkpoints")
    op.execute("DROP TRIGGER IF EXISTS events_chain ON events")
    op.execute("DROP FUNCTION IF EXISTS events_chain()")
    op.execute("ALTER TABLE events DROP COLUMN IF EXISTS chain_hash, DROP COLUMN IF EXISTS stream_hash")
