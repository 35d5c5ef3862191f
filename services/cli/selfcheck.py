"""`rollbook selfcheck`: prove the store and the bus work here, end to end, with real servers.

Uses the configured Postgres/NATS (ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL) or starts embedded ones,
runs the migrations, appends and reads back events through the EventStore, and publishes, deduplicates,
consumes and dead-letters on JetStream. It never touches the real event log or stream: the store check
uses a scratch database on the same server and the bus check a stream and subject prefix of its own, both
deleted afterwards.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import msgspec
import typer

from services.cli.runtime import run_command
from services.infra.redact import redacted
from services.infra.settings import Settings

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from services.model.events import Envelope


class CheckFailed(Exception):
    pass


def register(app: typer.Typer) -> None:
    @app.command()
    def selfcheck() -> None:
        """Start (or reach) Postgres and NATS, migrate, and check an append/read and a publish/consume."""
        raise typer.Exit(run_command(_selfcheck))


async def _selfcheck(settings: Settings) -> int:
    typer.echo(f"postgres  {redacted(settings.database_url)}")
    typer.echo(f"nats      {redacted(settings.nats_url)}")
    checks: list[tuple[str, Callable[[Settings], Awaitable[str]]]] = [
        ("store", _check_store),
        ("bus", _check_bus),
    ]
    failed = 0
    for name, check in checks:
        started = time.perf_counter()
        try:
            detail = await check(settings)
        except Exception as error:  # report every failure, then exit non-zero
            failed += 1
            typer.echo(f"FAIL {name:6} {type(error).__name__}: {error}")
        else:
            typer.echo(f"ok   {name:6} {detail} ({(time.perf_counter() - started) * 1000:.0f} ms)")
    typer.echo("selfcheck passed" if not failed else f"selfcheck FAILED ({failed} check(s))")
    return 1 if failed else 0


def _sample_event(stream: str, version: int = 1) -> Envelope:
    from services.model.events import RolloutPaused, new_event

    return new_event(
        RolloutPaused(rollout_id="selfcheck", reason="rollbook selfcheck"),
        stream=stream,
        stream_version=version,
        occurred_at=datetime.now(UTC),
        correlation_id="selfcheck",
    )


async def _check_store(settings: Settings) -> str:
    """Migrate a scratch database on the same server, append and read back through the EventStore, drop
    it. The real event log is append-only (and should hold only real events), so it is not written to."""
    from services.infra.database import create_database, drop_database, upgrade_async
    from services.infra.db_roles import DUTIES, role_name
    from services.infra.store import EventStore

    # A scratch database of its own, made by the owner's login (the services' writer may create nothing).
    admin_url = settings.url_for("owner")
    scratch = f"rollbook_selfcheck_{uuid.uuid4().hex[:10]}"
    version = await create_database(admin_url, scratch)
    scratch_url = _with_database(admin_url, scratch)
    try:
        await upgrade_async(scratch_url)
        store = await EventStore.connect(scratch_url)
        try:
            stream = "CloneSet/rollbook-selfcheck/selfcheck"
            written = [_sample_event(stream, 1), _sample_event(stream, 2)]
            result = await store.append(written, expected_version=0)
            again = await store.append(written[:1], expected_version=None)
            read = [stored.envelope for stored in await store.read_stream(stream)]
        finally:
            await store.close()
    finally:
        # With its roles (migration 0016), named after it.
        await drop_database(admin_url, scratch, tuple(role_name(scratch, duty) for duty in DUTIES))
    if result.appended != 2 or again.appended != 0:
        raise CheckFailed(f"append stored {result.appended} then {again.appended}; expected 2 then 0")
    if read != written:
        raise CheckFailed("the events read back differ from the ones written")
    return f"PostgreSQL {version}: migrated, 2 events appended, redelivery skipped, read back"


def _with_database(url: str, name: str) -> str:
    from services.infra.database import asyncpg_url

    parts = urlsplit(asyncpg_url(url))
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def _check_bus(settings: Settings) -> str:
    import asyncio

    from services.infra.bus import Bus

    suffix = uuid.uuid4().hex[:8]
    scratch = msgspec.structs.replace(
        settings,
        stream_name=f"{settings.stream_name}_SELFCHECK_{suffix}",
        subject_prefix=f"{settings.subject_prefix}-selfcheck-{suffix}",
        max_deliver=2,
    )
    bus = await Bus.connect(scratch, name="rollbook-selfcheck")
    bus_log = logging.getLogger("services.infra.bus")
    level = bus_log.level
    bus_log.setLevel(logging.CRITICAL)  # the poison message below is dead-lettered on purpose: no alarm
    try:
        await bus.ensure_stream()
        stream = "CloneSet/rollbook-selfcheck/selfcheck"
        first, second = _sample_event(stream, 1), _sample_event(stream, 2)
        if await bus.publish(first) or not await bus.publish(first):
            raise CheckFailed("JetStream did not drop a republished event_id")
        await bus.publish(second)
        await bus.js.publish(bus.subject_for(first), b"not an event")

        received: list[Envelope] = []
        both_received = asyncio.Event()

        async def handle(envelope: Envelope, msg: Msg) -> None:
            received.append(envelope)
            if len(received) == 2:
                both_received.set()

        # The poison message sits between the two events; a consumer handles in order, so by the time
        # the second event arrives the poison message has been dead-lettered.
        consumer = bus.consumer("selfcheck", bus.event_filter(), handle)
        task = asyncio.create_task(consumer.run())
        try:
            await asyncio.wait_for(both_received.wait(), timeout=10)
        except TimeoutError:
            pass  # reported below
        finally:
            consumer.stop()
            await task
        if [e.event_id for e in received] != [first.event_id, second.event_id]:
            raise CheckFailed(f"consumed {len(received)} events, expected the 2 published")
        letters = await bus.dead_letters("selfcheck")
        if len(letters) != 1 or letters[0].data != b"not an event":
            raise CheckFailed("the undecodable message did not reach the dead-letter subject")
        await bus.js.delete_stream(scratch.stream_name)
    finally:
        bus_log.setLevel(level)
        await bus.close()
    return "published (duplicate dropped), consumed with ack, poison message dead-lettered"
