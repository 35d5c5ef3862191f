"""Database roles by duty: who may do what to the event store (docs/security-database.md).

Migration 0016 creates four roles per database, named after it (``<database>_<duty>``, the database's name
cut to 48 characters), so databases on one server (a test session's, the demo's) never share a role (a copy
made with ``CREATE DATABASE ... TEMPLATE`` shares its template's: the roles are found from the owner of
``events``):

- ``owner`` (no login): owns every table, view, trigger and function; only migrations act as it;
- ``writer``: what the services run, SELECT and INSERT on ``events``, INSERT and UPDATE on
  ``event_checkpoints``, SELECT on the rest; it owns nothing, so it cannot ALTER, DISABLE TRIGGER, UPDATE,
  DELETE or TRUNCATE ``events``; a member of ``reader`` and ``webhook``, so a process logged in as the
  writer can take either narrower duty;
- ``reader``: SELECT on the tables and views, for read commands, the UI, ``/history`` and people;
- ``webhook``: SELECT and INSERT on ``events`` only (``rollbook webhook`` records SidecarInjected).

Each process names its duty when it connects. Right after connecting it becomes the duty's role
(``SET ROLE``) if it logged in as someone else who may (a superuser, such as CI's single URL, or the
writer taking the reader's duty); a login that may not (the owner's role itself does not exist before
migration 0016) stays as it logged in. The boundary that holds against a process that turns hostile is
the login itself: one credential per role (deploy/, docker-compose.yml, embedded mode's pgpass file).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any, Literal, NamedTuple

Duty = Literal["owner", "writer", "reader", "webhook"]
DUTIES: tuple[Duty, ...] = ("owner", "writer", "reader", "webhook")

# Postgres cuts identifiers at 63 bytes; the longest suffix is "_webhook" (8).
PREFIX_LENGTH = 48


def role_name(database: str, duty: Duty) -> str:
    """The role of ``duty`` in ``database`` (the same rule as ``role_sql``)."""
    return f"{database[:PREFIX_LENGTH]}_{duty}"


# The roles' common prefix in the current database: the owner of ``events`` minus "_owner" once migration
# 0016 ran (so a database copied from another with CREATE DATABASE ... TEMPLATE, or renamed, keeps using
# the roles its grants name), else the database's name.
PREFIX_SQL = rf"""coalesce(
    (SELECT left(r.rolname, length(r.rolname) - 6) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
      WHERE c.oid = to_regclass('public.events') AND r.rolname LIKE '%\_owner'),
    left(current_database(), {PREFIX_LENGTH}))"""


def role_sql(duty: Duty) -> str:
    """A SQL expression naming the role of ``duty`` in the current database."""
    return f"({PREFIX_SQL} || '_{duty}')"


def assume_sql(duty: Duty) -> str:
    """One statement that makes the session act as the role of ``duty`` when it may and is not already."""
    return f"""
DO $rollbook_duty$
DECLARE
    wanted text := {role_sql(duty)};
BEGIN
    IF current_user <> wanted
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = wanted)
       AND pg_has_role(wanted, 'MEMBER') THEN
        EXECUTE format('SET ROLE %I', wanted);
    END IF;
END
$rollbook_duty$
"""


class LoginPasswordError(ValueError):
    """A URL that names no password, or a login that is not one of this database's duty roles."""


class LoginPasswords(NamedTuple):
    """What ``set_login_passwords`` did: the roles whose password it set, and the duties whose URL names
    the owner URL's own login (nothing to set; those services run with that login's rights)."""

    roles: list[str]
    as_owner: list[Duty]


async def set_login_passwords(owner_url: str, urls: dict[Duty, str]) -> LoginPasswords:
    """Give each duty role's login the password its URL carries (deploy/'s Secrets are then the only
    place the passwords live: the migration Job sets them, nobody types ALTER ROLE). Runs as the owner's
    login (it created the roles, so it may change them). Only the writer, reader and webhook roles of this
    database are touched, never the owner or another login; a URL without a password is skipped (its
    login authenticates otherwise), and so is one naming the owner URL's own login and password. The
    password reaches the server as a SCRAM verifier, never in clear. LoginPasswordError before anything is
    changed."""
    import asyncpg

    from services.infra.database import asyncpg_url

    owner_login = _login_of(owner_url)
    connection = await asyncpg.connect(asyncpg_url(owner_url))
    try:
        wanted: list[tuple[str, str]] = []
        as_owner: list[Duty] = []
        for duty, url in urls.items():
            if duty == "owner":
                raise LoginPasswordError("the owner role has no login: its password is never set")
            parsed = _login_of(url)
            if parsed is None:
                continue
            user, password = parsed
            role = await connection.fetchval(f"SELECT {role_sql(duty)}")
            if user != role and (user, password) == owner_login:
                # The migration's own login, with its own password, named in this Secret too (one
                # superuser's URL for every Secret, as on simcluster): its services SET ROLE to their duty,
                # and there is no password to set.
                as_owner.append(duty)
                continue
            if user != role:
                raise LoginPasswordError(
                    f"the {duty}'s URL logs in as {user!r}, not as the {duty} role {role!r}: passwords are"
                    " set only for this database's own logins (docs/security-database.md)"
                )
            wanted.append((role, password))
        for role, password in wanted:
            await connection.execute(f"ALTER ROLE {_quote(role)} LOGIN PASSWORD '{scram_verifier(password)}'")
        return LoginPasswords([role for role, _ in wanted], as_owner)
    finally:
        await connection.close()


def _login_of(url: str) -> tuple[str, str] | None:
    """(user, password) of a postgresql:// URL; None when it carries no password."""
    from urllib.parse import unquote, urlsplit

    if not url:
        return None
    parts = urlsplit(url)
    if parts.password is None or parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def scram_verifier(password: str, *, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier Postgres stores for ``password`` (RFC 5802/7677), so that ALTER ROLE
    ... PASSWORD sends the server no clear-text password that a statement log could keep."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    salt64, stored64, server64 = (base64.b64encode(part).decode() for part in (salt, stored_key, server_key))
    return f"SCRAM-SHA-256${iterations}:{salt64}${stored64}:{server64}"


async def act_as_reader(connection: Any) -> None:
    """An asyncpg pool's ``init``: each pooled connection acts as the reader role when its login may."""
    await connection.execute(assume_sql("reader"))
