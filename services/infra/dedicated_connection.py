"""A Postgres connection of a process's own, kept open for a session that outlives any pooled checkout:
LISTENing for appends (services/infra/appended.py), holding an advisory lock
(services/infra/session_lock.py).

``keep_connection`` opens the connection, runs the session on it until ``stopping``, and opens it again
with backoff whenever it cannot be opened or the session raises (the connection lost: Postgres restarting
or failing over, the backend terminated). ``lost`` is set as soon as asyncpg sees the connection close.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import structlog

from services.infra.database import asyncpg_url
from services.infra.retry import Backoff, wait_or_stop

log = structlog.get_logger("dedicated_connection")

CONNECTION_BACKOFF = Backoff(initial=0.2, maximum=5.0)

# The session: given the connection, ``stopping`` and the event set when the connection is lost; returns
# once ``stopping`` is set, raises when the connection is lost.
Session = Callable[[Any, asyncio.Event, asyncio.Event], Awaitable[None]]


async def keep_connection(
    database_url: str,
    session: Session,
    stopping: asyncio.Event,
    *,
    name: str,
    server_settings: dict[str, str] | None = None,
    connect_timeout: float = 10.0,
) -> None:
    """See the module docstring. ``name`` is the session's application_name (pg_stat_activity shows who
    holds what) and names it in the log."""
    failures = 0
    settings = {"application_name": name[:63], **(server_settings or {})}
    while not stopping.is_set():
        lost = asyncio.Event()
        try:
            connection = await asyncpg.connect(
                asyncpg_url(database_url), timeout=connect_timeout, server_settings=settings
            )
        except Exception as error:  # down or restarting: the session waits, its user copes meanwhile
            delay = CONNECTION_BACKOFF.delay(failures, random.random())
            failures += 1
            log.warning("connection_failed", name=name, delay=round(delay, 3), error=repr(error))
            await wait_or_stop(stopping, delay)
            continue
        connection.add_termination_listener(lambda _connection, lost=lost: lost.set())
        if failures:
            log.info("connection_opened_again", name=name, attempts=failures + 1)
        started = time.monotonic()
        try:
            await session(connection, stopping, lost)
        except asyncio.CancelledError:
            connection.terminate()  # the process is going: nothing to wait for
            raise
        except Exception as error:
            # Back to the shortest wait only after a session that lasted: one that fails at once (LISTEN
            # refused on a standby, a backend killed on sight) backs off like a connection refused.
            if time.monotonic() - started > CONNECTION_BACKOFF.maximum:
                failures = 0
            delay = CONNECTION_BACKOFF.delay(failures, random.random())
            failures += 1
            log.warning("connection_lost", name=name, delay=round(delay, 3), error=repr(error))
            await _close(connection)
            await wait_or_stop(stopping, delay)
            continue
        await _close(connection)


async def _close(connection: Any) -> None:
    if connection.is_closed():
        return
    with contextlib.suppress(Exception):  # lost already, or the server gone: nothing to release
        await asyncio.wait_for(connection.close(), 5.0)
    if not connection.is_closed():
        connection.terminate()
