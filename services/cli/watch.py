"""`rollbook get NS/NAME [-w]` and `rollbook status -w`: a CloneSet as a tree (revisions, then pods), the
partition step, maxUnavailable in use against the allowed number, and why the rollout waits; with -w it
follows the rollout live and ends by itself when the rollout ends, the exit code saying how
(services/cli/rollout_view.py, docs/cli.md).

The cluster (ROLLBOOK_KUBECONFIG) gives the CloneSet and its pods; the audit trail (found as every command
finds the stack) gives the rollout, its pod actions and partition steps. Without a reachable database the
tree is still shown, without batches and action times.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from services.cli.rollout_view import (
    Outcome,
    PodAction,
    RolloutView,
    outcome,
    rollout_state,
    unavailable_text,
    waiting_reasons,
)
from services.cli.terminal import console
from services.infra.settings import Settings

if TYPE_CHECKING:
    import asyncpg
    from kubernetes_asyncio import client
    from rich.console import RenderableType

    from services.kinds.base import Kind

OUTCOME_TEXT = {
    Outcome.FINISHED: "[green]finished[/]",
    Outcome.REJECTED: "[red]spec rejected[/]",
    Outcome.FAILED: "[red]rollout failed or superseded[/]",
    Outcome.TIMED_OUT: "[yellow]timed out[/]",
}


class Sources:
    """The cluster and, when reachable, the audit trail, read once per refresh."""

    def __init__(self, api: client.ApiClient, connection: asyncpg.Connection | None, trail_error: str):
        self.api = api
        self.connection = connection
        self.trail_error = trail_error

    async def clonesets(self, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
        from services.cli.clonesets import read_clonesets

        return await read_clonesets(self.api, namespace, name)

    async def view(self, cloneset: dict[str, Any], now: datetime) -> RolloutView:
        from kubernetes_asyncio import client

        from services.infra.kube import raw_json
        from services.kinds.cloneset.rules.status import label_selector_string

        metadata = cloneset["metadata"]
        namespace, name = metadata.get("namespace", "default"), metadata["name"]
        selector = label_selector_string((cloneset.get("spec") or {}).get("selector") or {})
        response = await client.CoreV1Api(self.api).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        pods = (await raw_json(response)).get("items") or []
        actions, rollout_id, rollout_outcome = await self.trail(namespace, name)
        step_max_unavailable = None
        if self.connection is not None and rollout_id is not None:
            from services.infra import audit_queries

            step_max_unavailable = await audit_queries.latest_max_unavailable(self.connection, rollout_id)
        return RolloutView.read(
            cloneset, pods, actions, step_max_unavailable, rollout_id, rollout_outcome, now
        )

    async def trail(
        self, namespace: str, name: str, kind: str | None = None
    ) -> tuple[list[PodAction], str | None, str | None]:
        """The workload's pod actions, its latest rollout and that rollout's outcome, from the audit trail
        (nothing when it cannot be reached)."""
        from services.infra import audit_queries

        if self.connection is None:
            return [], None, None
        rollout = await audit_queries.current_rollout(self.connection, namespace, name, kind)
        actions = [
            PodAction(
                pod=row["pod"],
                action=row["action"],
                rollout_id=row["rollout_id"],
                requested=row["requested"],
                finished=row["finished"],
                outcome=row["outcome"],
                in_place=row["update_kind"] == "in place" or row["action"].endswith("InPlace"),
            )
            for row in await audit_queries.pod_actions(self.connection, namespace, name, kind)
        ]
        if rollout is None:
            return actions, None, None
        return actions, rollout["rollout_id"], rollout["outcome"]

    async def recorded(self, kind: Kind, namespace: str, name: str, now: datetime) -> RolloutView | None:
        """A Deployment or StatefulSet rollbook records, with its revision objects (ReplicaSets,
        ControllerRevisions) and pods from the cluster; None when the cluster has no such workload."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        from services.infra.kube import raw_json
        from services.kinds.base import owned_by
        from services.kinds.cloneset.rules.status import label_selector_string

        apps = client.AppsV1Api(self.api)
        try:
            response = await getattr(apps, f"read_namespaced_{_snake(kind.name)}")(
                name, namespace, _preload_content=False
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        workload = await raw_json(response)
        selector = label_selector_string((workload.get("spec") or {}).get("selector") or {})
        revision_kind = next(w.kind for w in kind.watches if w.kind != kind.name)
        listed = await getattr(apps, f"list_namespaced_{_snake(revision_kind)}")(
            namespace, label_selector=selector, _preload_content=False
        )
        revisions = [
            r for r in (await raw_json(listed)).get("items") or [] if owned_by(r, kind.name, "apps") == name
        ]
        listed = await client.CoreV1Api(self.api).list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        assert kind.route is not None
        pods = [
            p
            for p in (await raw_json(listed)).get("items") or []
            if kind.route("Pod", p) == (namespace, name)
        ]
        actions, rollout_id, rollout_outcome = await self.trail(namespace, name, kind.name)
        return RolloutView.read_recorded(
            kind, workload, revisions, pods, actions, rollout_id, rollout_outcome, now
        )


def _snake(kind: str) -> str:
    """``StatefulSet`` -> ``stateful_set``: the kubernetes-asyncio method names' spelling of a kind."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")


@contextlib.asynccontextmanager
async def sources(settings: Settings) -> AsyncIterator[Sources]:
    import asyncpg

    from services.cli.history import QueryError, connect
    from services.infra.kube import api_client

    api = await api_client(settings)
    async with api, contextlib.AsyncExitStack() as stack:
        connection: asyncpg.Connection | None = None
        trail_error = ""
        try:
            connection = await stack.enter_async_context(connect(settings))
        except (QueryError, OSError, RuntimeError, asyncpg.PostgresError) as error:
            trail_error = str(error)
        yield Sources(api, connection, trail_error)


def render(view: RolloutView, result: Outcome | None) -> RenderableType:
    from rich.tree import Tree

    head = (
        f"[bold]{view.kind} {view.namespace}/{view.name}[/]  replicas {view.replicas}"
        f"  updated {view.updated}/{view.target_updated}  available"
        f" {sum(1 for p in view.pods if p.available)}/{view.replicas}"
        f"  generation {view.generation}"
        + ("" if view.observed_generation >= view.generation else f" (status at {view.observed_generation})")
    )
    tree = Tree(head)
    if view.rejected:  # the planner acts on nothing until the spec is fixed: nothing else to say
        tree.add(f"[red]rejected:[/] {view.rejected}")
    else:
        tree.add(
            f"partition {view.partition} (pods kept at old revisions)"
            f"  maxUnavailable {unavailable_text(view)}" + ("  [yellow]paused[/]" if view.paused else "")
        )
    if view.rollout_id:
        tree.add(f"rollout {view.rollout_id}: {rollout_state(view, result)}")
    revisions = sorted(
        {p.revision for p in view.pods},
        key=lambda r: (r != view.update_revision, r != view.current_revision, r),
    )
    for revision in revisions:
        role = (
            " (update)"
            if revision == view.update_revision
            else (" (current)" if revision == view.current_revision else "")
        )
        branch = tree.add(f"revision {revision or '-'}{role}")
        for pod in (p for p in view.pods if p.revision == revision):
            branch.add(_pod_line(pod))
    if result is not None:
        tree.add(f"{OUTCOME_TEXT[result]} (exit {int(result)})")
    else:
        for reason in waiting_reasons(view):
            tree.add(f"[yellow]waiting:[/] {reason}")
    return tree


def progress_line(view: RolloutView) -> str:
    """One plain line of where the rollout stands and why it waits (what -w logs when not on a terminal)."""
    reasons = "; ".join(waiting_reasons(view)) or "progressing"
    return (
        f"{view.namespace}/{view.name}: updated {view.updated}/{view.target_updated},"
        f" available {sum(1 for p in view.pods if p.available)}/{view.replicas},"
        f" maxUnavailable {unavailable_text(view)}: {reasons}"
    )


def _pod_line(pod: Any) -> str:
    state = (
        "[green]ready[/]"
        if pod.available
        else ("[red]terminating[/]" if pod.terminating else "[yellow]not ready[/]")
    )
    parts = [pod.name, state]
    if pod.how:
        parts.append(pod.how)
    if pod.batch is not None:
        parts.append(f"batch {pod.batch}")
    parts.append(f"restarts {pod.restarts}")
    if pod.out_of_service_seconds is not None:
        parts.append(f"out of service {pod.out_of_service_seconds:.1f}s")
    if pod.lifecycle:
        parts.append(f"lifecycle {pod.lifecycle}")
    return "  ".join(parts)


async def follow(
    settings: Settings,
    workload: str | None,
    *,
    watch: bool,
    timeout: float | None,  # noqa: ASYNC109 - the deadline is checked between refreshes
    interval: float,
) -> int:
    """Show the tree(s); with ``watch``, refresh every ``interval`` s until every rollout ended or
    ``timeout`` passed. Returns the exit code: the worst outcome (rollout_view.Outcome)."""
    import asyncio
    import time

    from rich.console import Group
    from rich.live import Live

    from services.cli.history import parse_workload, recorded_target

    kind, workload = recorded_target(workload) if workload else (None, workload)
    namespace, name = parse_workload(workload) if workload else (None, None)
    deadline = None if timeout is None else time.monotonic() + timeout
    terminal = console()
    async with sources(settings) as source:
        live = Live(console=terminal, auto_refresh=False) if watch and terminal.is_terminal else None
        last_text = ""
        with live or contextlib.nullcontext():
            while True:
                now = datetime.now(UTC)
                if kind is not None and namespace is not None and name is not None:
                    found = await source.recorded(kind, namespace, name, now)
                    if found is None:
                        from services.cli.errors import CommandError

                        raise CommandError(f"no {kind.name} {namespace}/{name} in the cluster")
                    views = [found]
                else:
                    views = [await source.view(c, now) for c in await source.clonesets(namespace, name)]
                results = [outcome(v) for v in views]
                timed_out = deadline is not None and time.monotonic() > deadline
                if timed_out:
                    results = [r if r is not None else Outcome.TIMED_OUT for r in results]
                over = all(r is not None for r in results)
                shown = Group(
                    *(render(v, r if watch else None) for v, r in zip(views, results, strict=True)),
                    *([f"[yellow]rollouts not shown:[/] {source.trail_error}"] if source.trail_error else []),
                )
                if live is not None:
                    live.update(shown, refresh=True)
                elif not watch or over:
                    terminal.print(shown)
                else:  # a log (CI): one line per workload whenever its progress or reason changes
                    text = "\n".join(progress_line(v) for v in views)
                    if text != last_text:
                        terminal.print(text, markup=False, highlight=False, soft_wrap=True)
                        last_text = text
                if not views:
                    terminal.print("no CloneSets in the cluster")
                    return 0
                if not watch:
                    return 0
                if over:
                    return max(int(r) for r in results if r is not None)
                await asyncio.sleep(interval)


def register(app: typer.Typer) -> None:
    @app.command("get")
    def get_command(
        workload: str = typer.Argument(
            ...,
            help="<namespace>/<cloneset>, or <kind>/<namespace>/<name> of a recorded Deployment or"
            " StatefulSet",
        ),
        watch: bool = typer.Option(False, "-w", "--watch", help="Follow the rollout until it ends."),
        timeout: float = typer.Option(
            None, "--timeout", help="With -w: give up after this many seconds (exit 5)."
        ),
        interval: float = typer.Option(1.0, "--interval", help="Seconds between refreshes."),
    ) -> None:
        """A CloneSet (or a recorded Deployment or StatefulSet) as a tree: revisions, pods, partition,
        maxUnavailable and why it waits. With -w it follows the rollout and exits when it ends: 0 finished,
        3 spec rejected, 4 failed, superseded or past its progress deadline, 5 timed out."""
        import asyncio

        from services.cli.errors import check_range

        check_range("--timeout", timeout, 0, what=" seconds")
        check_range("--interval", interval, 0.05, what=" seconds")
        raise typer.Exit(
            asyncio.run(
                follow(Settings.from_env(), workload, watch=watch, timeout=timeout, interval=interval)
            )
        )
