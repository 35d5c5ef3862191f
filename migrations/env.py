"""Alembic environment: async engine (asyncpg), online migrations only.

The database URL comes from, in order: ``alembic -x url=postgresql://...``, the config attribute
``database_url`` (set by services.infra.database.alembic_config for tests and embedded mode), and
finally the owner's URL from the settings (ROLLBOOK_DATABASE_OWNER_URL, else ROLLBOOK_DATABASE_URL).
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from services.infra.database import sqlalchemy_url
from services.infra.db_roles import assume_sql
from services.infra.settings import Settings

config = context.config


def _database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("database_url")
    if not url:
        url = Settings.from_env().url_for("owner")
    if not url:
        raise SystemExit(
            "no database URL: pass `alembic -x url=postgresql://user@host:port/db`"
            " or set ROLLBOOK_DATABASE_URL"
        )
    return sqlalchemy_url(str(url))


def _run(connection: Connection) -> None:
    # Act as the database's owner role (migration 0016 creates it) when this login may: whatever a
    # migration creates is then the owner's, and the default privileges grant it to the writer and reader.
    connection.exec_driver_sql(assume_sql("owner"))
    connection.commit()
    # transaction_per_migration: a failed revision rolls back alone and leaves the earlier ones applied.
    context.configure(connection=connection, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_database_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
asyncio.run(_run_async())
