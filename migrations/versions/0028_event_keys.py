"""Uniqueness of ``events`` at a cost that does not grow with its partitions: ``event_keys`` (every event id
ever stored, archived ones too) and ``stream_heads`` (each stream's last version and stream hash).

Revision ID: 0028_event_keys
Revises: 0027_trail_read_indexes
Create Date: 2026-12-07

0026 checked ``UNIQUE (event_id)`` and ``UNIQUE (stream, stream_version)`` with an index lookup in every
partition, so each kept month made every appended row dearer. Now the insert trigger ``events_unique_keys``
inserts the row's id into ``event_keys``, whose primary key is named ``events_event_id_key``: a stored id
raises the unique violation callers always saw, from one index. And it compares the row's version with
``stream_heads``: a version at or below the stream's head raises ``events_stream_version_key``, then the
head moves to the row. One lookup each, however many partitions.

Versions of a stream must therefore rise (gaps are allowed, going back is not), which every writer already
does: the store's appends take the next versions, and a restore loads a trail in global order.

Both tables outlive an archive (``rollbook archive`` drops partitions, never keys): a redelivered archived
event is found in ``event_keys`` and skipped as stored, and versions keep rising past archived ones. The
chain trigger continues a stream from ``stream_heads`` (its stream hash) instead of a lookup in every
partition and in ``archived_stream_heads``, which ``rollbook archive`` still fills for ``audit verify
--archive``. Ids archived before this migration are not in ``event_keys`` (0026 did not keep them).

Only the trigger writes both tables: its function is SECURITY DEFINER, owned by the owner; the services'
roles may read them, not write them (a deleted key would let a duplicate in, a lowered head a version
twice). No plpgsql EXCEPTION block: that would cost a subtransaction per row.

The downgrade restores 0026's trigger and chain function and drops both tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.database import migration_module
from services.infra.db_roles import role_sql

revision: str = "0028_event_keys"
down_revision: str | None = "0027_trail_read_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# 0026's chain and uniqueness functions, taken from it rather than copied, so the downgrade restores them
# exactly and the upgrade changes one lookup only.
_0026 = migration_module("0026_events_partitioned.py")
_PARTITION_CHAIN: str = _0026._ARCHIVE_AWARE_CHAIN
_PARTITION_UNIQUE_KEYS: str = _0026._UNIQUE_KEYS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)

# 0026's chain function but for how it finds the stream's previous hash when the transaction's memo does
# not give it: the head in stream_heads, one index lookup. The head is the stream's highest version, so it
# is the version right below any row the uniqueness trigger lets in (a row it refuses needs no hash). It
# also covers archived streams, as archived_stream_heads did. Same hashes as 0026.
_PARTITION_STREAM_LOOKUP = """
            SELECT e.stream_hash INTO previous_stream FROM events e
             WHERE e.stream = NEW.stream AND e.stream_version < NEW.stream_version
             ORDER BY e.stream_version DESC LIMIT 1;

        IF previous_stream IS NULL THEN
            SELECT h.stream_hash INTO previous_stream FROM archived_stream_heads h
             WHERE h.stream = NEW.stream AND h.stream_version < NEW.stream_version;
        END IF;"""
_HEAD_STREAM_LOOKUP = """SELECT h.stream_hash INTO previous_stream FROM stream_heads h
         WHERE h.stream = NEW.stream AND h.stream_version < NEW.stream_version;"""
assert _PARTITION_CHAIN.count(_PARTITION_STREAM_LOOKUP) == 1
_HEAD_CHAIN = _PARTITION_CHAIN.replace(_PARTITION_STREAM_LOOKUP, _HEAD_STREAM_LOOKUP)

# Runs after events_chain (BEFORE triggers fire in name order), so the row's stream hash is known and the
# head takes it. Race-free: every writer holds the append lock (0001) from before its first row to its
# commit, and the unique index of event_keys would refuse a duplicate id without it.
_KEYED_UNIQUE_KEYS = """
CREATE OR REPLACE FUNCTION events_unique_keys() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    head integer;
BEGIN
    INSERT INTO event_keys (event_id) VALUES (NEW.event_id);
    SELECT h.stream_version INTO head FROM stream_heads h WHERE h.stream = NEW.stream;
    IF head >= NEW.stream_version THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "events_stream_version_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'events_stream_version_key', TABLE = 'events',
                  DETAIL = format('Key (stream, stream_version)=(%s, %s) is at or below the stream''s'
                                  ' head, version %s.', NEW.stream, NEW.stream_version, head);
    END IF;
    IF head IS NULL THEN
        INSERT INTO stream_heads (stream, stream_version, stream_hash)
        VALUES (NEW.stream, NEW.stream_version, NEW.stream_hash);
    ELSE
        UPDATE stream_heads SET stream_version = NEW.stream_version, stream_hash = NEW.stream_hash
         WHERE stream = NEW.stream;
    END IF;
    RETURN NEW;
END
$$
"""

# 0026's comment, to the whitespace.
_UNIQUE_KEYS_COMMENT = (
    "COMMENT ON FUNCTION events_unique_keys() IS"
    " 'UNIQUE (event_id) and UNIQUE (stream, stream_version) across the partitions of events, and no\n"
    "         version at or below an archived head: race-free under the append lock every writer holds'"
)


def upgrade() -> None:
    # No writer while the keys are copied: the trigger takes over from exactly these rows.
    op.execute("LOCK TABLE events IN SHARE MODE")
    op.execute("CREATE TABLE event_keys (event_id uuid CONSTRAINT events_event_id_key PRIMARY KEY)")
    op.execute(
        "COMMENT ON TABLE event_keys IS 'the id of every event stored, archived ones too: unique across"
        " the partitions of events, written by its insert trigger only'"
    )
    op.execute(
        """
        CREATE TABLE stream_heads (
            stream         text    PRIMARY KEY,
            stream_version integer NOT NULL,
            stream_hash    bytea   NOT NULL
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE stream_heads IS 'each stream''s last version and stream hash, archived or not:"
        " a new event takes a higher version; written by the insert trigger of events only'"
    )
    op.execute(
        f"""
        DO $grants$
        BEGIN
            -- Readable (the store's version and stored-id reads, the chain trigger as the webhook), never
            -- writable but through the trigger.
            EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON event_keys, stream_heads'
                           ' FROM PUBLIC, %I, %I, %I',
                           {role_sql("writer")}, {role_sql("reader")}, {role_sql("webhook")});
            EXECUTE format('GRANT SELECT ON event_keys, stream_heads TO %I, %I, %I',
                           {role_sql("writer")}, {role_sql("reader")}, {role_sql("webhook")});
        END
        $grants$
        """
    )
    op.execute("INSERT INTO event_keys (event_id) SELECT event_id FROM events")
    # The head of each stream: its newest row, or its archived head when that is newer.
    op.execute(
        """
        INSERT INTO stream_heads (stream, stream_version, stream_hash)
        SELECT DISTINCT ON (stream) stream, stream_version, stream_hash
          FROM (SELECT stream, stream_version, stream_hash FROM events
                UNION ALL
                SELECT stream, stream_version, stream_hash FROM archived_stream_heads) AS heads
         ORDER BY stream, stream_version DESC
        """
    )
    op.execute(_KEYED_UNIQUE_KEYS)
    op.execute(
        """
        COMMENT ON FUNCTION events_unique_keys() IS
        'UNIQUE (event_id) by the primary key of event_keys, and stream versions above the stream''s head
         in stream_heads, across the partitions of events and their archives; keeps both tables'
        """
    )
    op.execute(_HEAD_CHAIN)


def downgrade() -> None:
    op.execute("LOCK TABLE events IN SHARE MODE")
    op.execute(_PARTITION_UNIQUE_KEYS)
    op.execute(_UNIQUE_KEYS_COMMENT)
    op.execute(_PARTITION_CHAIN)
    op.execute("DROP TABLE stream_heads")
    op.execute("DROP TABLE event_keys")
