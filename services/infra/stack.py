"""Where a command finds the stack: the one way every `rollbook` command that reads the store or the bus
gets its URLs.

For each of Postgres and NATS, in this order:

1. the configured URL (``ROLLBOOK_DATABASE_URL`` / ``ROLLBOOK_NATS_URL``);
2. the embedded server another rollbook process (``rollbook up``, the demo) runs on ``ROLLBOOK_DATA_DIR``:
   Postgres through its ``postmaster.pid`` (line 4 is the port), nats-server through ``nats-server.pid``
   and the ``-p PORT`` of its command line;
3. else, only when the command needs it, the embedded server started for the length of the command
   (``resolved_settings``), which is what holds the data dir's lock.

Step 2 is what lets `replay`, `verify` or `status` run beside `rollbook up` instead of failing on the data
dir's lock. ``rollbook stack`` prints what steps 1 and 2 find.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from services.infra.db_roles import Duty, assume_sql
from services.infra.embedded_logins import embedded_url
from services.infra.nats_auth import CREDENTIALS_DIR_NAME
from services.infra.redact import redacted
from services.infra.settings import Settings

# Stands in for a NATS URL a command never uses, so that resolving settings starts no nats-server.
UNUSED_NATS_URL = "nats://unused.invalid:4222"


@dataclass(frozen=True)
class RunningStack:
    """The URLs a command uses, and where each came from ("configured", "running", or "" when none)."""

    database_url: str
    nats_url: str
    database_source: str
    nats_source: str
    # The NATS identities' passwords for that server ("" when none is needed or configured).
    nats_credentials_dir: str = ""
    # The URL read commands use (the reader role's login, else database_url).
    database_reader_url: str = ""


def running_postgres_url(data_path: Path, duty: Duty = "writer") -> str | None:
    """The URL of ``duty``'s login on the embedded Postgres a rollbook process runs on ``data_path``, or
    None."""
    pid_file = data_path / "postgres" / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    if not _alive(pid, "postgres"):
        return None
    return embedded_url(data_path, port, duty)


def running_nats_url(data_path: Path) -> str | None:
    """The URL of the embedded nats-server a rollbook process runs on ``data_path``, or None."""
    import psutil

    try:
        process = psutil.Process(int((data_path / "nats-server.pid").read_text().strip()))
        argv = process.cmdline()
    except (OSError, ValueError, psutil.Error):
        return None
    if "-p" not in argv[:-1] or "nats-server" not in process.name():
        return None
    return f"nats://127.0.0.1:{argv[argv.index('-p') + 1]}"


def _alive(pid: int, name: str) -> bool:
    import psutil

    if pid <= 0:  # postgres writes a negative pid while initdb runs it in single-user mode
        return False
    try:
        return name in psutil.Process(pid).name()
    except psutil.Error:
        return False


def find_stack(settings: Settings) -> RunningStack:
    """Configured URLs first, then the embedded servers running on the data dir (steps 1 and 2)."""
    database_url, database_source = settings.database_url, "configured"
    reader_url = settings.url_for("reader")
    if not database_url:
        database_url, database_source = running_postgres_url(settings.data_path) or "", "running"
        reader_url = settings.database_reader_url or running_postgres_url(settings.data_path, "reader") or ""
    nats_url, nats_source = settings.nats_url, "configured"
    if not nats_url:
        nats_url, nats_source = running_nats_url(settings.data_path) or "", "running"
    credentials = settings.nats_credentials_dir
    if not credentials and nats_url and nats_source == "running":
        embedded = settings.data_path / CREDENTIALS_DIR_NAME
        credentials = str(embedded) if embedded.is_dir() else ""
    return RunningStack(
        database_url,
        nats_url,
        database_source if database_url else "",
        nats_source if nats_url else "",
        credentials,
        reader_url,
    )


@contextlib.asynccontextmanager
async def stack_settings(settings: Settings | None = None, *, nats: bool = False) -> AsyncIterator[Settings]:
    """Settings whose URLs reach the stack (module docstring). ``nats=False``: the command never uses the
    bus, so no nats-server is started for it (its nats_url may then be a placeholder). Embedded servers
    started here are stopped on exit. Never runs migrations: a read command must not change a schema."""
    settings = settings or Settings.from_env()
    found = find_stack(settings)
    settings = msgspec.structs.replace(
        settings,
        database_url=found.database_url,
        nats_url=found.nats_url,
        nats_credentials_dir=found.nats_credentials_dir,
        database_reader_url=found.database_reader_url,
    )
    if not nats and not settings.nats_url:
        settings = msgspec.structs.replace(settings, nats_url=UNUSED_NATS_URL)
    if settings.database_url and settings.nats_url:
        yield settings
        return
    from services.infra.embedded import resolved_settings

    async with resolved_settings(settings, migrate=False) as resolved:
        yield resolved


class StackUnreachable(RuntimeError):
    """A server of the stack does not answer; the message names it and its URL."""


async def connect_database(database_url: str, *, connect_timeout: float = 10.0, duty: Duty = "reader") -> Any:
    """An asyncpg connection to ``database_url``, acting as ``duty``'s role (services/infra/db_roles.py)
    when its login may; a server that does not answer is a StackUnreachable naming it (not a connection
    traceback)."""
    import asyncpg

    from services.infra.database import asyncpg_url

    try:
        connection = await asyncpg.connect(asyncpg_url(database_url), timeout=connect_timeout)
    except (OSError, TimeoutError, asyncpg.CannotConnectNowError) as error:
        raise StackUnreachable(f"cannot reach Postgres at {redacted(database_url)}: {error}") from error
    except (asyncpg.InvalidCatalogNameError, asyncpg.InvalidAuthorizationSpecificationError) as error:
        raise StackUnreachable(f"Postgres at {redacted(database_url)}: {error}") from error
    try:
        await connection.execute(assume_sql(duty))
    except BaseException:
        await connection.close()
        raise
    return connection


async def open_store(database_url: str, *, pool_size: int = 2, duty: Duty = "reader") -> Any:
    """The EventStore on ``database_url``, acting as ``duty``'s role; a server that does not answer, or a
    database without the event store's schema, is a StackUnreachable naming it."""
    from sqlalchemy.exc import DBAPIError

    from services.infra.store import EventStore

    where = f"Postgres at {redacted(database_url)}"
    try:
        return await EventStore.connect(database_url, pool_size=pool_size, duty=duty)
    except (OSError, TimeoutError) as error:
        raise StackUnreachable(f"cannot reach {where}: {error}") from error
    except DBAPIError as error:
        raise StackUnreachable(f"{where}: {error.orig or error}") from error
    except RuntimeError as error:  # no events table
        raise StackUnreachable(f"{where}: {error}; run `rollbook db upgrade`") from error
