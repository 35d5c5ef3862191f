"""``events`` partitioned by month of ``recorded_at``, so old months can be archived to files and dropped
(``rollbook archive``, docs/retention.md); uniqueness of ``event_id`` and ``(stream, stream_version)`` kept
across partitions by a trigger.

Revision ID: 0026_events_partitioned
Revises: 0025_native_sidecar_actions
Create Date: 2026-12-07

Why by ``recorded_at`` and not by ``global_position``: retention is asked for by date ("keep a year"), and a
range of positions cannot be closed ahead of time (nobody knows which position a month will end at), while a
month's range of ``recorded_at`` can: partitions are created ahead (``events_add_partitions``, called by the
auditor), and a DEFAULT partition takes any row no partition covers, so an insert never fails.

Uniqueness across partitions. Postgres enforces a unique index on a partitioned table only when it includes
the partition key, and neither ``event_id`` nor ``(stream, stream_version)`` does. So the BEFORE INSERT row
trigger ``events_unique_keys`` checks both (an index lookup in each partition) and raises SQLSTATE 23505 with
the old constraint names (``events_event_id_key``, ``events_stream_version_key``): callers see what they
saw before. It is race-free because every writer of ``events`` already holds the append lock, taken by
0001's statement trigger before any row and released at commit, and a plpgsql query takes a fresh
snapshot: the check sees every committed row, and rows earlier in the same statement. The check also
refuses a stream version at or below the stream's archived head (``archived_stream_heads``), so versions
keep rising after a stream's events were archived.

``event_archives`` records each archived range (positions, counts, the chain hash before and at its end),
``archived_stream_heads`` each archived stream's last version and stream hash: the chain trigger
continues a stream (and the global chain, when every event was archived) from them. Only the owner writes
both (``rollbook archive``).

The existing table is rewritten once into the partitioned one (time proportional to its size; positions,
hashes and the position sequence kept); the views that read it are replaced in place (``CREATE OR REPLACE
VIEW``, so their grants, comments and dependents stay), and its indexes, triggers, grants and comments are
carried over. The downgrade does the reverse, and refuses once anything was archived (the archived events
are not in the database to put back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

from services.infra.db_roles import PREFIX_SQL, role_sql

revision: str = "0026_events_partitioned"
down_revision: str | None = "0025_native_sidecar_actions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ZERO = "'\\x" + "00" * 32 + "'::bytea"

# 0004's content expression, unchanged (the hash input must stay the same).
_CONTENT = r"""
    convert_to(concat_ws(E'\x1f',
        NEW.event_id::text, NEW.stream, NEW.stream_version::text, NEW.type, NEW.schema_version::text,
        (extract(epoch FROM NEW.occurred_at) * 1000000)::bigint::text,
        (extract(epoch FROM NEW.recorded_at) * 1000000)::bigint::text,
        coalesce(NEW.causation_id::text, ''), coalesce(NEW.correlation_id, ''), NEW.payload::text), 'UTF8')
"""

_STREAM_LOOKUP = """
            SELECT e.stream_hash INTO previous_stream FROM events e
             WHERE e.stream = NEW.stream AND e.stream_version < NEW.stream_version
             ORDER BY e.stream_version DESC LIMIT 1;
"""

# 0006's function with two fallbacks for archived events: a stream whose earlier events were archived
# continues from its archived head, and the global chain from the last archived event when no event is
# left in the table. Same hashes as 0006.
#
# And one lookup less per row, whatever the number of partitions: finding the last row in global order
# asks every partition (none can be pruned: the query names no recorded_at). But a transaction that
# inserted a row holds the writers' lock from then until it ends, so the last row is the one it inserted
# last: each row leaves its position's chain material in a transaction-local setting, keyed by the
# transaction's id, and the next row of the same transaction reads it there. A statement that fails (or a
# savepoint rolled back) takes the setting back with its rows; no row that passed this trigger is skipped
# without an error (the table has no unique index for ON CONFLICT to act on).
_ARCHIVE_AWARE_CHAIN = f"""
CREATE OR REPLACE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last_stream text;
    last_version integer;
    last_stream_hash bytea;
    previous_stream bytea;
    previous_chain bytea;
    mine text := pg_current_xact_id()::text || ' ';
    memo text := current_setting('rollbook.events_chain_head', true);
    version_text text;
BEGIN
    IF memo IS NOT NULL AND starts_with(memo, mine) THEN
        version_text := split_part(memo, ' ', 2);
        last_version := version_text::integer;
        last_stream_hash := decode(split_part(memo, ' ', 3), 'hex');
        previous_chain := decode(split_part(memo, ' ', 4), 'hex');
        last_stream := substr(memo, length(mine) + length(version_text) + 132);
    ELSE
        SELECT e.stream, e.stream_version, e.stream_hash, e.chain_hash
          INTO last_stream, last_version, last_stream_hash, previous_chain
          FROM events e ORDER BY e.global_position DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT a.last_chain_hash INTO previous_chain FROM event_archives a
             ORDER BY a.last_position DESC LIMIT 1;
        END IF;
    END IF;
    IF last_stream = NEW.stream AND last_version = NEW.stream_version - 1 THEN
        previous_stream := last_stream_hash;
    ELSE
        {_STREAM_LOOKUP}
        IF previous_stream IS NULL THEN
            SELECT h.stream_hash INTO previous_stream FROM archived_stream_heads h
             WHERE h.stream = NEW.stream AND h.stream_version < NEW.stream_version;
        END IF;
    END IF;
    NEW.stream_hash := sha256(coalesce(previous_stream, {_ZERO}) || {_CONTENT});
    NEW.chain_hash := sha256(coalesce(previous_chain, {_ZERO})
                             || int8send(NEW.global_position) || NEW.stream_hash);
    PERFORM set_config('rollbook.events_chain_head',
                       mine || NEW.stream_version || ' ' || encode(NEW.stream_hash, 'hex') || ' '
                       || encode(NEW.chain_hash, 'hex') || ' ' || NEW.stream, true);
    RETURN NEW;
END
$$
"""

# 0006's function exactly, for the downgrade.
_PREVIOUS_CHAIN = f"""
CREATE OR REPLACE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last_stream text;
    last_version integer;
    last_stream_hash bytea;
    previous_stream bytea;
    previous_chain bytea;
BEGIN
    SELECT e.stream, e.stream_version, e.stream_hash, e.chain_hash
      INTO last_stream, last_version, last_stream_hash, previous_chain
      FROM events e ORDER BY e.global_position DESC LIMIT 1;
    IF last_stream = NEW.stream AND last_version = NEW.stream_version - 1 THEN
        previous_stream := last_stream_hash;
    ELSE
        {_STREAM_LOOKUP}
    END IF;
    NEW.stream_hash := sha256(coalesce(previous_stream, {_ZERO}) || {_CONTENT});
    NEW.chain_hash := sha256(coalesce(previous_chain, {_ZERO})
                             || int8send(NEW.global_position) || NEW.stream_hash);
    RETURN NEW;
END
$$
"""

_UNIQUE_KEYS = """
CREATE FUNCTION events_unique_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM events e WHERE e.event_id = NEW.event_id) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "events_event_id_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'events_event_id_key', TABLE = 'events',
                  DETAIL = format('Key (event_id)=(%s) already exists.', NEW.event_id);
    END IF;
    IF EXISTS (SELECT 1 FROM events e WHERE e.stream = NEW.stream AND e.stream_version = NEW.stream_version)
       OR EXISTS (SELECT 1 FROM archived_stream_heads h
                   WHERE h.stream = NEW.stream AND h.stream_version >= NEW.stream_version) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "events_stream_version_key"'
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'events_stream_version_key', TABLE = 'events',
                  DETAIL = format('Key (stream, stream_version)=(%s, %s) already exists or was archived.',
                                  NEW.stream, NEW.stream_version);
    END IF;
    RETURN NEW;
END
$$
"""

# The partitions of events with their bounds (the default partition has none).
_PARTITIONS_VIEW = r"""
CREATE VIEW event_partitions AS
SELECT c.relname AS name,
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' AS is_default,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']+)''\)')::timestamptz AS lower_bound,
       substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz AS upper_bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'events'::regclass
"""

# Partitions of ``months`` calendar months each, from the end of the newest one (or the month of ``since``
# when there is none) until two partitions lie ahead of now. SECURITY DEFINER: the auditor (the writer
# role) calls it, and only the owner may create partitions. A range the default partition already holds
# rows of is skipped (they stay there, still read and archived as that partition).
_ADD_PARTITIONS = """
CREATE FUNCTION events_add_partitions(months integer, since timestamptz DEFAULT now())
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    step interval;
    lower timestamptz;
    upper timestamptz;
    horizon timestamptz;
    created integer := 0;
    name text;
    prefix text := {prefix};
BEGIN
    IF months NOT IN (1, 2, 3, 4, 6, 12) THEN
        RAISE EXCEPTION 'partition interval must divide a year: 1, 2, 3, 4, 6 or 12 months, not %', months
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    step := make_interval(months => months);
    SELECT max(p.upper_bound) INTO lower FROM event_partitions p WHERE NOT p.is_default;
    IF lower IS NULL THEN
        lower := date_trunc('month', least(since, now()) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    END IF;
    horizon := now() + 2 * step;
    WHILE lower < horizon LOOP
        upper := ((lower AT TIME ZONE 'UTC') + step) AT TIME ZONE 'UTC';
        IF NOT EXISTS (SELECT 1 FROM events_default d WHERE d.recorded_at >= lower AND d.recorded_at < upper)
        THEN
            name := 'events_' || to_char(lower AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
            EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                           name, lower, upper);
            -- Rows go in through events only (its statement trigger serialises writers): nobody but the
            -- owner touches a partition itself.
            EXECUTE format('REVOKE ALL ON %I FROM %I, %I, %I', name,
                           prefix || '_writer', prefix || '_reader', prefix || '_webhook');
            created := created + 1;
        END IF;
        lower := upper;
    END LOOP;
    RETURN created;
END
$$
"""


class _Dependents(NamedTuple):
    """What hangs on ``events`` by name and must be carried to the table that replaces it."""

    views: list[tuple[str, str, list[str]]]  # name, definition, options
    indexes: list[str]  # CREATE INDEX statements
    triggers: list[str]  # CREATE TRIGGER statements
    grants: list[tuple[str, str]]  # (privilege, grantee: '' for PUBLIC)
    table_comment: str | None
    column_comments: list[tuple[str, str]]
    next_position: int


def _capture(bind: sa.Connection, skip_indexes: set[str], skip_triggers: set[str]) -> _Dependents:
    rows = bind.execute(
        sa.text(
            """
            SELECT DISTINCT c.relname, pg_get_viewdef(c.oid), coalesce(c.reloptions, '{}')
              FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class c ON c.oid = r.ev_class
             WHERE d.refobjid = 'events'::regclass AND c.oid <> 'events'::regclass AND c.relkind = 'v'
            """
        )
    ).all()
    views = [(r[0], r[1], list(r[2])) for r in rows]
    indexes = [
        r[1]
        for r in bind.execute(
            sa.text(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'events'::regclass"
                " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid"
                " AND k.conrelid = 'events'::regclass) ORDER BY c.relname"
            )
        ).all()
        if r[0] not in skip_indexes
    ]
    triggers = [
        r[1]
        for r in bind.execute(
            sa.text(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger"
                " WHERE tgrelid = 'events'::regclass AND NOT tgisinternal AND tgparentid = 0 ORDER BY tgname"
            )
        ).all()
        if r[0] not in skip_triggers
    ]
    grants = [
        (r[0], r[1] or "")
        for r in bind.execute(
            sa.text(
                "SELECT a.privilege_type,"
                " CASE WHEN a.grantee = 0 THEN NULL ELSE pg_get_userbyid(a.grantee) END"
                " FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = 'events'::regclass"
                " AND a.grantee <> c.relowner"
            )
        ).all()
    ]
    table_comment = bind.execute(sa.text("SELECT obj_description('events'::regclass, 'pg_class')")).scalar()
    column_comments = [
        (r[0], r[1])
        for r in bind.execute(
            sa.text(
                "SELECT attname, col_description('events'::regclass, attnum) FROM pg_attribute"
                " WHERE attrelid = 'events'::regclass AND attnum > 0 AND NOT attisdropped"
                " AND col_description('events'::regclass, attnum) IS NOT NULL"
            )
        ).all()
    ]
    sequence = bind.execute(sa.text("SELECT pg_get_serial_sequence('events', 'global_position')")).scalar()
    last_value, is_called = bind.execute(sa.text(f"SELECT last_value, is_called FROM {sequence}")).one()
    return _Dependents(
        views=views,
        indexes=indexes,
        triggers=triggers,
        grants=grants,
        table_comment=table_comment,
        column_comments=column_comments,
        next_position=int(last_value) + 1 if is_called else int(last_value),
    )


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _move_aside(bind: sa.Connection) -> None:
    """Rename ``events``, its sequence and its index names out of the way of the table replacing it."""
    sequence = bind.execute(sa.text("SELECT pg_get_serial_sequence('events', 'global_position')")).scalar()
    op.execute(f"ALTER SEQUENCE {sequence} RENAME TO events_global_position_seq_old")
    for (name,) in bind.execute(
        sa.text(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = 'events'::regclass"
        )
    ).all():
        op.execute(f"ALTER INDEX {_quote(name)} RENAME TO {_quote(name[:50] + '_old')}")
    op.execute("ALTER TABLE events RENAME TO events_old")


def _carry_over(saved: _Dependents) -> None:
    """Restore on the new ``events`` what ``_capture`` saved, then drop the old table."""
    op.execute(f"ALTER TABLE events ALTER COLUMN global_position RESTART WITH {saved.next_position}")
    for statement in saved.indexes:
        op.execute(statement)
    for statement in saved.triggers:
        op.execute(statement)
    for name, definition, options in saved.views:
        with_options = f" WITH ({', '.join(options)})" if options else ""
        op.execute(f"CREATE OR REPLACE VIEW {_quote(name)}{with_options} AS {definition}")
    op.execute(
        f"""
        DO $revoke$
        BEGIN
            EXECUTE format('REVOKE ALL ON events FROM PUBLIC, %I, %I, %I',
                           {role_sql("writer")}, {role_sql("reader")}, {role_sql("webhook")});
        END
        $revoke$
        """
    )
    for privilege, grantee in saved.grants:
        op.execute(f"GRANT {privilege} ON events TO {_quote(grantee) if grantee else 'PUBLIC'}")
    if saved.table_comment is not None:
        op.execute(f"COMMENT ON TABLE events IS {_literal(saved.table_comment)}")
    for column, comment in saved.column_comments:
        op.execute(f"COMMENT ON COLUMN events.{_quote(column)} IS {_literal(comment)}")
    op.execute("DROP TABLE events_old")


_COLUMNS = """
    global_position bigint      GENERATED ALWAYS AS IDENTITY (CACHE 1),
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
    stream_hash     bytea       NOT NULL,
    chain_hash      bytea       NOT NULL,
    CONSTRAINT events_stream_version_positive CHECK (stream_version >= 1),
    CONSTRAINT events_stream_not_empty CHECK (stream <> '')
"""
_ALL_COLUMNS = (
    "global_position, event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,"
    " causation_id, correlation_id, payload, stream_hash, chain_hash"
)


def upgrade() -> None:
    bind = op.get_bind()
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    op.execute(
        """
        CREATE TABLE event_archives (
            first_position    bigint      PRIMARY KEY,
            last_position     bigint      NOT NULL UNIQUE,
            events            bigint      NOT NULL,
            chain_hash_before bytea       NOT NULL,
            last_chain_hash   bytea       NOT NULL,
            partitions        text[]      NOT NULL,
            file              text        NOT NULL,
            sha256            text        NOT NULL,
            archived_at       timestamptz NOT NULL DEFAULT now(),
            CHECK (last_position >= first_position)
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE event_archives IS 'ranges of events archived to files and dropped"
        " (rollbook archive, docs/retention.md); audit verify --archive checks them'"
    )
    op.execute(
        """
        CREATE TABLE archived_stream_heads (
            stream         text    PRIMARY KEY,
            stream_version integer NOT NULL,
            stream_hash    bytea   NOT NULL
        )
        """
    )
    op.execute(
        "COMMENT ON TABLE archived_stream_heads IS 'the last archived version of each stream and its"
        " stream_hash: versions keep rising, and the stream chain continues, after an archive'"
    )
    # Only the owner (rollbook archive) writes these: a forged head would bend the chain of a stream.
    op.execute(
        f"""
        DO $revoke$
        BEGIN
            EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON event_archives, archived_stream_heads'
                           ' FROM %I, %I', {role_sql("writer")}, {role_sql("webhook")});
            -- The insert triggers read them as whoever inserts (the webhook too).
            EXECUTE format('GRANT SELECT ON event_archives, archived_stream_heads TO %I',
                           {role_sql("webhook")});
        END
        $revoke$
        """
    )
    saved = _capture(bind, skip_indexes=set(), skip_triggers=set())
    since = bind.execute(sa.text("SELECT coalesce(min(recorded_at), now()) FROM events")).scalar()
    _move_aside(bind)
    op.execute(
        f"CREATE TABLE events ({_COLUMNS}, CONSTRAINT events_pkey PRIMARY KEY (global_position, recorded_at))"
        " PARTITION BY RANGE (recorded_at)"
    )
    op.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")
    op.execute(
        f"""
        DO $revoke$
        BEGIN
            EXECUTE format('REVOKE ALL ON events_default FROM %I, %I, %I',
                           {role_sql("writer")}, {role_sql("reader")}, {role_sql("webhook")});
        END
        $revoke$
        """
    )
    op.execute(_PARTITIONS_VIEW)
    op.execute("COMMENT ON VIEW event_partitions IS 'the partitions of events and their recorded_at bounds'")
    op.execute(_ADD_PARTITIONS.replace("{prefix}", PREFIX_SQL))
    op.execute("REVOKE EXECUTE ON FUNCTION events_add_partitions(integer, timestamptz) FROM PUBLIC")
    op.execute(
        f"""
        DO $grant$
        BEGIN
            EXECUTE format('GRANT EXECUTE ON FUNCTION events_add_partitions(integer, timestamptz) TO %I',
                           {role_sql("writer")});
        END
        $grant$
        """
    )
    bind.execute(sa.text("SELECT events_add_partitions(1, :since)"), {"since": since})
    # Rows as they are (positions, times, hashes): no trigger on the new table yet.
    op.execute(
        f"INSERT INTO events ({_ALL_COLUMNS}) OVERRIDING SYSTEM VALUE"
        f" SELECT {_ALL_COLUMNS} FROM events_old ORDER BY global_position"
    )
    # Per-partition indexes for the uniqueness checks and the reads by id and by stream.
    op.execute("CREATE INDEX events_event_id_idx ON events (event_id)")
    op.execute("CREATE INDEX events_stream_version_idx ON events (stream, stream_version)")
    _carry_over(saved)
    op.execute(_UNIQUE_KEYS)
    op.execute(
        """
        COMMENT ON FUNCTION events_unique_keys() IS
        'UNIQUE (event_id) and UNIQUE (stream, stream_version) across the partitions of events, and no
         version at or below an archived head: race-free under the append lock every writer holds'
        """
    )
    op.execute(
        "CREATE TRIGGER events_unique_keys BEFORE INSERT ON events"
        " FOR EACH ROW EXECUTE FUNCTION events_unique_keys()"
    )
    op.execute(_ARCHIVE_AWARE_CHAIN)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.execute(sa.text("SELECT EXISTS (SELECT 1 FROM event_archives)")).scalar():
        raise RuntimeError(
            "events were archived (event_archives): the table cannot go back to one unpartitioned table"
            " without them; restore a backup taken before the archive instead"
        )
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    op.execute("DROP FUNCTION events_add_partitions(integer, timestamptz)")
    op.execute("DROP VIEW event_partitions")
    saved = _capture(
        bind,
        skip_indexes={"events_event_id_idx", "events_stream_version_idx"},
        skip_triggers={"events_unique_keys"},
    )
    _move_aside(bind)
    op.execute(
        f"""
        CREATE TABLE events ({_COLUMNS},
            CONSTRAINT events_pkey PRIMARY KEY (global_position),
            CONSTRAINT events_event_id_key UNIQUE (event_id),
            CONSTRAINT events_stream_version_key UNIQUE (stream, stream_version))
        """
    )
    op.execute(
        f"INSERT INTO events ({_ALL_COLUMNS}) OVERRIDING SYSTEM VALUE"
        f" SELECT {_ALL_COLUMNS} FROM events_old ORDER BY global_position"
    )
    _carry_over(saved)
    op.execute("DROP FUNCTION events_unique_keys()")
    op.execute(_PREVIOUS_CHAIN)
    op.execute("DROP TABLE archived_stream_heads")
    op.execute("DROP TABLE event_archives")
