"""A signed trail to test against: a migrated database with events of a few rollouts, the auditor's
Checkpointer with a key of its own in a temporary data dir, and `audit verify` as the CLI runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from services.cli.replay import verify_trail
from services.infra.bus import Bus
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.transparency import Checkpointer, checkpointer_for, trusted_verifiers
from services.model.events import PodActionFailed, PodActionSucceeded, new_event
from services.replay.audit import AuditReport
from tests.plugins.database import fresh_database

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
CONTENT = (
    "event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at, causation_id,"
    " correlation_id, payload"
)


async def append_rollout(store: EventStore, workload: str, events: int, *, start_version: int = 1) -> None:
    """``events`` pod action outcomes of one rollout of ``workload`` (correlation id <workload>@rev),
    appended in batches of 100 on the workload's actions stream."""
    stream = f"CloneSet/{workload}/actions"
    batch = []
    for i in range(events):
        version = start_version + i
        payload = (
            PodActionFailed(action_id=f"{workload}-{version}", reason="409 Conflict", retryable=True)
            if version % 7 == 3
            else PodActionSucceeded(action_id=f"{workload}-{version}")
        )
        batch.append(
            new_event(
                payload,
                stream=stream,
                stream_version=version,
                occurred_at=T0 + timedelta(milliseconds=version),
                correlation_id=f"{workload}@rev",
                event_id=uuid.uuid4(),
            )
        )
        if len(batch) == 100:
            assert await store.append_many(batch) == 100
            batch = []
    if batch:
        assert await store.append_many(batch) == len(batch)


@dataclass
class SignedTrail:
    url: str
    store: EventStore
    settings: Settings
    checkpointer: Checkpointer

    async def verify(self, **kwargs: object) -> AuditReport:
        """`rollbook audit verify` with the trusted key of the data dir (not the database's)."""
        report: AuditReport = await verify_trail(
            self.store,
            self.settings,
            trusted_verifiers(self.settings),
            bus=self.checkpointer.bus is not None,
            **kwargs,  # type: ignore[arg-type]
        )
        return report

    async def cli(self, *args: str, **env: str) -> tuple[int, str]:
        """`rollbook <args>` as a user runs it against this trail; (exit code, stdout + stderr)."""
        settings = self.settings
        environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
        environment.update(
            ROLLBOOK_DATABASE_URL=self.url,
            ROLLBOOK_DATA_DIR=settings.data_dir,
            ROLLBOOK_NATS_URL=settings.nats_url,
            ROLLBOOK_STREAM_NAME=settings.stream_name,
            ROLLBOOK_SUBJECT_PREFIX=settings.subject_prefix,
            ROLLBOOK_AUDIT_CHECKPOINT_DIR=settings.audit_checkpoint_dir,
        )
        environment.update(env)
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "services.cli.main", *args],
            cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return result.returncode, result.stdout + result.stderr

    async def owner(self, *statements: str) -> None:
        """Statements run as the database owner, with every trigger off (the append-only guard too)."""
        conn = await asyncpg.connect(asyncpg_url(self.url))
        try:
            async with conn.transaction():
                await conn.execute("SET session_replication_role = replica")
                for statement in statements:
                    await conn.execute(statement)
        finally:
            await conn.close()


@asynccontextmanager
async def signed_trail(
    server_url: str, data_dir: Path, *, bus: Bus | None = None, rollouts: int = 3, events: int = 300
) -> AsyncIterator[SignedTrail]:
    """``rollouts`` rollouts of ``events`` events each (workloads prod/w0, prod/w1, ...), interleaved so
    every rollout spans several 256-event blocks, and one signed checkpoint over them."""
    async with fresh_database(server_url, prefix="rollbook_signed") as url:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        settings = Settings(
            data_dir=str(data_dir),
            database_url=url,
            audit_key_name="test.rollbook/log",
            audit_checkpoint_dir=str(data_dir / "audit" / "checkpoints"),
            nats_url=bus.settings.nats_url if bus is not None else "",
            stream_name=bus.settings.stream_name if bus is not None else "ROLLBOOK",
            subject_prefix=bus.settings.subject_prefix if bus is not None else "rollbook",
        )
        try:
            for step in range(0, events, 100):
                for r in range(rollouts):
                    await append_rollout(store, f"prod/w{r}", min(100, events - step), start_version=step + 1)
            checkpointer = checkpointer_for(store, settings, bus)
            assert await checkpointer.checkpoint() is not None
            yield SignedTrail(url, store, settings, checkpointer)
        finally:
            await store.close()
