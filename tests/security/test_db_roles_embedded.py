"""Another account on a shared host tries embedded Postgres: without the data dir's passwords it is refused,
whichever login it names; the password file is the owner's alone."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]


async def test_embedded_postgres_refuses_a_login_without_its_password(server_data_dir: Path) -> None:
    settings = Settings(data_dir=str(server_data_dir), nats_url="nats://127.0.0.1:1")  # only Postgres
    async with EmbeddedServers(settings) as running:
        port = urlsplit(running.database_url).port
        for login in ("postgres", "rollbook_owner", "rollbook_writer", "rollbook_reader", "root"):
            for password in (None, "", "postgres"):
                with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
                    connection = await asyncpg.connect(
                        host="127.0.0.1",
                        port=port,
                        user=login,
                        password=password,
                        database="rollbook",
                        passfile=str(server_data_dir / "no-such-passfile"),
                    )
                    await connection.close()
        passfile = server_data_dir / "pgpass"
        assert passfile.stat().st_mode & 0o777 == 0o600
        # With the data dir's passfile (what the URLs name) each duty logs in as its own role.
        for url, role in (
            (running.database_url, "rollbook_writer"),
            (running.database_reader_url, "rollbook_reader"),
        ):
            connection = await asyncpg.connect(url)
            try:
                assert await connection.fetchval("SELECT current_user") == role
            finally:
                await connection.close()
        # No password travels in the URLs (environment, logs, `rollbook stack`): they name the file.
        for url in (running.database_url, running.database_reader_url, running.database_owner_url):
            assert urlsplit(url).password is None and f"passfile={passfile}" in url
