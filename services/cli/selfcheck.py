"""`rollbook selfcheck`: prove the store and the bus work here, end to end, with real servers.

Uses the configured Postgres/NATS (ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL) or starts embedded ones,
runs the migrations, writes and reads back an event in Postgres, and publishes, deduplicates, consumes and
dead-letters on JetStream. It never touches the real event stream: the bus checks use a stream and
subject prefix of their own, deleted afterwards, and the Postgres check rolls its transaction back.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import msgspec
import typer
from nats.aio.msg import Msg

from services.cli.runtime import run_command
from services.domain.bus import Bus
from services.domain.events import Envelope, RolloutPaused, decode, encode, new_event
from services.domain.settings import Settings


class CheckFailed(Exception):
    pass


def register(app: typer.Typer) -> None:
    @app.command()
    def selfcheck() -> None:
        """Start (or reach) Postgres and NATS, migrate, and check an append/read and a publish/consume."""
        raise typer.Exit(run_command(_selfcheck))


async def _selfcheck(settings: Settings) -> int:
    typer.echo(f"postgres  {_redact(settings.database_url)}")
    typer.echo(f"nats      {settings.nats_url}")
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
    return new_event(
        RolloutPaused(rollout_id="selfcheck", reason="rollbook selfcheck"),
        stream=stream,
        stream_version=version,
        occurred_at=datetime.now(UTC),
        correlation_id="selfcheck",
    )


async def _check_store(settings: Settings) -> str:
    # Until the event store lands, the round trip goes through a temporary table in a rolled-back
    # transaction: it proves the server accepts writes and returns the event byte for byte.
    event = _sample_event("CloneSet/rollbook-selfcheck/selfcheck")
    connection = await asyncpg.connect(settings.database_url)
    try:
        version = await connection.fetchval("SHOW server_version")
        transaction = connection.transaction()
        await transaction.start()
        try:
            await connection.execute(
                "CREATE TEMP TABLE selfcheck_events (event_id uuid PRIMARY KEY, body jsonb)"
            )
            await connection.execute(
                "INSERT INTO selfcheck_events VALUES ($1, $2::jsonb)", event.event_id, encode(event).decode()
            )
            body = await connection.fetchval(
                "SELECT body::text FROM selfcheck_events WHERE event_id = $1", event.event_id
            )
        finally:
            await transaction.rollback()
    finally:
        await connection.close()
    if decode(body.encode()) != event:
        raise CheckFailed("the event read back differs from the one written")
    return f"PostgreSQL {version}: event appended and read back"


async def _check_bus(settings: Settings) -> str:
    suffix = uuid.uuid4().hex[:8]
    scratch = msgspec.structs.replace(
        settings,
        stream_name=f"{settings.stream_name}_SELFCHECK_{suffix}",
        subject_prefix=f"{settings.subject_prefix}-selfcheck-{suffix}",
        max_deliver=2,
    )
    bus = await Bus.connect(scratch, name="rollbook-selfcheck")
    bus_log = logging.getLogger("services.domain.bus")
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


def _redact(url: str) -> str:
    # Never print a password.
    if "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]:
        scheme, rest = url.split("//", 1)
        credentials, host = rest.split("@", 1)
        return f"{scheme}//{credentials.split(':', 1)[0]}:***@{host}"
    return url
