"""What every `rollbook` command that needs the store or the bus uses to run its async body.

    def up() -> None:
        raise typer.Exit(run_command(serve))   # async def serve(settings: Settings) -> int

``run_command`` reads Settings from the environment, starts embedded Postgres/NATS for empty URLs (and
runs the migrations), runs the body, and on SIGINT/SIGTERM cancels the body so that it can finish its
in-flight work in ``finally``/``except CancelledError`` before the embedded servers are stopped.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from services.cli.errors import CommandError
from services.infra.settings import Settings

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

    from services.infra.db_roles import Duty
    from services.infra.store import EventStore

log = logging.getLogger(__name__)

CommandBody = Callable[[Settings], Awaitable[int | None]]
T = TypeVar("T")


def run_command(body: CommandBody, *, settings: Settings | None = None, migrate: bool = True) -> int:
    """Run ``body(resolved_settings)``; returns the process exit code (body's result, 0 for None, 130 when
    interrupted); embedded servers that cannot start are a CommandError."""
    import asyncio

    from services.infra.embedded import EmbeddedError

    settings = settings or Settings.from_env()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines list plugins, not progress
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
            return runner.run(_run(body, settings, migrate))
    except EmbeddedError as error:  # a second `rollbook up` on one data dir, a server that cannot start
        raise CommandError(str(error)) from None


def event_loop_factory(choice: str = "uvloop") -> Callable[[], AbstractEventLoop] | None:
    """For ``choice`` uvloop (``ROLLBOOK_EVENT_LOOP``'s default): uvloop's event loop where it is installed
    (Linux and macOS; it is a dependency there), else None (asyncio's own). For asyncio: None. A service
    spends most of its CPU in the machinery around each message, request and query rather than in
    rollbook's code, and uvloop runs that machinery in C (CPU per in-place pod over the four services:
    median 7% less in nine alternating pairs, docs/performance.md)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _run(body: CommandBody, settings: Settings, migrate: bool) -> int:
    import asyncio

    from services.infra.embedded import resolved_settings

    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    assert current is not None
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        current.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        async with resolved_settings(settings, migrate=migrate) as resolved:
            with contextlib.suppress(asyncio.CancelledError):
                result = await body(resolved)
                return int(result or 0)
            # Cancelled by a signal: the context manager still stops the embedded servers on the way out.
            current.uncancel()
        return 130
    except asyncio.CancelledError:
        if interrupted:
            return 130
        raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_with_store(
    work: Callable[[EventStore, Settings], Awaitable[T]], *, nats: bool = False, duty: Duty = "reader"
) -> T:
    """Run ``work`` on the event store of the stack (services/infra/stack.py: configured, else the one
    `rollbook up` runs, else embedded for this command), as ``duty``'s database role (the reader: read
    commands; the writer for the one that records a checkpoint). A bad target is exit 2."""
    import asyncio

    from services.infra.stack import open_store, stack_settings
    from services.model.upcasting import UpcastError
    from services.replay.reads import TargetError
    from services.replay.whatif import WhatIfError

    async def run() -> T:
        async with stack_settings(nats=nats) as settings:
            store = await open_store(settings.url_for(duty), duty=duty)
            try:
                return await work(store, settings)
            finally:
                await store.close()

    try:
        return asyncio.run(run())
    except (TargetError, WhatIfError, UpcastError) as error:
        raise CommandError(str(error), exit_code=2) from None
