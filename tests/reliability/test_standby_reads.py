"""Read commands on a standby: with ROLLBOOK_DATABASE_READER_URL naming a streaming-replication standby,
`rollbook audit verify` (the audit queries) and `rollbook history` read the whole trail there, never the
primary, and go on reading once the primary is lost and that standby promoted."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from tests.plugins.replicated_postgres import DEFAULT_BIN, ReplicatedPostgres
from tests.plugins.stack import wait_for
from tests.security.signed_trail import signed_trail

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

# Where nothing listens: a command that reached for the primary's URL would fail.
NOWHERE = "postgresql://postgres@127.0.0.1:1/rollbook"


async def head(url: str) -> int:
    connection = await asyncpg.connect(asyncpg_url(url))
    try:
        return int(await connection.fetchval("SELECT coalesce(max(global_position), 0) FROM events"))
    finally:
        await connection.close()


@pytest.mark.skipif(not (DEFAULT_BIN / "pg_basebackup").exists(), reason="no Postgres binaries")
async def test_read_commands_read_the_standby_and_keep_reading_it_once_promoted(tmp_path: Path) -> None:
    async with ReplicatedPostgres(tmp_path / "pair") as pair:
        async with signed_trail(pair.url(), tmp_path / "data", rollouts=2, events=50) as trail:
            database = trail.url.rsplit("/", 1)[1].split("?", 1)[0]
            standby = pair.server_url(1 - pair.primary, database)
            written = await head(trail.url)

            async def replicated() -> bool:
                return await head(standby) == written

            await wait_for(replicated, within=30, what="the standby received the trail")
            reads = {"ROLLBOOK_DATABASE_URL": NOWHERE, "ROLLBOOK_DATABASE_READER_URL": standby}
            code, out = await trail.cli("audit", "verify", "--no-bus", **reads)
            assert code == 0 and out.startswith(f"OK: {written} events"), out
            # The trail holds outcomes without requests: history finds the views there, and no rollout.
            code, out = await trail.cli("history", "prod/w0", **reads)
            assert "no rollouts or pod actions recorded for prod/w0" in out, out

            await pair.fail_over()
            code, out = await trail.cli("audit", "verify", "--no-bus", **reads)
            assert code == 0 and out.startswith(f"OK: {written} events"), out
            # The store's own URL (both servers, read-write first) finds the promoted standby too.
            assert await head(trail.url) == written
