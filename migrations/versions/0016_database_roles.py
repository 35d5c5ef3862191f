"""Database roles by duty: an owner only migrations act as, a writer for the services that owns nothing and
may only add events, a reader for people and read commands, and the webhook's narrower writer.

Revision ID: 0016_database_roles
Revises: 0014_bus_quarantine
Create Date: 2026-12-06

Roles are cluster-wide in Postgres, so each database gets its own, named ``<database>_<duty>`` (the
database's name cut to 48 characters; services/infra/db_roles.py): two databases on one server (a test
session's, the demo's, production's) never share or break each other's roles. A role that already exists
is reused (created by an administrator beforehand, or by this migration in an earlier run); the grants
are per database.

- ``<db>_owner`` (NOLOGIN) becomes the owner of every table, view, sequence and function in ``public``
  and of ``alembic_version``; the login running the migrations is made a member, and every later
  migration runs as it (this one ends with ``SET ROLE``; migrations/env.py does it at connect), so what
  later migrations create is the owner's too.
- ``<db>_writer`` (LOGIN): SELECT on every table and view, INSERT on ``events``, INSERT and UPDATE on
  ``event_checkpoints`` (the auditor's ``ON CONFLICT DO UPDATE``). No UPDATE, DELETE or TRUNCATE on
  ``events`` and no ownership: ALTER TABLE, DISABLE TRIGGER and DROP are refused. It is a member of
  reader and webhook, so a process logged in as the writer can take either narrower duty.
- ``<db>_reader`` (LOGIN): SELECT on every table and view.
- ``<db>_webhook`` (LOGIN): SELECT and INSERT on ``events`` only.

The LOGIN roles get no password here: whoever provisions the logins sets one (embedded mode from its
pgpass file, deploy/ from the Secrets, through ``rollbook db upgrade``). ``CREATE`` on schema ``public``
is taken from PUBLIC (already so on Postgres 15) and given to the owner, so no role but the owner adds
objects there.

Default privileges make whatever the owner creates later readable by the reader and the writer, and
insertable by the writer (appending is the writer's job; UPDATE, DELETE and TRUNCATE are never granted by
default). A later migration that needs other grants writes them itself.

Existing rows are untouched: only ownership and privileges change, so trails recorded before verify as
they did. The downgrade hands everything back to the login running it and drops the four roles; CREATE
on ``public`` stays taken from PUBLIC.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from services.infra.db_roles import role_sql

revision: str = "0016_database_roles"
down_revision: str | None = "0014_bus_quarantine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _statements() -> list[str]:
    owner, writer, reader, hook = (role_sql(d) for d in ("owner", "writer", "reader", "webhook"))
    return [
        # The roles, created only if missing (an administrator may have made the logins beforehand).
        f"""
        DO $roles$
        DECLARE
            wanted text;
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {owner}) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', {owner});
            END IF;
            FOREACH wanted IN ARRAY ARRAY[{writer}, {reader}, {hook}] LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = wanted) THEN
                    EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE', wanted);
                END IF;
            END LOOP;
            -- The login running migrations acts as the owner from now on (a superuser already may).
            IF current_user <> {owner} AND NOT pg_has_role({owner}, 'MEMBER') THEN
                EXECUTE format('GRANT %I TO %I', {owner}, current_user);
            END IF;
            EXECUTE format('GRANT %I, %I TO %I', {reader}, {hook}, {writer});
        END
        $roles$
        """,
        # Everything in public, and alembic_version, becomes the owner's.
        f"""
        DO $own$
        DECLARE
            item record;
        BEGIN
            FOR item IN
                SELECT c.relname, c.relkind FROM pg_class c
                 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p')
                   AND pg_get_userbyid(c.relowner) <> {owner}
            LOOP
                EXECUTE format(
                    'ALTER %s %I OWNER TO %I',
                    CASE item.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
                    item.relname, {owner});
            END LOOP;
            FOR item IN
                SELECT p.oid::regprocedure AS signature FROM pg_proc p
                 WHERE p.pronamespace = 'public'::regnamespace AND pg_get_userbyid(p.proowner) <> {owner}
            LOOP
                EXECUTE format('ALTER FUNCTION %s OWNER TO %I', item.signature, {owner});
            END LOOP;
        END
        $own$
        """,
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        f"""
        DO $grants$
        BEGIN
            -- Later migrations create their tables and views as the owner.
            EXECUTE format('GRANT USAGE, CREATE ON SCHEMA public TO %I', {owner});
            EXECUTE format('GRANT USAGE ON SCHEMA public TO %I, %I, %I', {writer}, {reader}, {hook});
            EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I, %I, %I',
                           current_database(), {writer}, {reader}, {hook});
            EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA public TO %I, %I', {writer}, {reader});
            EXECUTE format('GRANT INSERT ON events TO %I', {writer});
            EXECUTE format('GRANT SELECT, INSERT ON events TO %I', {hook});
            EXECUTE format('GRANT INSERT, UPDATE ON event_checkpoints TO %I', {writer});
            EXECUTE format('GRANT INSERT ON bus_quarantine TO %I', {writer});  -- the auditor's quarantine (0014)
            EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO %I', {writer});
            EXECUTE format('REVOKE ALL ON alembic_version FROM %I, %I', {writer}, {reader});
            -- What later migrations create (as the owner) is readable, and insertable by the writer.
            EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA public'
                           ' GRANT SELECT ON TABLES TO %I, %I', {owner}, {writer}, {reader});
            EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA public'
                           ' GRANT INSERT ON TABLES TO %I', {owner}, {writer});
            EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA public'
                           ' GRANT USAGE ON SEQUENCES TO %I', {owner}, {writer});
            -- The rest of this run (alembic_version's update, later migrations) acts as the owner.
            EXECUTE format('SET ROLE %I', {owner});
        END
        $grants$
        """,
    ]


def upgrade() -> None:
    for statement in _statements():
        op.execute(statement)


def downgrade() -> None:
    owner, writer, reader, hook = (role_sql(d) for d in ("owner", "writer", "reader", "webhook"))
    op.execute("RESET ROLE")
    op.execute(
        f"""
        DO $drop$
        DECLARE
            wanted text;
            owner_role text := {owner};
            roles text[] := ARRAY[{writer}, {reader}, {hook}, {owner}];
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = owner_role) THEN
                EXECUTE format('REASSIGN OWNED BY %I TO %I', owner_role, current_user);
            END IF;
            FOREACH wanted IN ARRAY roles LOOP
                IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = wanted) THEN
                    EXECUTE format('DROP OWNED BY %I', wanted);
                    EXECUTE format('DROP ROLE %I', wanted);
                END IF;
            END LOOP;
        END
        $drop$
        """
    )
