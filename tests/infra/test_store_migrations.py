"""Schema migrations on an empty database: upgrade head, downgrade base, upgrade head, through the alembic
command line exactly as an operator runs it, and the Core table description matching the migrated table."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

from services.infra.database import REPO_ROOT, asyncpg_url
from services.infra.store import EventStore
from services.infra.store_schema import events_table
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls


def _alembic(url: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROLLBOOK_DATABASE_URL"}
    subprocess.run(
        [sys.executable, "-m", "alembic", "-x", f"url={url}", *args],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


async def _schema_objects(url: str) -> set[str]:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        rows = await conn.fetch(
            """
            SELECT 'table:' || relname FROM pg_class
             WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p', 'v', 'S', 'i', 'I')
            UNION ALL
            SELECT 'function:' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
            UNION ALL
            SELECT 'trigger:' || tgname FROM pg_trigger WHERE NOT tgisinternal
            """
        )
    finally:
        await conn.close()
    return {row[0] for row in rows} - {"table:alembic_version", "table:alembic_version_pkc"}


async def test_upgrade_downgrade_upgrade_on_an_empty_database(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "head")
        migrated = await _schema_objects(url)
        assert {"table:events", "trigger:events_append_only", "trigger:events_serialise_writers"} <= migrated
        _alembic(url, "downgrade", "base")
        assert await _schema_objects(url) == set(), "downgrade must remove everything it created"
        _alembic(url, "upgrade", "head")
        assert await _schema_objects(url) == migrated


async def test_connecting_to_an_unmigrated_database_says_what_to_do(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_unmigrated") as url:
        with pytest.raises(RuntimeError, match="run the migrations first"):
            await EventStore.connect(url)


async def test_core_table_matches_the_migrated_table(database_url: str) -> None:
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        rows = await conn.fetch(
            "SELECT column_name, is_nullable FROM information_schema.columns"
            " WHERE table_name = 'events' ORDER BY ordinal_position"
        )
    finally:
        await conn.close()
    assert [(r[0], r[1] == "YES") for r in rows] == [(c.name, bool(c.nullable)) for c in events_table.columns]


async def _views(url: str) -> dict[str, tuple[str, str | None]]:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        rows = await conn.fetch(
            "SELECT c.relname, pg_get_viewdef(c.oid), obj_description(c.oid, 'pg_class') FROM pg_class AS c"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v'"
        )
    finally:
        await conn.close()
    return {row[0]: (row[1], row[2]) for row in rows}


async def test_downgrading_the_sidecarset_views_restores_the_0002_views_exactly(
    server_urls: ServerUrls,
) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0002_audit_views")
        original = await _views(url)
        _alembic(url, "upgrade", "0003_sidecarset_audit_views")
        upgraded = await _views(url)
        assert set(upgraded) == set(original)
        assert all("kind" in definition for definition, _ in upgraded.values())
        _alembic(url, "downgrade", "0002_audit_views")
        assert await _views(url) == original


async def test_downgrading_pod_action_started_restores_the_0003_pod_actions_exactly(
    server_urls: ServerUrls,
) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0004_event_hash_chain")
        original = await _views(url)
        _alembic(url, "upgrade", "0005_pod_action_started")
        upgraded = await _views(url)
        assert {name for name in upgraded if upgraded[name] != original[name]} == {"pod_actions"}
        assert "PodActionStarted" in upgraded["pod_actions"][0] and "queued" in upgraded["pod_actions"][0]
        _alembic(url, "downgrade", "0004_event_hash_chain")
        assert await _views(url) == original


async def test_downgrading_the_inplace_mark_of_its_own_restores_the_0012_pod_actions_exactly(
    server_urls: ServerUrls,
) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_migrations") as url:
        _alembic(url, "upgrade", "0012_outcome_started_at")
        original = await _views(url)
        _alembic(url, "upgrade", "0013_inplace_mark_of_its_own")
        upgraded = await _views(url)
        assert {name for name in upgraded if upgraded[name] != original[name]} == {"pod_actions"}
        assert "InPlaceUpdateReady" in upgraded["pod_actions"][0]
        _alembic(url, "downgrade", "0012_outcome_started_at")
        assert await _views(url) == original
