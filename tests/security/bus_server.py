"""An embedded nats-server with rollbook's identities (services/infra/nats_auth.py), for the attack tests,
and a raw client that connects as a given identity (or as nobody) and reports what the server refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import nats.errors
from nats.aio.client import Client

from services.infra.bus import nats_servers
from services.infra.embedded import EmbeddedServers
from services.infra.nats_auth import connect_options
from services.infra.settings import Settings

UNUSED_DATABASE = "postgresql://unused@127.0.0.1:1/unused"  # only nats-server is started


@asynccontextmanager
async def auth_nats(
    data_dir: Path, *, database_url: str = UNUSED_DATABASE, **overrides: object
) -> AsyncIterator[Settings]:
    """Settings on a fresh embedded nats-server started with rollbook's authorization config (and the
    given database, which is not started here)."""
    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        database_url=database_url,
        data_dir=str(data_dir),
        stream_name=f"RBSEC_{suffix}",
        subject_prefix=f"rbsec{suffix}",
        bus_partitions=2,
        **overrides,  # type: ignore[arg-type]
    )
    async with EmbeddedServers(settings, migrate=False) as resolved:
        yield resolved


class Refusals:
    """The permission errors the server sent one connection."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.seen = asyncio.Event()

    async def record(self, error: Exception) -> None:
        self.errors.append(str(error))
        self.seen.set()

    async def wait(self, timeout: float = 10.0) -> str:  # noqa: ASYNC109
        await asyncio.wait_for(self.seen.wait(), timeout)
        return self.errors[-1]


async def connect_as(settings: Settings, identity: str | None, refusals: Refusals | None = None) -> Client:
    """A plain nats-py client: as ``identity`` (its password from the credentials dir), or with no
    credentials at all when None."""
    options = connect_options(settings, identity) if identity else {}
    return await nats.connect(
        nats_servers(settings.nats_url),
        allow_reconnect=False,
        connect_timeout=5,
        error_cb=(refusals or Refusals()).record,
        **options,
    )
