"""`rollbook ui`: a read-only web page of the audit trail, on 127.0.0.1 by default.

The list of CloneSet rollouts, and per rollout a timeline: pods as rows, each pod action as a bar (queued
from requested to started, then running to finished; in place, recreate, create, delete), the partition
steps, and the unavailable pods over time against the maxUnavailable line, all read from the SQL views
(docs/sql.md); a slider shows the workload's state after any event of the rollout, from the same fold
`rollbook replay` uses. Plain HTML, JavaScript and SVG served from package data: no build step.

    GET /                      the page (services/cli/ui_static/)
    GET /api/rollouts          rollouts, newest first
    GET /api/rollout?id=ID     one rollout: its pod actions, partition steps, unavailability, states
"""

from __future__ import annotations

from datetime import datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any

import typer

from services.infra.settings import Settings

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

    from services.infra.store import EventStore

ROLLOUTS_SQL = """
SELECT rollout_id, namespace, workload, from_revision, to_revision, strategy_type, replicas, started,
       finished, duration, outcome, started_position, finished_position
FROM rollouts WHERE kind = 'CloneSet' ORDER BY started_position DESC
"""
ACTIONS_SQL = """
SELECT pod, action, update_kind, in_place, requested, started, finished, outcome, reason
FROM pod_actions WHERE rollout_id = $1 ORDER BY position
"""
STEPS_SQL = """
SELECT partition, replicas, expected_updated, max_unavailable, planned, position
FROM partition_steps WHERE rollout_id = $1 ORDER BY position
"""
UNAVAILABILITY_SQL = """
SELECT position, at, replicas, available, unavailable
FROM unavailability
WHERE kind = 'CloneSet' AND namespace = $1 AND workload = $2 AND position >= $3 AND position <= $4
ORDER BY position
"""


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def rows(records: list[asyncpg.Record]) -> list[dict[str, Any]]:
    return [{key: jsonable(value) for key, value in record.items()} for record in records]


def static_file(name: str) -> str:
    return (resources.files("services.cli") / "ui_static" / name).read_text()


def make_app(pool: asyncpg.Pool, store: EventStore) -> web.Application:
    from aiohttp import web

    from services.replay.operations import replay_records
    from services.replay.reads import TargetError

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=static_file("index.html"), content_type="text/html")

    async def script(_: web.Request) -> web.Response:
        return web.Response(text=static_file("timeline.js"), content_type="application/javascript")

    async def rollouts(_: web.Request) -> web.Response:
        async with pool.acquire() as connection:
            return web.json_response(rows(await connection.fetch(ROLLOUTS_SQL)))

    async def rollout(request: web.Request) -> web.Response:
        rollout_id = request.query.get("id", "")
        async with pool.acquire() as connection:
            found = [r for r in rows(await connection.fetch(ROLLOUTS_SQL)) if r["rollout_id"] == rollout_id]
            if not found:
                raise web.HTTPNotFound(text=f"no rollout {rollout_id!r}")
            head = found[0]
            last = head["finished_position"] or await connection.fetchval(
                "SELECT max(global_position) FROM events"
            )
            actions = rows(await connection.fetch(ACTIONS_SQL, rollout_id))
            steps = rows(await connection.fetch(STEPS_SQL, rollout_id))
            unavailability = rows(
                await connection.fetch(
                    UNAVAILABILITY_SQL, head["namespace"], head["workload"], head["started_position"], last
                )
            )
        try:
            states = await replay_records(store, rollout_id)
        except TargetError as error:
            raise web.HTTPNotFound(text=str(error)) from None
        return web.json_response(
            {
                "rollout": head,
                "actions": actions,
                "steps": steps,
                "unavailability": unavailability,
                "states": states,
            }
        )

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/timeline.js", script)
    app.router.add_get("/api/rollouts", rollouts)
    app.router.add_get("/api/rollout", rollout)
    return app


async def serve(settings: Settings, host: str, port: int) -> int:
    import asyncio
    import signal

    import asyncpg
    from aiohttp import web

    from services.infra.database import asyncpg_url
    from services.infra.stack import open_store, stack_settings

    async with stack_settings(settings) as resolved:
        pool = await asyncpg.create_pool(asyncpg_url(resolved.database_url), min_size=1, max_size=4)
        store = await open_store(resolved.database_url)
        runner = web.AppRunner(make_app(pool, store), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0][1]
            typer.echo(f"rollbook ui on http://{host}:{bound}/ (read-only; Ctrl-C stops)")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()
            await store.close()
            await pool.close()
    return 0


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui_command(
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8090, "--port", help="Port (0: pick a free one)."),
    ) -> None:
        """Serve a read-only web page of the rollouts: a timeline per rollout, and the state at any event."""
        import asyncio

        from services.cli.errors import check_range

        check_range("--port", port, 0, 65535, what=" (0: pick a free one)")
        raise typer.Exit(asyncio.run(serve(Settings.from_env(), host, port)))
