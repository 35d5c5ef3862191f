"""`rollbook watcher|planner|executor|auditor` run one service; `rollbook up` runs all four.

`up` resolves the settings once (starting embedded Postgres/NATS for empty URLs), then runs each service
through the one supervisor (services/infra/supervisor.py): a child process with the resolved URLs in its
environment and its log in `<data_dir>/logs/<service>.log`, on an OS-chosen HTTP port read back from its
log; it prints one summary once all are ready, restarts a child that dies, and on SIGTERM/SIGINT
(or any error) stops every child and waits for them to finish their in-flight work. The demo and the
test stack run the services through the same supervisor; docker-compose runs one container per service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import typer

from services.cli.runtime import run_command
from services.infra.settings import Settings

if TYPE_CHECKING:
    from services.infra.supervisor import Supervisor

SERVICES = ("watcher", "planner", "executor", "auditor")


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


def services_for(settings: Settings) -> tuple[str, ...]:
    """The services `up` runs: all four, or in shadow mode all but the executor (nothing is acted on)."""
    return tuple(s for s in SERVICES if not (settings.shadow and s == "executor"))


async def _up(settings: Settings) -> int:
    import asyncio
    import time

    from services.cli.up_summary import log_dir
    from services.infra.supervisor import Supervisor

    started = time.monotonic()
    # The services log to files (no echo): `up` itself says one summary once all are ready, then only what
    # needs attention (a service that exits and is restarted).
    supervisor = Supervisor(settings, log_dir(settings))
    async with supervisor:
        names = await supervisor.spawn(*services_for(settings))
        try:
            # A child that dies, even while starting (a planner that lost its Lease exits 1 to stand
            # again), is started again; the summary comes once all are ready.
            await asyncio.gather(
                supervisor.keep_running(), report_ready(supervisor, names, settings, started)
            )
        except asyncio.CancelledError:
            # SIGTERM/SIGINT (run_command cancels us): the normal way to stop. Stop the children cleanly;
            # exit 0 once they all have.
            codes = await supervisor.stop_all()
            return 0 if all(code == 0 for code in codes.values()) else 1
    return 0


def _service_command(service: str) -> Callable[[], None]:
    # A closure, not a default argument: typer would offer a default argument as a `--service` option.
    def command() -> None:
        # Migrate only a database we start ourselves (embedded); a given database is migrated once by
        # its operator (`rollbook db upgrade`, or `rollbook up`), never by several services racing.
        settings = Settings.from_env()
        raise typer.Exit(
            run_command(_service_body(service), settings=settings, migrate=not settings.database_url)
        )

    command.__doc__ = f"Run the {service} service (health, readiness and metrics on ROLLBOOK_HTTP_PORT)."
    return command


async def report_ready(supervisor: Supervisor, names: list[str], settings: Settings, started: float) -> None:
    """Once every service is ready (one that died while starting is started again and waited for), the
    summary: each service's endpoints, the stack's URLs, where the logs are."""
    from services.cli.up_summary import summary

    ports: dict[str, int] = {}
    for name in names:
        ports[name] = (await supervisor.wait_ready(name, timeout=None, follow_restarts=True)).port
    print(summary(settings, ports, started), flush=True)


def register(app: typer.Typer) -> None:
    for service in SERVICES:
        app.command(service)(_service_command(service))

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
