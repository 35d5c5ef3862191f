"""Which errors a service waits out (database or bus unreachable) and how long it waits between tries."""

from __future__ import annotations

import asyncio

import asyncpg
import nats.errors
import nats.js.errors
import pytest
import sqlalchemy.exc

from services.infra.retry import DEFAULT_BACKOFF, Backoff, Stopped, is_transient, retry_until_stopped


def _wrapped_by_sqlalchemy(driver_error: BaseException) -> sqlalchemy.exc.DBAPIError:
    """What SQLAlchemy's asyncpg dialect raises: a DBAPIError whose orig/cause is the driver's error."""
    try:
        try:
            raise driver_error
        except Exception as error:
            raise sqlalchemy.exc.DBAPIError("SELECT 1", None, error) from error
    except sqlalchemy.exc.DBAPIError as wrapped:
        return wrapped


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (asyncpg.CannotConnectNowError("the database system is starting up"), True),
        (_wrapped_by_sqlalchemy(asyncpg.CannotConnectNowError("the database system is starting up")), True),
        (_wrapped_by_sqlalchemy(asyncpg.AdminShutdownError("terminating connection")), True),
        (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), True),
        (asyncpg.InterfaceError("connection is closed"), True),
        # A failover under way: the URL's servers are down or still standbys (target_session_attrs).
        (asyncpg.TargetServerAttributeNotMatched('None of the hosts match "read-write"'), True),
        (
            asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
            True,
        ),
        (asyncpg.InternalClientError("something else inside asyncpg"), False),
        # A read-only server written to is not a wait: a URL without target_session_attrs, a mistake.
        (asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"), False),
        (ConnectionRefusedError(111, "Connect call failed"), True),
        (OSError("Multiple exceptions: [Errno 111] Connect call failed"), True),
        (TimeoutError(), True),
        (nats.errors.TimeoutError(), True),
        (nats.errors.NoRespondersError(), True),
        (nats.errors.OutboundBufferLimitError(), True),
        (nats.js.errors.ServiceUnavailableError(), True),
        # A statement failing on its own merits, or bad input: retrying cannot help.
        (_wrapped_by_sqlalchemy(asyncpg.UndefinedTableError('relation "events" does not exist')), False),
        (asyncpg.UniqueViolationError("duplicate key"), False),
        (FileNotFoundError("no such file"), False),
        (ValueError("bad event"), False),
        (nats.errors.MaxPayloadError(), False),
        (nats.js.errors.BadRequestError(), False),
        (nats.errors.ConnectionClosedError(), False),
    ],
    ids=repr,
)
def test_is_transient(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


@pytest.mark.parametrize(
    ("backoff", "attempt", "unit_random", "expected"),
    [
        (Backoff(initial=0.1, maximum=5.0, jitter=0.0), 0, 0.7, 0.1),
        (Backoff(initial=0.1, maximum=5.0, jitter=0.0), 3, 0.7, 0.8),
        (Backoff(initial=0.1, maximum=5.0, jitter=0.0), 10, 0.7, 5.0),  # capped
        (Backoff(initial=0.1, maximum=5.0, jitter=0.0), 10_000, 0.7, 5.0),  # no overflow, still capped
        (Backoff(initial=1.0, maximum=5.0, jitter=0.5), 0, 0.0, 0.5),  # lowest jitter
        (Backoff(initial=1.0, maximum=5.0, jitter=0.5), 0, 0.5, 1.0),
        (Backoff(initial=1.0, maximum=5.0, jitter=0.5), 20, 0.999999, 7.5),  # bounded by max * 1.5
        # The default: at most 1.5 s lost after an outage ends (a JetStream leader elected, Postgres up).
        (DEFAULT_BACKOFF, 20, 0.999999, 1.5),
    ],
)
def test_backoff_delay(backoff: Backoff, attempt: int, unit_random: float, expected: float) -> None:
    assert backoff.delay(attempt, unit_random) == pytest.approx(expected, rel=1e-4)


async def test_retry_until_stopped_waits_out_transient_errors_and_raises_others() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise _wrapped_by_sqlalchemy(asyncpg.CannotConnectNowError("the database system is starting up"))
        return "stored"

    fast = Backoff(initial=0.001, maximum=0.002)
    assert await retry_until_stopped(flaky, what="test", backoff=fast) == "stored"
    assert calls == 4

    async def broken() -> None:
        raise ValueError("not a wait")

    with pytest.raises(ValueError, match="not a wait"):
        await retry_until_stopped(broken, what="test", backoff=fast)


async def test_retry_until_stopped_ends_when_the_process_stops() -> None:
    stopping = asyncio.Event()
    attempts = 0

    async def down() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 3:
            stopping.set()
        raise ConnectionRefusedError(111, "Connect call failed")

    fast = Backoff(initial=0.001, maximum=0.001)
    with pytest.raises(Stopped):
        await retry_until_stopped(down, what="test", stopping=stopping, backoff=fast)
    assert attempts == 3


async def test_a_long_backoff_is_cut_short_by_stopping() -> None:
    stopping = asyncio.Event()
    first_failure = asyncio.Event()

    async def down() -> None:
        first_failure.set()
        raise ConnectionRefusedError(111, "Connect call failed")

    retrying = asyncio.create_task(
        retry_until_stopped(down, what="test", stopping=stopping, backoff=Backoff(initial=3600.0))
    )
    await first_failure.wait()
    stopping.set()
    with pytest.raises(Stopped):
        await asyncio.wait_for(retrying, 10)
