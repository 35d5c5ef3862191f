"""`rollbook demo`: the whole system on one machine, in under a minute, with nothing running beforehand.

Steps: embedded Postgres and NATS (a fresh data dir, ``<ROLLBOOK_DATA_DIR>/demo``) → simcluster in this
process (a kubelet slow enough to watch, fast enough to finish) → the four services as child processes,
exactly as ``rollbook up`` runs them → the seed's CloneSets ``sample`` and ``sample-data`` applied unchanged
(namespace ``ops`` created first) → ``sample`` scaled 5 → 6 → both moved to a new image in place
(InPlaceIfPossible, ``partition: 2``, then ``partition: 0``, grace period 2 s) with a progress bar per
rollout → the audit summary read back from SQL (the views of docs/sql.md), with the two checks
(maxUnavailable never exceeded, one terminal event per action) → everything stopped (services by SIGTERM,
simcluster, NATS, Postgres). Any step that does not finish in time fails the demo with the step's name,
its last observed state and the tail of each service's log.

With ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL set, the demo uses those servers instead, in a database and
JetStream stream of its own (``rollbook_demo_<suffix>``), which it keeps for querying afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import logging
import os
import shlex
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import typer

from services.cli.apply import apply_documents, load_documents
from services.cli.runtime import run_command
from services.cli.services import SERVICES
from services.cli.terminal import console, invocation
from services.infra.settings import Settings
from services.model.cloneset import desired_replicas

if TYPE_CHECKING:  # imported where used, so that `rollbook --help` does not pay for them
    from kubernetes_asyncio import client

    from services.infra.supervisor import Supervisor
    from services.simcluster import Timing

GROUP, VERSION, PLURAL = "apps.kruise.io", "v1alpha1", "clonesets"
NEW_IMAGE = "nginx:mainline"
GRACE_SECONDS = 2
SCALED_REPLICAS = 6


# A kubelet a little faster than Timing.realistic(): every step is visible, the demo stays under a minute.
def demo_timing() -> Timing:
    from services.simcluster import Timing

    return Timing(
        schedule=0.05,
        pull_cold=0.8,
        pull_cached=0.3,
        start=0.3,
        ready=0.5,
        terminate=0.5,
        pvc_bind=0.3,
        jitter=0.2,
    )


SERVICE_READY_TIMEOUT = 45.0
STEP_TIMEOUT = 40.0
# The auditor signs a checkpoint this often while the log moves (default 60 s), so the demo's receipt
# has one to be proven against moments after the last rollout.
DEMO_CHECKPOINT_INTERVAL = 1.0
STOP_TIMEOUT = 20.0
MANIFESTS = ("cloneset-sample.yaml", "cloneset-sample-data.yaml")
OPS_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}}

# The directory holding the `services` package: the children import it from there even when the demo was
# started from a checkout that is not installed.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class DemoFailed(RuntimeError):
    """A step did not finish; the message says which and what was last seen."""


def manifest_text(name: str) -> str:
    """A seed manifest shipped as package data (so an installed `rollbook demo` finds it)."""
    return resources.files("services.cli").joinpath("demo_manifests", name).read_text()


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# --- the services ------------------------------------------------------------------------------------


# --- watching CloneSets ------------------------------------------------------------------------------

Done = Callable[[dict[str, Any]], bool]


def ready_at(replicas: int) -> Done:
    def check(cloneset: dict[str, Any]) -> bool:
        status = cloneset.get("status") or {}
        return bool(
            status.get("observedGeneration") == cloneset["metadata"].get("generation")
            and status.get("replicas") == replicas
            and status.get("readyReplicas") == replicas
        )

    return check


def updated_at(partition: int) -> Done:
    """Everything but ``partition`` pods updated and ready, every pod ready, the status caught up."""

    def check(cloneset: dict[str, Any]) -> bool:
        replicas = desired_replicas(cloneset)
        status = cloneset.get("status") or {}
        expected = replicas - partition
        return bool(
            status.get("observedGeneration") == cloneset["metadata"].get("generation")
            and status.get("updatedReplicas") == expected
            and status.get("updatedReadyReplicas") == expected
            and status.get("readyReplicas") == replicas
            and status.get("replicas") == replicas
            and (partition > 0 or status.get("currentRevision") == status.get("updateRevision"))
        )

    return check


async def follow(
    custom: client.CustomObjectsApi,
    services: Supervisor,
    step: str,
    targets: dict[Workload, Done],
    *,
    count: str = "ready",
    timeout: float = STEP_TIMEOUT,  # noqa: ASYNC109 - the deadline is checked between polls
) -> None:
    """A progress bar per CloneSet (``count``: which status count fills it) until each is done."""
    import asyncio

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("  {task.description:<24}"),
        BarColumn(bar_width=28),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    deadline = time.monotonic() + timeout
    last: dict[Workload, dict[str, Any]] = {}
    with Progress(*columns, console=console(), transient=False) as progress:
        tasks = {w: progress.add_task(str(w), total=None, counts="") for w in targets}
        pending = set(targets)
        while pending:
            for workload in list(pending):
                cloneset = await custom.get_namespaced_custom_object(
                    GROUP, VERSION, workload.namespace, PLURAL, workload.name
                )
                last[workload] = cloneset
                replicas = desired_replicas(cloneset)
                status = cloneset.get("status") or {}
                counts = {
                    k: int(status.get(k) or 0) for k in ("updatedReplicas", "readyReplicas", "replicas")
                }
                counts["updatedReadyReplicas"] = int(status.get("updatedReadyReplicas") or 0)
                filled = counts["updatedReadyReplicas"] if count == "updated" else counts["readyReplicas"]
                progress.update(
                    tasks[workload],
                    total=replicas,
                    completed=min(filled, replicas),
                    counts=f"updated {counts['updatedReplicas']}/{replicas}  "
                    f"ready {counts['readyReplicas']}/{replicas}  pods {counts['replicas']}",
                )
                if targets[workload](cloneset):
                    pending.discard(workload)
            if pending:
                if services.dead():
                    raise DemoFailed(f"{step}: service(s) {', '.join(services.dead())} exited")
                if time.monotonic() > deadline:
                    states = "; ".join(f"{w}: status {last[w].get('status')}" for w in pending)
                    raise DemoFailed(f"{step}: not done after {timeout:.0f}s ({states})")
                await asyncio.sleep(0.2)


# --- the demo ----------------------------------------------------------------------------------------


@dataclass
class Clock:
    started: float = field(default_factory=time.monotonic)
    step_started: float = field(default_factory=time.monotonic)

    def step(self, text: str) -> None:
        now = time.monotonic()
        console().print(
            f"[green]✓[/] {text} [dim]({now - self.step_started:.1f}s, total {now - self.started:.1f}s)[/]"
        )
        self.step_started = now


async def _demo(
    settings: Settings, clock: Clock, run_dir: Path, own_database: bool, shared_nats: bool
) -> int:
    import asyncpg
    from kubernetes_asyncio import client

    from services.infra.kube import api_client
    from services.simcluster import SimCluster, SimConfig

    clock.step("Postgres and NATS running, migrations applied")
    if own_database:
        settings = await _fresh_database(settings)
    from services.infra.supervisor import ServiceFailed, Supervisor

    pythonpath = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    services = Supervisor(
        settings, run_dir / "logs", env={"PYTHONPATH": pythonpath}, stop_timeout=STOP_TIMEOUT
    )
    sim_config = SimConfig(timing=demo_timing(), kubeconfig_path=settings.kubeconfig, seed=7)
    async with SimCluster(sim_config) as sim, services:
        clock.step(f"simcluster listening on {sim.url}")
        try:
            await services.start(*SERVICES, ready_timeout=SERVICE_READY_TIMEOUT)
            clock.step(f"watcher, planner, executor and auditor ready (logs in {services.log_dir})")
            api = await api_client(settings)
            async with api:
                await _scenario(api, services, clock)
                rollouts = await _summary(settings, clock)
                await _receipt(settings, str(rollouts[-1]["rollout_id"]), run_dir, clock)
        except (DemoFailed, ServiceFailed, client.ApiException, asyncpg.PostgresError, OSError) as failure:
            known = isinstance(failure, DemoFailed | ServiceFailed)
            reason = failure if known else f"{type(failure).__name__}: {failure}"
            console().print(f"[bold red]rollbook demo failed:[/] {reason}")
            console().print(services.tails(), markup=False, highlight=False)
            return 1
        finally:
            codes = await services.stop_all()
            if codes:
                clean = all(code == 0 for code in codes.values())
                text = ", ".join(f"{s} {c}" for s, c in codes.items())
                clock.step(f"services stopped ({'clean exit' if clean else 'exit codes'}: {text})")
            if shared_nats:
                await _delete_stream(settings)
    clock.step("simcluster stopped")
    return 0


async def _delete_stream(settings: Settings) -> None:
    """The demo's JetStream stream on a shared NATS server is not worth keeping (the trail is in SQL)."""
    from services.infra.bus import Bus

    bus = await Bus.connect(settings, name="rollbook-demo-cleanup")
    try:
        with contextlib.suppress(Exception):
            await bus.js.delete_stream(settings.stream_name)
    finally:
        await bus.close()


async def _scenario(api: client.ApiClient, services: Supervisor, clock: Clock) -> None:
    from kubernetes_asyncio import client

    custom = client.CustomObjectsApi(api)
    sample, sample_data = Workload("default", "sample"), Workload("ops", "sample-data")
    await apply_documents(api, [OPS_NAMESPACE])
    documents = [d for name in MANIFESTS for d in load_documents(manifest_text(name), name)]
    for line in await apply_documents(api, documents):
        console().print(f"  {line}")
    console().print("[bold]Create[/]: the seed's CloneSets, unchanged (sample-data with a PVC per pod)")
    await follow(custom, services, "create", {sample: ready_at(5), sample_data: ready_at(5)})
    clock.step("10 pods and 5 PVCs created and ready")

    console().print(f"[bold]Scale[/]: sample 5 → {SCALED_REPLICAS}")
    await _merge_patch(custom, sample, {"spec": {"replicas": SCALED_REPLICAS}})
    await follow(custom, services, "scale", {sample: ready_at(SCALED_REPLICAS)})
    clock.step(f"sample scaled to {SCALED_REPLICAS}")

    console().print(
        f"[bold]Rollout[/]: image {NEW_IMAGE} in place, partition 2 (keep 2 pods at the old revision),"
        f" maxUnavailable 20%, grace period {GRACE_SECONDS}s"
    )
    for workload in (sample, sample_data):
        current = await custom.get_namespaced_custom_object(
            GROUP, VERSION, workload.namespace, PLURAL, workload.name
        )
        containers = copy.deepcopy(current["spec"]["template"]["spec"]["containers"])
        containers[0]["image"] = NEW_IMAGE
        strategy = {
            "type": "InPlaceIfPossible",
            "partition": 2,
            "maxUnavailable": "20%",
            "maxSurge": 0,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": GRACE_SECONDS},
        }
        patch = {"spec": {"updateStrategy": strategy, "template": {"spec": {"containers": containers}}}}
        await _merge_patch(custom, workload, patch)
    await follow(
        custom, services, "rollout partition 2", {sample: updated_at(2), sample_data: updated_at(2)},
        count="updated",
    )  # fmt: skip
    clock.step("partition 2 reached: all but 2 pods of each CloneSet on the new image")

    console().print("[bold]Rollout[/]: partition 0 (the rest)")
    for workload in (sample, sample_data):
        await _merge_patch(custom, workload, {"spec": {"updateStrategy": {"partition": 0}}})
    await follow(
        custom, services, "rollout partition 0", {sample: updated_at(0), sample_data: updated_at(0)},
        count="updated",
    )  # fmt: skip
    clock.step("rollouts complete: every pod updated in place")


async def _merge_patch(custom: client.CustomObjectsApi, workload: Workload, patch: dict[str, Any]) -> None:
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, workload.namespace, PLURAL, workload.name, patch,
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )  # fmt: skip


async def _summary(settings: Settings, clock: Clock) -> list[Any]:
    """Wait until every rollout finished and every action has its outcome; print them; return the rollouts."""
    import asyncio

    from rich.table import Table

    from services.infra import audit_queries
    from services.infra.stack import connect_database

    connection = await connect_database(settings.url_for("reader"))  # the summary reads as the reader
    try:
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            rollouts = await audit_queries.rollouts(connection)
            pending = await audit_queries.actions_without_one_terminal(connection)
            if rollouts and all(r["finished"] is not None for r in rollouts) and not pending:
                break
            if time.monotonic() > deadline:
                raise DemoFailed(
                    f"audit trail incomplete after {STEP_TIMEOUT:.0f}s: rollouts {list(map(dict, rollouts))},"
                    f" actions without exactly one outcome {list(map(dict, pending))}"
                )
            await asyncio.sleep(0.2)
        in_place = await audit_queries.in_place_updates(connection)
        exceeded = await audit_queries.max_unavailable_exceeded(connection)
        events = await audit_queries.event_count(connection)
    finally:
        await connection.close()
    clock.step(f"audit trail read back from SQL ({events} events)")

    table = Table(title="rollouts (SELECT … FROM rollouts)", title_justify="left")
    for column in ("workload", "from → to revision", "strategy", "took", "outcome"):
        table.add_column(column, overflow="fold")
    for r in rollouts:
        table.add_row(
            f"{r['namespace']}/{r['workload']}",
            f"{_short(r['from_revision'], r['workload'])} → {_short(r['to_revision'], r['workload'])}",
            str(r["strategy_type"]),
            f"{(r['finished'] - r['started']).total_seconds():.1f}s",
            str(r["outcome"]),
        )
    console().print(table)

    pods = Table(
        title="pods updated in place (SELECT … FROM pod_actions WHERE in_place)", title_justify="left"
    )
    for column in ("workload", "pod", "requested", "out of service", "outcome"):
        pods.add_column(column, no_wrap=column == "pod")
    for p in in_place:
        pods.add_row(
            p["rollout_id"].split("@")[0],
            p["pod"],
            p["requested"].astimezone().strftime("%H:%M:%S.%f")[:-3],
            f"{p['duration'].total_seconds():.2f}s" if p["duration"] is not None else "-",
            str(p["outcome"]),
        )
    console().print(pods)
    check = "[green]never exceeded[/]" if not exceeded else f"[red]EXCEEDED {list(map(dict, exceeded))}[/]"
    console().print(f"maxUnavailable during every rollout: {check}")
    console().print("every requested pod action has exactly one terminal event: [green]yes[/]")
    if exceeded:
        raise DemoFailed("the audit trail shows maxUnavailable exceeded")
    return list(rollouts)


async def _receipt(settings: Settings, rollout_id: str, run_dir: Path, clock: Clock) -> None:
    """Export the last rollout's receipt once a signed checkpoint covers the whole trail, and check it as
    a third party would: from the file alone, with no database (docs/audit.md, "Receipts")."""
    import asyncio

    from services.infra.stack import open_store
    from services.infra.transparency import (
        TransparencyError,
        export_receipt,
        newest_checkpoint,
        trusted_verifiers,
    )
    from services.model.receipt import ReceiptError, canonical_json, verify_receipt

    trusted = trusted_verifiers(settings)
    if not trusted:
        raise DemoFailed(f"no public key to trust: the auditor's signing key is missing from {run_dir}")
    store = await open_store(settings.url_for("reader"))
    try:
        head = await store.head_position()
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:  # the auditor signs every DEMO_CHECKPOINT_INTERVAL seconds while the log moves
            try:
                covered = (await newest_checkpoint(store, trusted)).body.global_position
            except TransparencyError:
                covered = 0
            if covered >= head:
                break
            if time.monotonic() > deadline:
                raise DemoFailed(f"no signed checkpoint covers position {head} after {STEP_TIMEOUT:.0f}s")
            await asyncio.sleep(0.2)
        try:
            receipt = await export_receipt(store, trusted, rollout_id)
        except TransparencyError as error:
            raise DemoFailed(f"receipt of {rollout_id}: {error}") from None
    finally:
        await store.close()
    path = run_dir / "receipt.json"
    path.write_bytes(canonical_json(receipt))
    try:
        result = verify_receipt(path.read_bytes(), trusted)  # the file alone: no database from here on
    except ReceiptError as error:
        raise DemoFailed(f"the exported receipt does not verify: {error}") from None
    clock.step(
        f"receipt of {rollout_id}: {result.events} events, proven against a signed checkpoint,"
        " verified offline"
    )
    check = f"{invocation()} audit verify-receipt {shlex.quote(str(path))}"
    key = shlex.quote(result.signer.text())
    console().print(
        f"  {path}\n  check it anywhere: {check} --public-key {key}", highlight=False, soft_wrap=True
    )


def _short(revision: str, workload: str) -> str:
    return revision[len(workload) + 1 :] if revision.startswith(workload + "-") else revision


async def _fresh_database(settings: Settings) -> Settings:
    """A database of the demo's own on the configured server, migrated."""
    from services.infra.database import asyncpg_url, create_database, upgrade_async
    from services.infra.redact import redacted

    base = asyncpg_url(settings.url_for("owner"))  # a login that may create a database
    name = f"rollbook_demo_{uuid.uuid4().hex[:8]}"
    await create_database(base, name)
    url = base.rsplit("/", 1)[0] + "/" + name
    await upgrade_async(url)
    console().print(f"  audit trail kept in database {redacted(url)}")
    return msgspec.structs.replace(settings, database_url=url, database_owner_url=url, database_reader_url="")


@contextlib.contextmanager
def _exclusive(run_dir: Path) -> Iterator[None]:
    """Refuse to wipe the data dir of a demo that is still running."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    lock_path = run_dir.parent / ".demo.lock"
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DemoFailed(f"another rollbook demo is running with data dir {run_dir}") from None
        yield


def register(application: typer.Typer) -> None:
    @application.command("demo")
    def demo() -> None:
        """Start everything, roll out the seed's CloneSets in place, show the audit trail, stop everything."""
        clock = Clock()
        base = Settings.from_env()
        # The steps say what the embedded-server module logs at INFO; its warnings and errors still show.
        logging.getLogger("services.infra.embedded").setLevel(logging.WARNING)
        run_dir = base.data_path / "demo"
        suffix = uuid.uuid4().hex[:8]
        try:
            with _exclusive(run_dir):
                if run_dir.exists():  # the previous demo's trail: a new simcluster would not match it
                    shutil.rmtree(run_dir)
                run_dir.mkdir(parents=True, exist_ok=True)
                embedded = not (base.database_url and base.nats_url)
                settings = msgspec.structs.replace(
                    base,
                    data_dir=str(run_dir),
                    kubeconfig=str(run_dir / "simcluster" / "kubeconfig"),
                    stream_name=f"ROLLBOOK_DEMO_{suffix}",
                    subject_prefix=f"rbdemo{suffix}",
                    http_port=0,
                    checkpoint_interval=DEMO_CHECKPOINT_INTERVAL,
                    log_level="INFO",
                )
                console().print(
                    "[bold]rollbook demo[/]: "
                    + (
                        "starting embedded Postgres and NATS under " + str(run_dir)
                        if embedded
                        else "using the configured servers"
                    )
                )
                code = run_command(
                    lambda resolved: _demo(
                        resolved, clock, run_dir, bool(base.database_url), bool(base.nats_url)
                    ),
                    settings=settings,
                )
        except DemoFailed as failure:
            console().print(f"[bold red]rollbook demo failed:[/] {failure}")
            raise typer.Exit(1) from None
        if code == 130:
            console().print("[yellow]demo interrupted[/]: services, simcluster, NATS and Postgres stopped")
        if code == 0:
            clock.step("Postgres and NATS stopped; nothing left running")
            console().print(
                f"Done in {time.monotonic() - clock.started:.1f}s. Query the trail again with:\n"
                f"  ROLLBOOK_DATA_DIR={shlex.quote(str(run_dir))} {invocation()} history ops/sample-data"
                if embedded
                else f"Done in {time.monotonic() - clock.started:.1f}s."
            )
        raise typer.Exit(code)
