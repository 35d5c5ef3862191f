"""`rollbook watcher|planner|executor|auditor` run one service; `rollbook up` runs all four.

`up` resolves the settings once (starting embedded Postgres/NATS for empty URLs), then runs each service
through the one supervisor (services/infra/supervisor.py): a child process with the resolved URLs in its
environment and its log in `<data_dir>/logs/<service>.log`, on an OS-chosen HTTP port read back from its
log; it prints one summary once all are ready, restarts a child that dies, and on SIGTERM/SIGINT
(or any error) stops every child and waits for them to finish their in-flight work. The demo and the
test stack run the services through the same supervisor; docker-compose runs one container per service.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import typer

from services.cli.runtime import run_command
from services.infra.settings import Settings

if TYPE_CHECKING:
    from services.cli.up_summary import UpState
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


async def _up(settings: Settings, state: UpState) -> int:
    import asyncio
    import time

    from services.cli.errors import CommandError
    from services.cli.up_summary import log_dir
    from services.infra.supervisor import ServiceCannotRun, Supervisor

    started = time.monotonic()
    # The services log to files (no echo): `up` itself says one summary once all are ready, then only what
    # needs attention (a service that exits and is restarted, with its log's last lines).
    supervisor = Supervisor(settings, log_dir(settings))
    async with supervisor:
        names = await supervisor.spawn(*services_for(settings))
        try:
            # A child that dies, even while starting (a planner that lost its Lease exits 1 to stand
            # again), is started again; the summary comes once all are ready.
            await asyncio.gather(
                supervisor.keep_running(), report_ready(supervisor, names, settings, started, state)
            )
        except asyncio.CancelledError:
            # SIGTERM/SIGINT (run_command cancels us): the normal way to stop. Stop the children cleanly;
            # exit 0 once they all have.
            state.remove()
            codes = await supervisor.stop_all()
            return 0 if all(code == 0 for code in codes.values()) else 1
        except ServiceCannotRun as failure:
            state.remove()
            await supervisor.stop_all()
            print(
                f"rollbook up: {failure.name}'s last log lines:\n{failure.tail}", file=sys.stderr, flush=True
            )
            raise CommandError(f"{failure}; every service stopped") from None
    return 0


async def preflight(settings: Settings) -> None:
    """What every service needs and no restart can supply, checked before any starts: a usable kubeconfig
    whose API server answers, and the configured Postgres and NATS servers. Each missing one is a
    ``CommandError`` naming it."""
    import asyncio
    from urllib.parse import urlsplit

    from services.cli.errors import CommandError
    from services.infra.stack import connect_database, redacted

    await probe_api_server(settings)
    if settings.database_url:
        connection = await connect_database(settings.database_url, connect_timeout=5)
        await connection.close()
    for url in filter(None, (u.strip() for u in settings.nats_url.split(","))):
        parts = urlsplit(url)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port or 4222), 5)
        except (OSError, TimeoutError) as error:
            raise CommandError(f"cannot reach NATS at {redacted(url)}: {error or 'no answer'}") from None
        writer.close()


async def probe_api_server(settings: Settings) -> None:
    """Load the kubeconfig and ask the API server its version: a missing kubeconfig is its
    ``ConfigException`` (one line through the error boundary), a server that does not answer a
    ``CommandError`` naming its URL."""
    import aiohttp
    from kubernetes_asyncio import client

    from services.cli.errors import CommandError
    from services.infra.kube import api_client

    api = await api_client(settings)
    async with api:
        try:
            await client.VersionApi(api).get_code(_request_timeout=10)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise CommandError(
                f"cannot reach the Kubernetes API server at {api.configuration.host}: {error or 'no answer'}"
                " (is `rollbook simcluster` running, or ROLLBOOK_KUBECONFIG set to your cluster's?)"
            ) from None


def _service_command(service: str) -> Callable[[], None]:
    # A closure, not a default argument: typer would offer a default argument as a `--service` option.
    def command() -> None:
        # Migrate only a database we start ourselves (embedded); a given database is migrated once by
        # its operator (`rollbook db upgrade`, or `rollbook up`), never by several services racing.
        from services.cli.errors import describe, is_configuration_error
        from services.infra.supervisor import EXIT_CONFIGURATION

        settings = Settings.from_env()
        try:
            code = run_command(_service_body(service), settings=settings, migrate=not settings.database_url)
        except Exception as error:
            if not is_configuration_error(error):
                raise
            # No restart can mend it: a distinct exit code tells a supervisor (`rollbook up`) to stop.
            print(f"rollbook: {describe(error)[0]}", file=sys.stderr, flush=True)
            code = EXIT_CONFIGURATION
        raise typer.Exit(code)

    command.__doc__ = f"Run the {service} service (health, readiness and metrics on ROLLBOOK_HTTP_PORT)."
    return command


async def report_ready(
    supervisor: Supervisor, names: list[str], settings: Settings, started: float, state: UpState
) -> None:
    """Once every service is ready (one that died while starting is started again and waited for), the
    summary: each service's endpoints, the stack's URLs, where the logs are; and the state file that
    `rollbook stack --wait` waits for says ready."""
    from services.cli.up_summary import summary

    ports: dict[str, int] = {}
    for name in names:
        ports[name] = (await supervisor.wait_ready(name, timeout=None, follow_restarts=True)).port
    state.write(ready=True, ports=ports)
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
        import asyncio

        import msgspec

        settings = Settings.from_env()
        if shadow:
            settings = msgspec.structs.replace(settings, shadow=True)
        # A missing kubeconfig or server says so now, in one line, before any server or service starts.
        asyncio.run(preflight(settings))
        from services.cli.up_summary import UpState, running_up

        state = UpState(settings)
        if running_up(settings.data_path) is None:  # else the embedded servers' lock refuses this `up`
            state.write(ready=False)  # before the servers start: `stack --wait` then waits for the services
        try:
            code = run_command(lambda resolved: _up(resolved, state), settings=settings)
        finally:
            if (running_up(settings.data_path) or {}).get("pid") == os.getpid():
                state.remove()
        raise typer.Exit(code)
