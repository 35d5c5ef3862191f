"""`rollbook status [ns/name]`: CloneSets in the cluster with their counts, and each one's latest rollout
from the audit trail.

The counts come from the CloneSet status the executor writes (what `kubectl get cloneset` shows); the
rollout (id, revisions, strategy, partition step in force, outcome) from the SQL views. The cluster is the
one of ROLLBOOK_KUBECONFIG; the database is found as `rollbook history` finds it. When the database cannot
be reached the counts are still shown, with the reason the rollout column is empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.clonesets import read_clonesets
from services.cli.history import QueryError, clock, connect, parse_workload
from services.cli.terminal import console
from services.infra.settings import Settings
from services.kinds.cloneset.rules.names import REJECTED_CONDITION
from services.model.cloneset import desired_replicas

if TYPE_CHECKING:
    import asyncpg


async def list_clonesets(settings: Settings, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
    from services.infra.kube import api_client

    api = await api_client(settings)
    async with api:
        return await read_clonesets(api, namespace, name)


def rejection(cloneset: dict[str, Any]) -> str | None:
    """The message of the CloneSet's Rejected condition (set by rollbook's planner), if it is True."""
    for condition in (cloneset.get("status") or {}).get("conditions") or ():
        if condition.get("type") == REJECTED_CONDITION and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "invalid spec")
    return None


async def show_status(settings: Settings, workload: str | None) -> int:
    import asyncpg
    from rich.table import Table

    from services.infra import audit_queries

    namespace, name = parse_workload(workload) if workload else (None, None)
    clonesets = await list_clonesets(settings, namespace, name)
    rollouts: dict[tuple[str, str], asyncpg.Record | None] = {}
    trail_error = ""
    quarantined = 0
    try:
        async with connect(settings) as connection:
            for c in clonesets:
                key = (c["metadata"].get("namespace", "default"), c["metadata"]["name"])
                rollouts[key] = await audit_queries.current_rollout(connection, *key)
            quarantined = await audit_queries.quarantined_messages(connection)
    except (QueryError, OSError, asyncpg.PostgresError) as error:
        trail_error = str(error)
    if quarantined:
        console().print(
            f"[red]bus quarantine:[/] {quarantined} message(s) on event subjects with no matching stored "
            "event, never stored (SELECT * FROM bus_quarantine; docs/security-bus.md)"
        )
    if not clonesets:
        console().print("no CloneSets in the cluster")
        return 0
    table = Table(title_justify="left")
    for column in ("cloneset", "replicas", "updated", "ready", "updated ready", "latest rollout", "state"):
        table.add_column(column, overflow="fold")
    for c in clonesets:
        key = (c["metadata"].get("namespace", "default"), c["metadata"]["name"])
        status = c.get("status") or {}
        spec_replicas = desired_replicas(c)
        rollout = rollouts.get(key)
        if rollout is None:
            described, state = "-", ""
        else:
            described = (
                f"{rollout['rollout_id']} ({rollout['strategy_type']}) since {clock(rollout['started'])}"
            )
            state = rollout["outcome"]
            if rollout["outcome"] == "in progress" and rollout["partition"] is not None:
                state += f", partition {rollout['partition']}"
        if ((c.get("spec") or {}).get("updateStrategy") or {}).get("paused") is True:
            # Nothing rolls on until someone resumes it (`rollbook rollout resume`, or unset the field).
            state = "[yellow]paused[/]" + (f" ({state})" if state else "")
        rejected = rejection(c)
        if rejected:  # the planner acts on nothing until the spec is fixed: say so first
            state = f"[red]spec rejected:[/] {rejected}" + (f" ({state})" if state else "")
        table.add_row(
            f"{key[0]}/{key[1]}",
            f"{status.get('replicas', 0)}/{spec_replicas}",
            str(status.get("updatedReplicas", 0)),
            str(status.get("readyReplicas", 0)),
            str(status.get("updatedReadyReplicas", 0)),
            described,
            state,
        )
    console().print(table)
    if trail_error:
        console().print(f"[yellow]rollouts not shown:[/] {trail_error}")
    return 0


def register(application: typer.Typer) -> None:
    import asyncio

    @application.command("status")
    def status(
        workload: Annotated[str | None, typer.Argument(help="<namespace>/<cloneset> (default: all)")] = None,
        watch: Annotated[
            bool,
            typer.Option("-w", "--watch", help="Follow each CloneSet's rollout as a tree until it ends."),
        ] = False,
        timeout: Annotated[
            float | None, typer.Option(help="With -w: give up after this many seconds (exit 5).")
        ] = None,
    ) -> None:
        """CloneSets with replicas/updated/ready counts and their latest rollout from the audit trail.
        With -w: a live tree per CloneSet (`rollbook get -w`), exiting when every rollout ended: 0
        finished, 3 spec rejected, 4 failed or superseded, 5 timed out."""
        from services.cli.errors import check_range

        check_range("--timeout", timeout, 0, what=" seconds")
        if watch:
            from services.cli.watch import follow

            settings = Settings.from_env()
            raise typer.Exit(
                asyncio.run(follow(settings, workload, watch=True, timeout=timeout, interval=1.0))
            )
        raise typer.Exit(asyncio.run(show_status(Settings.from_env(), workload)))
