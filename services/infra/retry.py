"""Retrying what a restart of Postgres or NATS interrupts: which errors are worth retrying, how long to
wait before the next attempt, and a loop that keeps trying for as long as the process runs.

The decisions (``is_transient``, ``Backoff.delay``) are pure; ``retry_until_stopped`` is the one loop
around them. Every background loop of every service (the auditor's relay, the watcher's appends, the bus
consumers' handlers) retries transient errors this way and never gives up while the process is meant to
run: a database that is "starting up" or a NATS server that is restarting is a wait, not a failure.
Anything else is a bug or bad input and is raised (the task dies, the process exits non-zero and its
supervisor restarts it; see ``services.infra.runtime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
import nats.errors
import nats.js.errors
import sqlalchemy.exc
import structlog

from services.infra.metrics import RETRIES

log = structlog.get_logger("retry")

_T = TypeVar("_T")

# SQLSTATE classes/codes that mean "the server or the connection", not "this statement":
# 08 connection exception, 53300 too many connections, 57P01..57P03 admin/crash shutdown and
# "the database system is starting up", 40001/40P01 serialization failure and deadlock.
_TRANSIENT_SQLSTATE_PREFIXES = ("08",)
_TRANSIENT_SQLSTATES = frozenset({"53300", "57P01", "57P02", "57P03", "40001", "40P01"})

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    # The network: refused, reset, timed out (nats.errors.TimeoutError is a TimeoutError too).
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    # Postgres: the connection went away or cannot be had yet.
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
    # No server of a multi-host URL is writable yet (target_session_attrs=read-write): a failover under
    # way, its standby not promoted yet.
    asyncpg.TargetServerAttributeNotMatched,
    sqlalchemy.exc.DisconnectionError,
    # NATS: reconnecting, or JetStream answering 503 / nobody during a restart or a leader election.
    nats.errors.NoServersError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.TooManyStalledMsgsError,
)
_MAX_CAUSE_DEPTH = 8


def is_transient(error: BaseException) -> bool:
    """True when ``error`` (or what it wraps: SQLAlchemy's DBAPIError carries the driver's error as
    ``orig`` and as ``__cause__``) means the database or the bus is unreachable for now, so the same work
    can succeed later. A statement that failed on its own merits (syntax, constraint, bad data) is not."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen or len(seen) >= _MAX_CAUSE_DEPTH:
            continue
        seen.add(id(current))
        if isinstance(current, asyncpg.InternalClientError) and str(current).startswith(
            "cannot switch to state"
        ):
            # asyncpg's protocol state broken by a server that went away mid-operation (seen when a
            # primary was killed for a failover; asyncpg issue 1069): the connection is lost, not the work.
            return True
        if isinstance(current, asyncpg.InterfaceError):
            # "connection is closed" / "another operation is in progress" after a loss; misuse is not.
            if "closed" in str(current) or "connection" in str(current).lower():
                return True
        elif isinstance(current, _TRANSIENT_TYPES) or type(current) is OSError:
            # A bare OSError is how asyncpg reports "Multiple exceptions: Connect call failed"; its
            # subclasses other than the network's (FileNotFoundError, PermissionError...) are not waits.
            return True
        if isinstance(current, sqlalchemy.exc.DBAPIError) and current.connection_invalidated:
            return True
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(sqlstate, str) and (
            sqlstate in _TRANSIENT_SQLSTATES or sqlstate.startswith(_TRANSIENT_SQLSTATE_PREFIXES)
        ):
            return True
        pending.extend([current.__cause__, current.__context__, getattr(current, "orig", None)])
    return False


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: attempt n (0-based) waits ``min(maximum, initial * factor**n)``
    scaled by a random factor in [1 - jitter, 1 + jitter), so many processes that lost the same server do
    not all come back at the same instant. Bounded by ``maximum`` (times 1 + jitter) however long the
    outage lasts."""

    initial: float = 0.1
    # Short: an outage ends when its server is back (a restart, a JetStream stream leader elected 4-9 s
    # after the old one died), and up to a step is lost after that; one attempt per process and loop
    # every 0.5-1.5 s costs a down server nothing.
    maximum: float = 1.0
    factor: float = 2.0
    jitter: float = 0.5

    def delay(self, attempt: int, unit_random: float) -> float:
        """The wait before retry ``attempt`` (0 = first retry), ``unit_random`` drawn from [0, 1)."""
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return max(0.0, base * (1.0 - self.jitter + 2.0 * self.jitter * unit_random))


DEFAULT_BACKOFF = Backoff()


async def wait_or_stop(stopping: asyncio.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``, returning early (True) when ``stopping`` is set."""
    if stopping is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


async def first_of(*events: asyncio.Event, seconds: float) -> None:
    """Wait until one of ``events`` is set, or ``seconds`` have passed."""
    if any(event.is_set() for event in events):
        return
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


class Stopped(Exception):
    """``retry_until_stopped`` gave up because the process is stopping, not because of the error."""


async def retry_until_stopped(
    work: Callable[[], Awaitable[_T]],
    *,
    what: str,
    stopping: asyncio.Event | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> _T:
    """Run ``work`` until it succeeds, retrying transient errors with ``backoff`` for as long as
    ``stopping`` is not set (forever without one). Raises what is not transient at once, and ``Stopped``
    (from the last error) when the process stops while the dependency is still down."""
    attempt = 0
    while True:
        try:
            result = await work()
        except Exception as error:
            if not is_transient(error):
                raise
            RETRIES.labels(what).inc()
            if on_retry is not None:
                on_retry(error, attempt)
            delay = backoff.delay(attempt, random.random())
            log.warning("retrying", what=what, attempt=attempt + 1, delay=round(delay, 3), error=repr(error))
            attempt += 1
            if await wait_or_stop(stopping, delay):
                raise Stopped(f"{what}: stopping while still failing") from error
            continue
        if attempt:
            log.info("recovered", what=what, attempts=attempt + 1)
        return result
