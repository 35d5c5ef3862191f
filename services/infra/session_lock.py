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
import hashlib
from typing import Any

import structlog

from services.infra.dedicated_connection import keep_connection
from services.infra.retry import first_of

log = structlog.get_logger("session_lock")

# Seconds between two tries of a lock another session holds, and between two checks of a held one.
LOCK_CHECK_INTERVAL = 1.0
LOCK_CHECK_TIMEOUT = 5.0
# The server gives up on a silent client: a holder whose host died or was cut off releases the lock within
# about half a minute, not the system's two hours: keepalive probes while the line is idle (10 s, then 3
# probes 5 s apart), and a limit on data it sent that stays unacknowledged (25 s), when probes do not run.
KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
}


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
        try:
            await keep_connection(
                self.database_url,
                self._take_and_hold,
                stopping,
                name=f"rollbook-lock {self.name}",
                server_settings=KEEPALIVES,
                connect_timeout=self.connect_timeout,
            )
        finally:
            self._set_held(False)

    async def _take_and_hold(self, connection: Any, stopping: asyncio.Event, lost: asyncio.Event) -> None:
        """Until ``stopping`` (returns; closing the session releases the lock) or the connection is lost
        (raises ConnectionError): try the lock until it is ours, then check now and then that the session
        still lives."""
        try:
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
                await first_of(stopping, lost, seconds=self.check_interval)
        finally:
            self._set_held(False)
