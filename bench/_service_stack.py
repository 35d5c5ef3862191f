"""The four services on a simcluster, as the benches that roll out through them run them: a database of
their own (created, migrated, dropped), a JetStream stream of their own (deleted), logs in a temporary
directory, every service stopped on the way out."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from services.infra.bus import Bus
from services.infra.database import create_database, upgrade_async
from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig
from tests.plugins.database import drop_database_and_roles, with_database
from tests.plugins.stack import Stack


@dataclass(frozen=True)
class ServiceStack:
    stack: Stack
    sim: SimCluster
    database_url: str


@asynccontextmanager
async def service_stack(server_url: str, nats_url: str, sim_config: SimConfig) -> AsyncIterator[ServiceStack]:
    suffix = uuid.uuid4().hex[:10]
    db_name = f"rollbook_bench_{suffix}"
    await create_database(server_url, db_name)
    database_url = with_database(server_url, db_name)
    try:
        await upgrade_async(database_url)
        async with SimCluster(sim_config) as sim:
            settings = Settings(
                database_url=database_url,
                nats_url=nats_url,
                kubeconfig=str(sim.kubeconfig_path),
                stream_name=f"RBBENCH_{suffix}",
                subject_prefix=f"rbbench{suffix}",
                log_level="INFO",  # the stack reads each OS-chosen port from the http_listening line
            )
            with tempfile.TemporaryDirectory() as logs:
                stack = Stack(settings, Path(logs))
                try:
                    yield ServiceStack(stack, sim, database_url)
                finally:
                    await stack.stop_all()
            bus = await Bus.connect(settings, name="rollbook-bench-cleanup")
            await bus.js.delete_stream(settings.stream_name)
            await bus.close()
    finally:
        await drop_database_and_roles(server_url, db_name)
