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
from typing import Any

from services.infra.dedicated_connection import keep_connection
from services.infra.retry import first_of

# The channel of migration 0029's trigger (its text names it too: a landed migration does not change).
APPENDED_CHANNEL = "rollbook_events_appended"
# The listening session's application_name (pg_stat_activity shows who listens).
LISTENER_NAME = "rollbook-append-listener"
# Seconds between two checks that the listening connection still answers: a connection cut without the
# server's FIN (a network partition, a host that vanished) is only seen by a query timing out.
LISTEN_CHECK_INTERVAL = 10.0
LISTEN_CHECK_TIMEOUT = 5.0


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
        await keep_connection(
            self.database_url,
            self._listen,
            stopping,
            name=LISTENER_NAME,
            connect_timeout=self.connect_timeout,
        )

    async def _listen(self, connection: Any, stopping: asyncio.Event, lost: asyncio.Event) -> None:
        """LISTEN, then until the connection is lost (raises) or stopping (returns): a query now and then,
        since a connection cut without the server's FIN (a network partition, a host that vanished) is
        only seen by a query timing out."""
        try:
            await connection.add_listener(APPENDED_CHANNEL, self._notified)
            self.listening = True
            self.connections += 1
            self.appended.set()  # what committed before LISTEN took effect was never notified
            while True:
                if lost.is_set() or connection.is_closed():
                    raise ConnectionError("the listening connection was closed")
                await first_of(stopping, lost, seconds=self.check_interval)
                if stopping.is_set():
                    return
                if not lost.is_set():
                    await connection.execute("SELECT 1", timeout=LISTEN_CHECK_TIMEOUT)
        finally:
            self.listening = False

    def _notified(self, _connection: Any, _pid: int, _channel: str, _payload: str) -> None:
        self.notifications += 1
        self.appended.set()
