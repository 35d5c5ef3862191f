"""`rollbook watcher|planner|executor|auditor` run one service; `rollbook up` runs all four.

`up` resolves the settings once (starting embedded Postgres/NATS for empty URLs), then runs each service
as a child process (`python -m services.cli.main <service>`) with the resolved URLs in its environment,
restarts a child that dies, and on SIGTERM/SIGINT forwards SIGTERM to every child and waits for them to
finish their in-flight work. docker-compose and the demo mirror this: one container per service.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import typer

from services.cli.runtime import run_command
from services.infra.settings import Settings

if TYPE_CHECKING:
    import asyncio

SERVICES = ("watcher", "planner", "executor", "auditor")
_RESTART_DELAY = 1.0
_STOP_TIMEOUT = 20.0


def _service_body(service: str) -> Callable[[Settings], Awaitable[int | None]]:
    async def body(settings: Settings) -> int:
        from services.infra.leader import LeadershipLost

        if service == "watcher":
            from services.watcher.service import run
        elif service == "planner":
            from services.planner.service import run
        elif service == "executor":
            from services.executor.service import run
        else:
            from services.auditor.service import run
        try:
            await run(settings)
        except LeadershipLost:
            return 1  # logged as leader_lost; the supervisor starts us again as a candidate
        return 0

    return body


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment variables that reproduce ``settings`` in a child process."""
    import msgspec

    env: dict[str, str] = {}
    for field in msgspec.structs.fields(Settings):
        value = getattr(settings, field.name)
        env["ROLLBOOK_" + field.name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


async def _supervise(service: str, env: dict[str, str], stopping: asyncio.Event) -> None:
    import asyncio

    while not stopping.is_set():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", service, env=env
        )
        waiter = asyncio.create_task(process.wait())
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait([waiter, stop], return_when=asyncio.FIRST_COMPLETED)
        if stopping.is_set():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(waiter, _STOP_TIMEOUT)
                except TimeoutError:
                    process.kill()
                    await waiter
            stop.cancel()
            return
        stop.cancel()
        print(f"rollbook up: {service} exited with {process.returncode}; restarting", file=sys.stderr)
        await asyncio.sleep(_RESTART_DELAY)


def services_for(settings: Settings) -> tuple[str, ...]:
    """The services `up` runs: all four, or in shadow mode all but the executor (nothing is acted on)."""
    return tuple(s for s in SERVICES if not (settings.shadow and s == "executor"))


async def _up(settings: Settings) -> int:
    import asyncio

    env = {**os.environ, **settings_env(settings)}
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(_supervise(s, env, stopping)) for s in services_for(settings)]
    try:
        # asyncio.wait, not gather: cancelling us must not cancel the supervisors, which stop the children.
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        # SIGTERM/SIGINT (run_command cancels us): the normal way to stop. Stop the children cleanly;
        # exit 0 once they all have.
        stopping.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return 1 if any(isinstance(r, BaseException) for r in results) else 0
    return 0


def register(app: typer.Typer) -> None:
    for service in SERVICES:

        def command(service: str = service) -> None:
            # Migrate only a database we start ourselves (embedded); a given database is migrated once by
            # its operator (`rollbook db upgrade`, or `rollbook up`), never by several services racing.
            settings = Settings.from_env()
            raise typer.Exit(
                run_command(_service_body(service), settings=settings, migrate=not settings.database_url)
            )

        command.__doc__ = f"Run the {service} service (health, readiness and metrics on ROLLBOOK_HTTP_PORT)."
        app.command(service)(command)

    @app.command("up")
    def up(
        shadow: bool = typer.Option(
            False,
            "--shadow",
            help="Act on nothing: run watcher, planner and auditor only, and record for every CloneSet what"
            " its own controller did and what rollbook would have done (ROLLBOOK_SHADOW; docs/shadow.md).",
        ),
    ) -> None:
        """Run all four services as child processes (embedded Postgres/NATS when their URLs are empty)."""
        import msgspec

        settings = Settings.from_env()
        if shadow:
            settings = msgspec.structs.replace(settings, shadow=True)
        raise typer.Exit(run_command(_up, settings=settings))
