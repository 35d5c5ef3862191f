"""One holder at a time among the replicas of a service: a Postgres session-level advisory lock.

``SessionLock.run`` keeps one asyncpg connection of its own and tries ``pg_try_advisory_lock`` on it until
it gets the lock, then holds it for as long as the connection lives: Postgres releases a session's
advisory locks when the session ends, so a holder that dies (or whose connection is cut) frees the lock
for another replica without anyone having to notice. ``held`` says whether this process holds it now.

A held lock is checked with a query every ``check_interval`` seconds: a connection lost silently is found
then, and ``held`` goes false. Until it does, the old holder may still believe it holds the lock while
another took it; what the lock guards must therefore stay correct when two work at once for that long (the
audit only does the same checks twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from typing import Any

import asyncpg
import structlog

from services.infra.database import asyncpg_url
from services.infra.retry import Backoff, wait_or_stop

log = structlog.get_logger("session_lock")

# Seconds between two tries of a lock another session holds, and between two checks of a held one.
LOCK_CHECK_INTERVAL = 1.0
LOCK_CHECK_TIMEOUT = 5.0
LOCK_BACKOFF = Backoff(initial=0.2, maximum=5.0)


def lock_key(name: str) -> int:
    """The advisory lock's bigint key for ``name``: the first 8 bytes of its SHA-256, signed."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class SessionLock:
    """See the module docstring. ``await run(stopping)`` until ``stopping`` is set."""

    def __init__(
        self,
        database_url: str,
        name: str,
        *,
        check_interval: float = LOCK_CHECK_INTERVAL,
        connect_timeout: float = 10.0,
    ) -> None:
        self.database_url = database_url
        self.name = name
        self.key = lock_key(name)
        self.check_interval = check_interval
        self.connect_timeout = connect_timeout
        self.held = False
        self.changed = asyncio.Event()  # set each time ``held`` changes

    def _set_held(self, held: bool) -> None:
        if held != self.held:
            self.held = held
            self.changed.set()
            log.info("session_lock_taken" if held else "session_lock_released", name=self.name)

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        while not stopping.is_set():
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    asyncpg_url(self.database_url),
                    timeout=self.connect_timeout,
                    server_settings={
                        "application_name": f"rollbook-lock {self.name}"[:63],
                        # The server probes a silent client: a holder whose host died or was cut off
                        # releases the lock within about half a minute, not the system's two hours.
                        "tcp_keepalives_idle": "10",
                        "tcp_keepalives_interval": "5",
                        "tcp_keepalives_count": "3",
                    },
                )
            except Exception as error:  # down or restarting: nobody here holds the lock meanwhile
                delay = LOCK_BACKOFF.delay(failures, random.random())
                failures += 1
                log.warning(
                    "session_lock_connect_failed", name=self.name, delay=round(delay, 3), error=repr(error)
                )
                await wait_or_stop(stopping, delay)
                continue
            connection.add_termination_listener(lambda _connection, lost=lost: lost.set())
            try:
                failures = 0
                await self._take_and_hold(connection, stopping, lost)
            except asyncio.CancelledError:
                self._set_held(False)
                connection.terminate()  # the process is going: the server releases the lock with it
                raise
            except Exception as error:
                self._set_held(False)
                delay = LOCK_BACKOFF.delay(failures, random.random())
                failures += 1
                log.warning("session_lock_lost", name=self.name, delay=round(delay, 3), error=repr(error))
                await self._close(connection)
                await wait_or_stop(stopping, delay)
                continue
            self._set_held(False)
            await self._close(connection)  # closing the session releases the lock

    async def _take_and_hold(self, connection: Any, stopping: asyncio.Event, lost: asyncio.Event) -> None:
        """Until ``stopping`` (returns) or the connection is lost (raises ConnectionError): try the lock
        until it is ours, then check now and then that the session still lives."""
        while not stopping.is_set():
            if lost.is_set() or connection.is_closed():
                raise ConnectionError("the lock's connection was closed")
            if not self.held:
                taken = await connection.fetchval(
                    "SELECT pg_try_advisory_lock($1)", self.key, timeout=LOCK_CHECK_TIMEOUT
                )
                self._set_held(bool(taken))
            else:
                await connection.execute("SELECT 1", timeout=LOCK_CHECK_TIMEOUT)
            waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(lost.wait())]
            try:
                await asyncio.wait(waits, timeout=self.check_interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()

    async def _close(self, connection: Any) -> None:
        if connection.is_closed():
            return
        with contextlib.suppress(Exception):  # lost already, or the server gone: nothing to release
            await asyncio.wait_for(connection.close(), 5.0)
        if not connection.is_closed():
            connection.terminate()
