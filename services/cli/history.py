"""`rollbook history <namespace>/<cloneset>`: rollouts and pod actions of a workload, from the SQL views.

Reads Postgres only. With ROLLBOOK_DATABASE_URL set it uses that; otherwise the embedded Postgres of
ROLLBOOK_DATA_DIR: the running one if another rollbook process (``rollbook up``) holds it, else it is
started for the command and stopped afterwards. Never runs migrations: a read command must not change a
production schema (it says which command to run when the views are missing).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated

import asyncpg
import msgspec
import typer
from rich.console import Console
from rich.table import Table

from services.infra import audit_queries
from services.infra.database import asyncpg_url
from services.infra.embedded import EMBEDDED_DATABASE, EmbeddedError, resolved_settings
from services.infra.settings import Settings

console = Console()


class QueryError(RuntimeError):
    """The database cannot answer (missing views, no server); the message says what to do."""


def parse_workload(text: str) -> tuple[str, str]:
    """``ns/name`` -> (ns, name); a bare ``name`` means namespace ``default``."""
    namespace, _, name = text.rpartition("/")
    if not name or "/" in namespace:
        raise typer.BadParameter(f"expected <namespace>/<cloneset>, got {text!r}")
    return namespace or "default", name


def running_embedded_postgres(data_dir: Path) -> str | None:
    """The URL of the embedded Postgres another rollbook process runs on ``data_dir`` (its postmaster.pid
    names the port on line 4), or None when none is running."""
    pid_file = data_dir / "postgres" / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        import psutil

        if not psutil.pid_exists(pid):
            return None
    except ImportError:  # pragma: no cover - psutil is a dependency
        pass
    return f"postgresql://postgres@127.0.0.1:{port}/{EMBEDDED_DATABASE}"


@contextlib.asynccontextmanager
async def database_settings(settings: Settings) -> AsyncIterator[Settings]:
    """Settings whose database_url reaches the audit trail (see the module docstring)."""
    if settings.database_url:
        yield settings
        return
    running = running_embedded_postgres(settings.data_path)
    if running:
        yield msgspec.structs.replace(settings, database_url=running)
        return
    # Nothing running: start the embedded Postgres on the data dir for the length of the command. A
    # placeholder NATS URL keeps resolved_settings from starting a nats-server this command never uses.
    postgres_only = msgspec.structs.replace(settings, nats_url=settings.nats_url or "nats://unused:4222")
    try:
        async with resolved_settings(postgres_only, migrate=False) as resolved:
            yield resolved
    except EmbeddedError as error:
        raise QueryError(str(error)) from None


@contextlib.asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    async with database_settings(settings) as resolved:
        connection = await asyncpg.connect(asyncpg_url(resolved.database_url))
        try:
            missing = await connection.fetchval("SELECT to_regclass('pod_actions') IS NULL")
            if missing:
                raise QueryError(
                    "the audit views are missing from this database: run `alembic upgrade head`"
                    " (ROLLBOOK_DATABASE_URL set) or any `rollbook` service command once"
                )
            yield connection
        finally:
            await connection.close()


def clock(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%H:%M:%S.%f")[:-3] if moment else "-"


def short(revision: str | None, workload: str) -> str:
    """A revision name without its workload prefix (sample-data-66f47ff445 -> 66f47ff445)."""
    if not revision:
        return "-"
    return revision[len(workload) + 1 :] if revision.startswith(workload + "-") else revision


def seconds(duration: timedelta | None) -> str:
    return f"{duration.total_seconds():.2f}s" if duration is not None else "-"


async def show_history(settings: Settings, namespace: str, name: str, rollout: str | None) -> int:
    async with connect(settings) as connection:
        rollouts = await audit_queries.rollouts(connection, namespace, name)
        actions = await audit_queries.pod_actions(connection, namespace, name)
    if not rollouts and not actions:
        console.print(f"no rollouts or pod actions recorded for {namespace}/{name}")
        return 1
    table = Table(title=f"rollouts of {namespace}/{name}", title_justify="left")
    for column in ("from → to revision", "strategy", "started", "took", "outcome"):
        table.add_column(column, overflow="fold")
    for r in rollouts:
        strategy = r["strategy_type"] + (" (observed)" if r["driven_by"] == "observed" else "")  # shadow mode
        table.add_row(
            f"{short(r['from_revision'], name)} → {short(r['to_revision'], name)}", strategy,
            clock(r["started"]), seconds(r["duration"]), r["outcome"],
        )  # fmt: skip
    console.print(table)
    table = Table(
        title="pod actions (an in-place update spans markNotReady … markReady)", title_justify="left"
    )
    for column in ("revision", "pod", "action", "requested", "took", "outcome"):
        table.add_column(column, overflow="fold", no_wrap=column in ("pod", "action"))
    for a in actions:
        if rollout and a["rollout_id"] != rollout:
            continue
        outcome = a["outcome"] + (f": {a['reason']}" if a["reason"] else "")
        revision = short((a["rollout_id"] or "").rpartition("@")[2], name)
        table.add_row(revision, a["pod"], a["action"], clock(a["requested"]), seconds(a["duration"]), outcome)
    console.print(table)
    return 0


def register(application: typer.Typer) -> None:
    @application.command("history")
    def history(
        workload: Annotated[str, typer.Argument(help="<namespace>/<cloneset>")],
        rollout: Annotated[
            str | None, typer.Option(help="Only this rollout's pod actions (<ns>/<name>@<revision>).")
        ] = None,
    ) -> None:
        """The rollouts and pod actions of a CloneSet, from the audit trail in SQL (docs/sql.md)."""
        import asyncio

        namespace, name = parse_workload(workload)
        try:
            code = asyncio.run(show_history(Settings.from_env(), namespace, name, rollout))
        except (QueryError, OSError, asyncpg.PostgresError) as error:
            console.print(f"[red]rollbook history:[/] {error}")
            raise typer.Exit(1) from None
        raise typer.Exit(code)
