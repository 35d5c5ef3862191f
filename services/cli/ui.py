"""`rollbook ui`: a read-only web page of the audit trail, on 127.0.0.1 by default.

The list of rollouts (CloneSets', and the Deployments' and StatefulSets' rollbook records), and per
rollout a timeline: pods as rows, each pod action as a bar (queued
from requested to started, then running to finished; in place, recreate, create, delete), the partition
steps, and the unavailable pods over time against the maxUnavailable line, all read from the SQL views
(docs/sql.md); a slider shows the workload's state after any event of the rollout, from the same fold
`rollbook replay` uses. Plain HTML, JavaScript and SVG served from package data: no build step.

    GET /                      the page (services/cli/ui_static/)
    GET /api/rollouts          rollouts, newest first
    GET /api/rollout?id=ID     one rollout: its pod actions, partition steps, unavailability, paused
                               periods, and per event the pods it changed (replay_frames)

The page polls while a rollout runs (every POLL_SECONDS), so it moves with the trail, and shades the
periods a rollout was paused (RolloutPaused to RolloutResumed). When the event store cannot be reached
(the stack is down) the API answers 503 with the reason as JSON, the terminal gets one line (no
traceback), and the page shows a banner and keeps retrying; the server starts even while the stack is
down and connects when it comes up. When the page's own server is gone, the page says so too.

Guarded (docs/security.md): a request whose Host header is neither an address literal, ``localhost``,
the ``--host`` name nor one of ``--allow-host`` is refused (403), so a DNS name rebound to 127.0.0.1 by
a web page cannot read the trail; every answer carries a Content-Security-Policy allowing only this
page's own script; recorded strings reach the page as text (``textContent``), never as HTML. Listening
beyond the loopback needs the API token (``rollbook api-token``; services/infra/api_auth.py) on the
``/api/`` routes: the page takes it from its URL fragment (``#token=...``), which browsers never send.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any

import typer

from services.infra.settings import Settings

if TYPE_CHECKING:
    import asyncpg
    from aiohttp import web

    from services.infra.api_auth import Authenticator
    from services.infra.store import EventStore


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def json_answer(body: Any, status: int = 200) -> web.Response:
    """A JSON response encoded by msgspec: a 200-pod rollout's answer is about a megabyte, which the
    standard library's encoder took 8-16 ms to write, msgspec 1-5."""
    import msgspec
    from aiohttp import web

    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


async def _cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait for it to end, whatever it raises."""
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


def rows(records: list[asyncpg.Record]) -> list[dict[str, Any]]:
    return [{key: jsonable(value) for key, value in record.items()} for record in records]


def paused_periods(transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RolloutPaused / RolloutResumed rows (in trail order) as periods ``{from, to, reason}``; ``to`` is
    None while the rollout is still paused. A resume without a pause before it, or a second pause, changes
    nothing (the planner records each transition once)."""
    periods: list[dict[str, Any]] = []
    for row in transitions:
        open_period = bool(periods) and periods[-1]["to"] is None
        if row["type"] == "RolloutPaused" and not open_period:
            periods.append({"from": jsonable(row["at"]), "to": None, "reason": row.get("reason") or ""})
        elif row["type"] == "RolloutResumed" and open_period:
            periods[-1]["to"] = jsonable(row["at"])
    return periods


# How often the page asks again while a rollout runs or the stack is down (it says so in its banner).
POLL_SECONDS = 2.0


class Unreachable(RuntimeError):
    """The event store does not answer: the stack is down, or its database is."""


class Trail:
    """The reader's pool and event store, opened on first use and again after the database went away, so
    the page's server outlives the stack it reads."""

    def __init__(
        self, url: str | None = None, pool: asyncpg.Pool | None = None, store: EventStore | None = None
    ) -> None:
        self.url, self.pool, self.store = url, pool, store
        self.down: str | None = None  # why the last read failed (None: it worked)

    async def open(self) -> tuple[asyncpg.Pool, EventStore]:
        if self.pool is not None and self.store is not None:
            return self.pool, self.store
        if self.url is None:
            raise Unreachable("no database to read")
        import asyncpg

        from services.infra.database import asyncpg_url
        from services.infra.db_roles import act_as_reader
        from services.infra.stack import open_store

        try:
            if self.pool is None:
                self.pool = await asyncpg.create_pool(
                    asyncpg_url(self.url), min_size=1, max_size=4, init=act_as_reader, timeout=5
                )
            if self.store is None:
                self.store = await open_store(self.url)
        except BaseException:
            await self.close()
            raise
        return self.pool, self.store

    async def lost(self) -> None:
        """The database went away: reopen on the next request (a Trail given open objects keeps them)."""
        if self.url is not None:
            await self.close()

    async def close(self) -> None:
        pool, store, self.pool, self.store = self.pool, self.store, None, None
        if store is not None:
            await store.close()
        if pool is not None:
            pool.terminate()


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """What a read raises when the database does not answer (not a wrong query: that stays a 500)."""
    import asyncpg
    from sqlalchemy.exc import DBAPIError

    from services.infra.stack import StackUnreachable

    return (
        OSError,
        TimeoutError,
        Unreachable,
        StackUnreachable,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        asyncpg.OperatorInterventionError,
        DBAPIError,
    )


def store_guard(trail: Trail) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """An ``/api/`` read that cannot reach the event store answers 503 ``{"error": why}`` (the page shows a
    banner) and writes one line to the terminal when the store goes away and one when it is back."""
    import sys

    from aiohttp import web

    errors = unreachable_errors()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/api/"):
            return await handler(request)
        try:
            response = await handler(request)
        except errors as error:
            why = str(error).splitlines()[0] if str(error) else type(error).__name__
            if trail.down is None:
                print(
                    f"rollbook ui: the event store is unreachable ({why}); the page retries", file=sys.stderr
                )
            trail.down = why
            await trail.lost()
            return json_answer({"error": f"the event store is unreachable: {why}"}, status=503)
        if trail.down is not None:
            print("rollbook ui: the event store answers again", file=sys.stderr)
            trail.down = None
        return response

    return middleware


# Sent with every answer: only this page's own script runs, it cannot be framed, and nothing is sniffed.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
UNSPECIFIED = frozenset({"0.0.0.0", "::", ""})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name of a Host header, without its port (``[::1]:8090`` -> ``::1``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    if header.count(":") == 1:
        return header.partition(":")[0]
    return header


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    names = {"localhost", *(name.strip().lower() for name in extra if name.strip())}
    if bound not in UNSPECIFIED:
        names.add(bound.lower())
    return frozenset(names)


def host_allowed(header: str, allowed: frozenset[str]) -> bool:
    """Whether a request's Host header names this server: an address literal (which no DNS answer can
    rebind), or one of ``allowed``."""
    name = host_name(header)
    if not name:
        return False
    if name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


def host_guard(allowed: frozenset[str]) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    from aiohttp import web

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not host_allowed(request.headers.get("Host", ""), allowed):
            response: web.StreamResponse = web.Response(
                status=403, text="rollbook ui: unknown Host header (start it with --allow-host NAME)"
            )
        else:
            response = await handler(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return middleware


def static_file(name: str) -> str:
    return (resources.files("services.cli") / "ui_static" / name).read_text()


def make_app(
    pool: asyncpg.Pool | None,
    store: EventStore | None,
    *,
    hosts: frozenset[str] = frozenset({"localhost"}),
    check: Authenticator | None = None,
    trail: Trail | None = None,
) -> web.Application:
    """The page's server on an open ``pool`` and ``store``, or on ``trail`` (opened when first read);
    ``check``: the bearer token check every ``/api/`` route needs (None: none)."""
    from aiohttp import web

    from services.infra import audit_queries
    from services.infra.api_auth import guard
    from services.kinds.registry import KINDS
    from services.replay.operations import cloneset_frames, replay_frames
    from services.replay.reads import TargetError

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=static_file("index.html"), content_type="text/html")

    async def script(_: web.Request) -> web.Response:
        return web.Response(text=static_file("timeline.js"), content_type="application/javascript")

    source = trail if trail is not None else Trail(pool=pool, store=store)

    async def rollouts(_: web.Request) -> web.Response:
        pool, _store = await source.open()
        async with pool.acquire() as connection:
            return json_answer(rows(await audit_queries.timeline_rollouts(connection)))

    async def rollout(request: web.Request) -> web.Response:
        rollout_id = request.query.get("id", "")
        pool, store = await source.open()
        # The replay (this process's CPU: reading, decoding and folding the workload's events) starts at
        # once, as a CloneSet's (the usual rollout): its frames, and the view ``unavailability``'s rows
        # counted in the same fold, so Postgres, busy reading those events, is not asked for the view too.
        replaying: asyncio.Future[Any] = asyncio.ensure_future(cloneset_frames(store, rollout_id))
        try:
            async with pool.acquire() as connection:
                # A CloneSet and a recorded Deployment of the same name could share a rollout id: the
                # first (newest) is shown.
                found = rows(await audit_queries.timeline_rollouts(connection, rollout_id))
                if not found:
                    raise web.HTTPNotFound(text=f"no rollout {rollout_id!r}")
                head = found[0]
                kind = KINDS[head["kind"]]
                namespace, workload = head["namespace"], head["workload"]
                first = head["started_position"]
                last = head["finished_position"] or await audit_queries.head_position(connection)
                if not kind.driven:  # a recorded kind's rollout: its own trail's replay instead
                    await _cancelled(replaying)
                    replaying = asyncio.ensure_future(replay_frames(store, f"{kind.name}/{rollout_id}"))
                # A finished CloneSet rollout's rows all lie within its replay's span; a rollout still
                # going (rows up to the log's head) and a recorded kind's ask the view.
                unavailable: list[dict[str, Any]] | None = None
                if not kind.driven or head["finished_position"] is None:
                    unavailable = rows(
                        await audit_queries.unavailability(
                            connection, kind.name, namespace, workload, first, last
                        )
                    )
                actions = rows(await audit_queries.rollout_actions(connection, rollout_id))
                steps = rows(await audit_queries.partition_steps(connection, rollout_id))
                # The pauses are in the planner's decisions stream, or in a recorded kind's trail.
                trail = (
                    kind.decisions_stream(namespace, workload)
                    if kind.driven
                    else kind.recorded_stream(namespace, workload)
                )
                transitions = rows(await audit_queries.pause_transitions(connection, rollout_id, trail))
        except BaseException:
            await _cancelled(replaying)
            raise
        try:
            replayed = await replaying
        except TargetError as error:
            raise web.HTTPNotFound(text=str(error)) from None
        states = replayed.frames if kind.driven else replayed
        if unavailable is None:
            unavailable = [r for r in replayed.unavailability if first <= r["position"] <= last]
        return json_answer(
            {
                "rollout": head,
                "actions": actions,
                "steps": steps,
                "unavailability": unavailable,
                "paused": paused_periods(transitions),
                "states": states,
                "poll_seconds": POLL_SECONDS,
            }
        )

    middlewares: list[Any] = [host_guard(hosts)]
    if check is not None:
        middlewares.append(guard(check, open_paths=frozenset({"/", "/timeline.js"})))
    middlewares.append(store_guard(source))
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/", index)
    app.router.add_get("/timeline.js", script)
    app.router.add_get("/api/rollouts", rollouts)
    app.router.add_get("/api/rollout", rollout)
    return app


async def serve(settings: Settings, host: str, port: int, allow_hosts: Iterable[str] = ()) -> int:
    import asyncio
    import signal

    from aiohttp import web

    from services.infra.api_auth import authenticator
    from services.infra.stack import stack_settings

    # Beyond the loopback, anyone who reaches the port could read the trail: the API routes need a token.
    check = None if is_loopback(host) else await authenticator(settings)
    async with stack_settings(settings) as resolved:
        # Opened on the first read, and again after the database went away: the page works while the
        # stack comes and goes (a banner says when it is down).
        trail = Trail(url=resolved.url_for("reader"))
        app = make_app(None, None, hosts=allowed_hosts(host, allow_hosts), check=check, trail=trail)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0][1]
            shown = f"[{host}]" if ":" in host else host
            typer.echo(f"rollbook ui on http://{shown}:{bound}/ (read-only; Ctrl-C stops)")
            if check is not None:
                typer.echo(
                    f"  beyond the loopback the page needs the API token: open http://{shown}:{bound}/#token=TOKEN"
                    " with TOKEN from `rollbook api-token`"
                )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()
            await trail.close()
            if check is not None:
                await check.close()
    return 0


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui_command(
        host: str = typer.Option(
            "127.0.0.1", "--host", help="Address to listen on (beyond the loopback the API token is needed)."
        ),
        port: int = typer.Option(8090, "--port", help="Port (0: pick a free one)."),
        allow_host: list[str] | None = typer.Option(  # noqa: B008 (typer's list option)
            None, "--allow-host", help="Another name the page is reached by (Host header); repeatable."
        ),
    ) -> None:
        """Serve a read-only web page of the rollouts: a timeline per rollout, and the state at any event."""
        import asyncio

        from services.cli.errors import check_range

        check_range("--port", port, 0, 65535, what=" (0: pick a free one)")
        raise typer.Exit(asyncio.run(serve(Settings.from_env(), host, port, allow_host or ())))
