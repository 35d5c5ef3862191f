"""Hearing of appends as they commit: a connection LISTENing on the channel migration 0029's trigger
notifies after every committed insert into ``events`` (migrations/versions/0029_events_appended_notify.py).

``AppendNotifications.run`` keeps one asyncpg connection listening and sets ``appended`` on every
notification. A notification is only a hint that something committed: what was appended is read from
the store, so a lost or merged notification costs nothing but time. The connection can be lost (Postgres
restarting, failing over, a backend terminated): it is opened again with backoff and LISTENs again, and
``appended`` is set each time it starts listening, since what committed while nobody listened was never
notified. ``listening`` says whether notifications can be relied on now; a reader keeps a slow poll of
its own for a notification lost some other way (services/auditor/service.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import asyncpg
import structlog

from services.infra.database import asyncpg_url
from services.infra.retry import Backoff, wait_or_stop

log = structlog.get_logger("appended")

# The channel of migration 0029's trigger (its text names it too: a landed migration does not change).
APPENDED_CHANNEL = "rollbook_events_appended"
# The listening session's application_name (pg_stat_activity shows who listens).
LISTENER_NAME = "rollbook-append-listener"
# Seconds between two checks that the listening connection still answers: a connection cut without the
# server's FIN (a network partition, a host that vanished) is only seen by a query timing out.
LISTEN_CHECK_INTERVAL = 10.0
LISTEN_CHECK_TIMEOUT = 5.0
# Reconnecting waits out a down server; polling covers the time without notifications meanwhile.
LISTEN_BACKOFF = Backoff(initial=0.2, maximum=5.0)


class AppendNotifications:
    """See the module docstring. ``await run(stopping)`` until ``stopping`` is set."""

    def __init__(
        self,
        database_url: str,
        *,
        check_interval: float = LISTEN_CHECK_INTERVAL,
        connect_timeout: float = 10.0,
    ) -> None:
        self.database_url = database_url
        self.check_interval = check_interval
        self.connect_timeout = connect_timeout
        self.appended = asyncio.Event()  # set on each notification and each time listening starts
        self.listening = False
        self.notifications = 0  # received so far (counted for /readyz and tests)
        self.connections = 0  # listening connections opened so far

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        while not stopping.is_set():
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    asyncpg_url(self.database_url),
                    timeout=self.connect_timeout,
                    server_settings={"application_name": LISTENER_NAME},
                )
            except Exception as error:  # down, restarting, refused: polling covers it meanwhile
                delay = LISTEN_BACKOFF.delay(failures, random.random())
                failures += 1
                log.warning("append_listen_connect_failed", delay=round(delay, 3), error=repr(error))
                await wait_or_stop(stopping, delay)
                continue
            connection.add_termination_listener(lambda _connection, lost=lost: lost.set())
            try:
                await connection.add_listener(APPENDED_CHANNEL, self._notified)
                self.listening = True
                self.connections += 1
                self.appended.set()  # what committed before LISTEN took effect was never notified
                if failures:
                    log.info("append_listen_recovered", attempts=failures + 1)
                failures = 0
                await self._hold(connection, stopping, lost)
            except asyncio.CancelledError:
                connection.terminate()  # the process is going: nothing to wait for
                raise
            except Exception as error:
                delay = LISTEN_BACKOFF.delay(failures, random.random())
                failures += 1
                log.warning("append_listen_lost", delay=round(delay, 3), error=repr(error))
                self.listening = False
                await self._close(connection)
                await wait_or_stop(stopping, delay)
                continue
            finally:
                self.listening = False
            await self._close(connection)

    async def _hold(self, connection: Any, stopping: asyncio.Event, lost: asyncio.Event) -> None:
        """Until ``stopping`` (returns) or the connection is lost (raises ConnectionError)."""
        while not stopping.is_set():
            if lost.is_set() or connection.is_closed():
                raise ConnectionError("the listening connection was closed")
            waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(lost.wait())]
            try:
                await asyncio.wait(waits, timeout=self.check_interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if stopping.is_set() or lost.is_set():
                continue
            await connection.execute("SELECT 1", timeout=LISTEN_CHECK_TIMEOUT)

    def _notified(self, _connection: Any, _pid: int, _channel: str, _payload: str) -> None:
        self.notifications += 1
        self.appended.set()

    async def _close(self, connection: Any) -> None:
        if connection.is_closed():
            return
        with contextlib.suppress(Exception):  # lost already, or the server gone: nothing to release
            await asyncio.wait_for(connection.close(), 5.0)
        if not connection.is_closed():
            connection.terminate()
