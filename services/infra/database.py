"""Postgres URL handling and schema migrations (Alembic), shared by the store, the CLI and the tests.

Settings carry plain libpq-style URLs (``postgresql://user@host:port/db``); SQLAlchemy needs the driver in
the scheme. ``sqlalchemy_url`` is the one place that conversion happens.

Migrations are Alembic's, from ``migrations/`` next to ``alembic.ini`` at the repository root:

- ``upgrade(database_url, revision="head")`` / ``downgrade(database_url, revision="base")`` run them
  synchronously (Alembic's env.py runs its own event loop);
- ``await upgrade_async(...)`` / ``await downgrade_async(...)`` do the same from async code, in a thread.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from services.infra.redact import redacted

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported where migrations run, not here: every service imports this module (the store's URL
# handling), and Alembic with every SQL dialect it brings is a fifth of a service's start-up imports.

REPO_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = REPO_ROOT / "alembic.ini"

_DRIVER_SCHEMES = ("postgresql+asyncpg://",)
_PLAIN_SCHEMES = ("postgresql://", "postgres://")


def sqlalchemy_url(database_url: str) -> str:
    """``postgresql://…`` (or ``postgres://…``) -> ``postgresql+asyncpg://…``; already-asyncpg URLs pass.
    A libpq multi-host URL (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``: a
    primary and its standbys, the first writable one wins) takes SQLAlchemy's form for it, one ``host``
    parameter per server (its own parser reads ``h1:5432,h2`` as one host with port ``5432,h2``)."""
    if database_url.startswith(_DRIVER_SCHEMES):
        return database_url
    for scheme in _PLAIN_SCHEMES:
        if database_url.startswith(scheme):
            return "postgresql+asyncpg://" + _hosts_as_parameters(database_url[len(scheme) :])
    raise ValueError(
        f"not a Postgres URL: {redacted(database_url)!r} (expected postgresql://user@host:port/db)"
    )


def _hosts_as_parameters(rest: str) -> str:
    """``user@h1:p1,h2:p2/db?q`` -> ``user@/db?host=h1:p1&host=h2:p2&q``; one host stays as it is."""
    authority, slash, tail = rest.partition("/")
    user, at, hosts = authority.rpartition("@")
    if "," not in hosts:
        return rest
    path, question, query = tail.partition("?")
    parameters = "&".join(f"host={host}" for host in hosts.split(",") if host)
    return f"{user}{at}/{path}?{parameters}" + (f"&{query}" if query else "")


def asyncpg_url(database_url: str) -> str:
    """The plain ``postgresql://`` form asyncpg.connect() takes (accepts either form)."""
    if database_url.startswith("postgresql+asyncpg://"):
        return "postgresql://" + database_url[len("postgresql+asyncpg://") :]
    sqlalchemy_url(database_url)  # validates
    return database_url


def alembic_config(database_url: str) -> Config:
    """An Alembic Config for this repository's migrations, pointed at ``database_url``."""
    from alembic.config import Config

    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(database_url), revision)


def migration_module(file: str) -> ModuleType:
    """Another migration of ``migrations/versions`` as a module: a migration that changes what an earlier
    one made takes that one's SQL from it rather than a copy (its downgrade then restores it exactly)."""
    path = REPO_ROOT / "migrations" / "versions" / file
    spec = importlib.util.spec_from_file_location(f"rollbook_migration_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load migration {file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def upgrade_async(database_url: str, revision: str = "head") -> None:
    await asyncio.to_thread(upgrade, database_url, revision)


async def downgrade_async(database_url: str, revision: str = "base") -> None:
    await asyncio.to_thread(downgrade, database_url, revision)


# --- scratch databases (`rollbook selfcheck`, `rollbook demo`): made and dropped by the owner's login ---


async def create_database(admin_url: str, name: str) -> str:
    """Create database ``name`` on the server of ``admin_url`` (a login that may); returns the server's
    version."""
    import asyncpg

    admin = await asyncpg.connect(asyncpg_url(admin_url))
    try:
        version = str(await admin.fetchval("SHOW server_version"))
        await admin.execute(f'CREATE DATABASE "{_identifier(name)}"')
    finally:
        await admin.close()
    return version


async def drop_database(admin_url: str, name: str, roles: tuple[str, ...] = ()) -> None:
    """Drop database ``name`` (its sessions ended) and the ``roles`` made for it, if they exist."""
    import asyncpg

    admin = await asyncpg.connect(asyncpg_url(admin_url))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{_identifier(name)}" WITH (FORCE)')
        for role in roles:
            await admin.execute(f'DROP ROLE IF EXISTS "{_identifier(role)}"')
    finally:
        await admin.close()


def _identifier(name: str) -> str:
    if '"' in name or "\0" in name:
        raise ValueError(f"not a usable database or role name: {name!r}")
    return name
