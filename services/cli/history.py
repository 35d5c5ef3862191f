"""`rollbook history <namespace>/<cloneset>`: rollouts and pod actions of a workload, from the SQL views.

Reads Postgres only. With ROLLBOOK_DATABASE_URL set it uses that; otherwise the embedded Postgres of
ROLLBOOK_DATA_DIR: the running one if another rollbook process (``rollbook up``) holds it, else it is
started for the command and stopped afterwards. Never runs migrations: a read command must not change a
production schema (it says which command to run when the views are missing).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.terminal import console, print_table
from services.infra.settings import Settings

if TYPE_CHECKING:
    import asyncpg

    from services.kinds.base import Kind


class QueryError(RuntimeError):
    """The database cannot answer (missing views, no server); the message says what to do."""


def parse_workload(text: str) -> tuple[str, str]:
    """``ns/name`` -> (ns, name); a bare ``name`` means namespace ``default``."""
    namespace, _, name = text.rpartition("/")
    if not name or "/" in namespace:
        raise typer.BadParameter(f"expected <namespace>/<cloneset>, got {text!r}")
    return namespace or "default", name


def recorded_target(workload: str) -> tuple[Kind | None, str]:
    """``<kind>/<namespace>/<name>`` of a recorded kind (any case) -> (kind, ``<namespace>/<name>``);
    anything else names a CloneSet: (None, ``workload``)."""
    from services.kinds.registry import RECORDED

    if workload.count("/") != 2:
        return None, workload
    first, _, rest = workload.partition("/")
    kind = next((k for k in RECORDED if k.name.lower() == first.lower()), None)
    if kind is None:
        raise typer.BadParameter(
            f"{first!r} is not a kind rollbook records ({', '.join(k.name for k in RECORDED)}): expected"
            " <namespace>/<cloneset> or <kind>/<namespace>/<name>"
        )
    return kind, rest


@contextlib.asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the audit trail's database, found as every command finds the stack
    (services/infra/stack.py); started for the command when nothing runs."""
    from services.infra import audit_queries
    from services.infra.embedded import EmbeddedError
    from services.infra.stack import connect_database, stack_settings

    try:
        async with stack_settings(settings) as resolved:
            connection = await connect_database(resolved.url_for("reader"))
            try:
                if await audit_queries.view_missing(connection, "pod_actions"):
                    raise QueryError(
                        "the audit views are missing from this database: run `rollbook db upgrade`"
                    )
                yield connection
            finally:
                await connection.close()
    except EmbeddedError as error:
        raise QueryError(str(error)) from None


def clock(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%H:%M:%S.%f")[:-3] if moment else "-"


def short(revision: str | None, workload: str) -> str:
    """A revision name without its workload prefix (sample-data-66f47ff445 -> 66f47ff445)."""
    if not revision:
        return "-"
    return revision[len(workload) + 1 :] if revision.startswith(workload + "-") else revision


def seconds(duration: timedelta | None) -> str:
    return f"{duration.total_seconds():.2f}s" if duration is not None else "-"


def sequence_of(rollout_id: str | None) -> str:
    """A rollout's number within its workload (``...@<revision>#<n>`` -> ``n``)."""
    return (rollout_id or "").rpartition("#")[2] or "-"


def resolve_rollout(recorded: list[str], rollout: str) -> str:
    """The rollout ``--rollout`` names: a full id as given; an id without its ``#<n>`` (as printed before
    rollouts were numbered) when exactly one rollout went to that revision, refused when several did."""
    from services.cli.errors import CommandError

    if rollout in recorded or "#" in rollout:
        return rollout
    matches = [r for r in recorded if r.rpartition("#")[0] == rollout]
    if len(matches) > 1:
        raise CommandError(
            f"{rollout} names {len(matches)} rollouts ({', '.join(matches)}): give one of them in full"
        )
    return matches[0] if matches else rollout


async def show_history(
    settings: Settings, namespace: str, name: str, rollout: str | None, kind: str | None = None
) -> int:
    from services.infra import audit_queries

    async with connect(settings) as connection:
        rollouts = await audit_queries.rollouts(connection, namespace, name, kind)
        actions = await audit_queries.pod_actions(connection, namespace, name, kind)
        archived = await audit_queries.has_archived_events(connection, namespace, name, kind)
    # Archived events are in files only: say so, or the history would look complete and be short.
    archive_note = (
        f"earlier events of {namespace}/{name} were archived and are not shown:"
        f" `rollbook replay {namespace}/{name} --archive DIR` reads them"
        if archived
        else None
    )
    if not rollouts and not actions:
        console().print(f"no rollouts or pod actions recorded for {namespace}/{name}")
        if archive_note:
            console().print(archive_note)
        return 1
    if rollout is not None:
        rollout = resolve_rollout([r["rollout_id"] for r in rollouts], rollout)
    print_history(namespace, name, rollouts, actions, rollout)
    if archive_note:
        console().print(archive_note)
    return 0


def print_history(
    namespace: str,
    name: str,
    rollouts: Sequence[Mapping[str, Any]],
    actions: Sequence[Mapping[str, Any]],
    rollout: str | None,
) -> None:
    """The two tables of ``rollbook history``: the workload's rollouts, and its pod actions (of
    ``rollout`` only, when given)."""
    rows = []
    for r in rollouts:
        strategy = r["strategy_type"] + (" (observed)" if r["driven_by"] == "observed" else "")  # shadow mode
        rows.append([
            sequence_of(r["rollout_id"]),
            f"{short(r['from_revision'], name)} → {short(r['to_revision'], name)}", strategy,
            clock(r["started"]), seconds(r["duration"]), r["outcome"],
        ])  # fmt: skip
    columns = ("#", "from → to revision", "strategy", "started", "took", "outcome")
    print_table(f"rollouts of {namespace}/{name}", columns, rows)
    rows = []
    for a in actions:
        if rollout and a["rollout_id"] != rollout:
            continue
        outcome = a["outcome"] + (f": {a['reason']}" if a["reason"] else "")
        revision = short((a["rollout_id"] or "").rpartition("@")[2], name)  # <revision>#<n>
        rows.append([revision, a["pod"], a["action"], clock(a["requested"]), seconds(a["duration"]), outcome])
    print_table(
        "pod actions (an in-place update spans its not-ready mark … markReady)",
        ("revision", "pod", "action", "requested", "took", "outcome"),
        rows,
        no_wrap=("pod", "action"),
    )


def register(application: typer.Typer) -> None:
    @application.command("history")
    def history(
        workload: Annotated[
            str,
            typer.Argument(
                help="<namespace>/<name> (a workload of any kind of that name), or <kind>/<namespace>/<name>"
            ),
        ],
        rollout: Annotated[
            str | None,
            typer.Option(help="Only this rollout's pod actions (<ns>/<name>@<revision>#<n>)."),
        ] = None,
    ) -> None:
        """The rollouts and pod actions of a workload (a CloneSet, or a Deployment or StatefulSet rollbook
        records), from the audit trail in SQL (docs/sql.md)."""
        import asyncio

        kind, workload = recorded_target(workload)
        namespace, name = parse_workload(workload)
        raise typer.Exit(
            asyncio.run(
                show_history(Settings.from_env(), namespace, name, rollout, kind.name if kind else None)
            )
        )
