"""The statistics on ``events``' expressions, on each of its partitions too.

Revision ID: 0030_partition_statistics
Revises: 0029_events_appended_notify
Create Date: 2026-12-07

0027 created statistics on ``payload ->> 'action_id'`` and on the rollout key ``FROM events``. On a
partitioned ``events`` (0026) Postgres keeps those for the whole table only, and plans a scan of one
partition from that partition's own statistics, which had none for the expressions. So every outcome
lookup of ``pod_actions`` was estimated at thousands of rows and ANDed with a scan of the ``type`` index
over every outcome of the partition: ``rollbook history`` of a 200-pod CloneSet took 45 s on a trail of 2
million events in one month (each of its 705 actions read a bitmap of 300,000 entries).

``events_partition_statistics(partition)`` creates, on that partition, a copy of each statistics object
defined on ``events`` (the same expressions; its name is the partition's name followed by the object's
name after ``events``). ``events_add_partitions`` calls it for each partition it makes, and ``rollbook
archive`` for a partition it puts back, so the months to come have them too. This migration makes them on
the partitions that exist and analyzes each partition that holds rows (the statistics are empty until a
partition is analyzed; autovacuum keeps them current from then on). Postgres 13 and older have no
statistics on expressions: there 0027 made none, and neither does this.

Nothing recorded changes. The downgrade drops the partitions' copies and restores 0026's
``events_add_partitions``.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from services.infra.database import migration_module
from services.infra.db_roles import PREFIX_SQL

revision: str = "0030_partition_statistics"
down_revision: str | None = "0029_events_appended_notify"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_PARTITION_STATISTICS = """
CREATE FUNCTION events_partition_statistics(part regclass) RETURNS integer LANGUAGE plpgsql
SET search_path = public, pg_temp AS $$
DECLARE
    made integer := 0;
    parent record;
BEGIN
    IF current_setting('server_version_num')::integer < 140000 THEN
        RETURN 0;  -- no statistics on expressions before Postgres 14 (0027 made none)
    END IF;
    FOR parent IN
        SELECT s.stxname, pg_get_statisticsobjdef_expressions(s.oid) AS expressions
          FROM pg_statistic_ext s
         WHERE s.stxrelid = 'events'::regclass AND starts_with(s.stxname, 'events')
    LOOP
        EXECUTE format('CREATE STATISTICS IF NOT EXISTS %I ON (%s) FROM %s',
                       (SELECT c.relname FROM pg_class c WHERE c.oid = part)
                           || substr(parent.stxname, length('events') + 1),
                       array_to_string(parent.expressions, '), ('), part);
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$
"""

_0026 = migration_module("0026_events_partitioned.py")
_PREVIOUS_ADD_PARTITIONS: str = _0026._ADD_PARTITIONS.replace("{prefix}", PREFIX_SQL).replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
)
_CREATED = "            created := created + 1;\n"
assert _PREVIOUS_ADD_PARTITIONS.count(_CREATED) == 1
_ADD_PARTITIONS = _PREVIOUS_ADD_PARTITIONS.replace(
    _CREATED, "            PERFORM events_partition_statistics(name::regclass);\n" + _CREATED
)


def _partitions() -> list[str]:
    rows = op.get_bind().execute(
        text(
            "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'events'::regclass ORDER BY 1"
        )
    )
    return [row[0] for row in rows]


def upgrade() -> None:
    op.execute(_PARTITION_STATISTICS)
    op.execute("REVOKE EXECUTE ON FUNCTION events_partition_statistics(regclass) FROM PUBLIC")
    op.execute(
        "COMMENT ON FUNCTION events_partition_statistics(regclass) IS 'creates on a partition of events a"
        " copy of each statistics object of events: Postgres plans a scan of a partition from its own'"
    )
    op.execute(_ADD_PARTITIONS)
    bind = op.get_bind()
    for partition in _partitions():
        statistics = text("SELECT events_partition_statistics(CAST(:p AS regclass))")
        made = bind.execute(statistics, {"p": partition})
        holds_rows = bind.execute(text(f"SELECT EXISTS (SELECT 1 FROM {partition})")).scalar_one()
        if made.scalar_one() and holds_rows:
            op.execute(f"ANALYZE {partition}")


def downgrade() -> None:
    op.execute(_PREVIOUS_ADD_PARTITIONS)
    op.execute(
        """
        DO $drop$
        DECLARE
            copy record;
        BEGIN
            FOR copy IN
                SELECT n.nspname, s.stxname FROM pg_statistic_ext s
                  JOIN pg_namespace n ON n.oid = s.stxnamespace
                  JOIN pg_inherits i ON i.inhrelid = s.stxrelid AND i.inhparent = 'events'::regclass
            LOOP
                EXECUTE format('DROP STATISTICS %I.%I', copy.nspname, copy.stxname);
            END LOOP;
        END
        $drop$
        """
    )
    op.execute("DROP FUNCTION events_partition_statistics(regclass)")
