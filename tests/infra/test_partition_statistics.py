"""Migration 0030: every partition of ``events`` carries the statistics 0027 made on ``events``' expressions
(the action id and the rollout key), because Postgres plans a scan of one partition from that partition's
own statistics. Without them each outcome lookup of ``pod_actions`` was estimated at thousands of rows and
ANDed with a scan of every outcome: ``rollbook history`` of a 200-pod CloneSet took 45 s on a 2-million
event month, 35 ms with them."""

from __future__ import annotations

import asyncpg
import pytest

from services.infra.database import asyncpg_url, downgrade_async, upgrade_async
from services.infra.store import EventStore
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

PARENT_STATISTICS = {"events_action_id_stats", "events_rollout_key_stats"}

STATISTICS_BY_TABLE = """
SELECT c.relname AS partition, coalesce(array_agg(s.stxname ORDER BY s.stxname)
                                        FILTER (WHERE s.stxname IS NOT NULL), '{}') AS statistics
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  LEFT JOIN pg_statistic_ext s ON s.stxrelid = c.oid
 WHERE i.inhparent = 'events'::regclass
 GROUP BY c.relname
"""


async def statistics_by_partition(connection: asyncpg.Connection) -> dict[str, set[str]]:
    return {r["partition"]: set(r["statistics"]) for r in await connection.fetch(STATISTICS_BY_TABLE)}


def expected(partition: str) -> set[str]:
    return {partition + name.removeprefix("events") for name in PARENT_STATISTICS}


async def test_every_partition_has_the_statistics_of_events_and_so_do_the_months_to_come(
    server_urls: ServerUrls,
) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_partition_stats") as url:
        await upgrade_async(url)
        connection = await asyncpg.connect(asyncpg_url(url))
        store = await EventStore.connect(url)
        try:
            if int(await connection.fetchval("SHOW server_version_num")) < 140000:
                pytest.skip("statistics on expressions need Postgres 14")
            parent = {r[0] for r in await connection.fetch(
                "SELECT stxname FROM pg_statistic_ext WHERE stxrelid = 'events'::regclass")}  # fmt: skip
            assert parent == PARENT_STATISTICS
            made = await statistics_by_partition(connection)
            assert "events_default" in made and len(made) >= 3, made
            assert made == {p: expected(p) for p in made}
            # Partitions the auditor makes later (12-month ones reach further ahead than the monthly ones).
            assert await store.add_partitions(12) > 0
            later = await statistics_by_partition(connection)
            assert set(later) > set(made)
            assert later == {p: expected(p) for p in later}
            # The downgrade takes the copies away with the function; the upgrade puts them back.
            await downgrade_async(url, "0029_events_appended_notify")
            assert all(not s for s in (await statistics_by_partition(connection)).values())
            await upgrade_async(url)
            again = await statistics_by_partition(connection)
            assert again == {p: expected(p) for p in again} and set(again) == set(later)
        finally:
            await store.close()
            await connection.close()
