"""`rollbook replay | verify | what-if | audit verify | audit checkpoint` (docs/replay.md). They read the
event store only: they work with the services stopped and the cluster gone."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from services.cli.runtime import run_with_store
from services.infra.settings import Settings
from services.model.sidecarset_streams import SIDECARSET_KIND
from services.model.streams import WORKLOAD_KIND

if TYPE_CHECKING:  # imported where used: the store pulls in SQLAlchemy, which `--help` does not need
    from services.infra.store import EventStore
    from services.replay.verify import Decide, VerifyReport

_json = msgspec.json.Encoder(order="sorted")


def _print_json(value: Any) -> None:
    encoded = _json.encode(msgspec.to_builtins(value, enc_hook=str, str_keys=True))
    sys.stdout.buffer.write(msgspec.json.format(encoded, indent=2) + b"\n")
    sys.stdout.flush()


def load_decide(spec: str) -> Decide:
    """``package.module:function`` -> the decision function verify should use instead of the planner's."""
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise typer.BadParameter(f"expected package.module:function, got {spec!r}")
    decide = getattr(importlib.import_module(module_name), function, None)
    if not callable(decide):
        raise typer.BadParameter(f"{spec} is not a callable")
    return decide  # type: ignore[no-any-return]


def kind_counts(reports: list[VerifyReport]) -> str:
    """One line with how many workloads of each kind were verified and how many diverged (and, when
    any, how many have rounds recorded by other planner rules)."""
    parts = []
    for kind in (WORKLOAD_KIND, SIDECARSET_KIND):
        mine = [r for r in reports if r.kind == kind]
        diverged = sum(1 for r in mine if r.divergence is not None)
        part = f"{kind}: {len(mine)} verified, {diverged} diverged"
        older = sum(1 for r in mine if r.unverifiable)
        if older:
            part += f", {older} with rounds not re-verifiable"
        parts.append(part)
    return "; ".join(parts)


UNVERIFIABLE_NOTE = (
    "rounds recorded by other planner rules are not re-run (their decisions are folded as recorded);"
    " `rollbook audit verify` still checks that they are unaltered"
)


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_command(
        target: str = typer.Argument(
            ..., help="<namespace>/<name>, or a rollout id <namespace>/<name>@<revision>"
        ),
        at: Annotated[
            str | None,
            typer.Option(
                "--at", help="show the state as recorded at this time (ISO 8601, e.g. 2026-11-30T12:00:00Z)"
            ),
        ] = None,
        position: int | None = typer.Option(
            None, "--position", help="show the state at this global position"
        ),
        as_json: bool = typer.Option(
            False, "--json", help="without --at/--position: JSON lines, the full state after each event"
        ),
    ) -> None:
        """Rebuild a workload's state from the event store alone: one line per event with the state after
        it, or the full state at a time / global position."""
        from services.replay.operations import replay_at, replay_lines, replay_records

        moment: datetime | None = None
        if at is not None:
            try:
                moment = datetime.fromisoformat(at)
            except ValueError:
                raise typer.BadParameter(f"--at takes an ISO 8601 time, got {at!r}") from None
            if moment.tzinfo is None:
                moment = moment.astimezone()  # a time without zone is local time
        if moment is None and position is None and as_json:
            for record in run_with_store(lambda store, _: replay_records(store, target)):
                sys.stdout.buffer.write(_json.encode(record) + b"\n")
            sys.stdout.flush()
            return
        if moment is None and position is None:
            for line in run_with_store(lambda store, _: replay_lines(store, target)):
                typer.echo(line)
            return
        summary, last = run_with_store(
            lambda store, _: replay_at(store, target, at_time=moment, at_position=position)
        )
        _print_json(
            {
                "atPosition": None if last is None else last.global_position,
                "atRecordedTime": None if last is None else last.recorded_at.isoformat(),
                "state": summary,
            }
        )

    @app.command("verify")
    def verify_command(
        target: str | None = typer.Argument(None, help="<namespace>/<name> or a rollout id; omit with --all"),
        all_workloads: bool = typer.Option(
            False, "--all", help="verify every workload in the log: every CloneSet and every SidecarSet"
        ),
        decide: str | None = typer.Option(
            None,
            "--decide",
            help="package.module:function to use as the CloneSets' decision function (default: the"
            " planner's); SidecarSets are always replayed with the SidecarSet planner",
        ),
        as_json: bool = typer.Option(False, "--json", help="one JSON report per workload (for CI)"),
        strict: bool = typer.Option(
            False,
            "--strict",
            help="also exit 1 when rounds were recorded by other planner rules (not re-verifiable)",
        ),
    ) -> None:
        """Feed the recorded observations back into the planner and compare every decision with the record.
        A target is a CloneSet (use `rollbook sidecarset verify NAME` for one SidecarSet); --all verifies
        every CloneSet and SidecarSet in the log and prints how many of each kind were verified. Exit 1 if
        any workload diverges (its first divergence is printed with both sides). Rounds recorded by other
        planner rules (an older rollbook) are not re-run: reported as not re-verifiable, exit 0 unless
        --strict."""
        from services.planner.cloneset_decisions import decide as planner_decide
        from services.replay.operations import verify_all, verify_target

        if all_workloads == (target is not None):
            raise typer.BadParameter("give a target or --all, not both")
        decision = load_decide(decide) if decide else planner_decide

        async def work(store: EventStore, _: Settings) -> list[Any]:
            if target is not None:
                return [await verify_target(store, target, decision)]
            return await verify_all(store, decision)

        reports = run_with_store(work)
        failed = any(r.divergence is not None for r in reports) or (
            strict and any(r.unverifiable for r in reports)
        )
        if as_json:
            _print_json([dataclasses.asdict(r) for r in reports])
            if failed:
                raise typer.Exit(1)
            return
        for report in reports:
            shown = report.workload if report.kind == WORKLOAD_KIND else f"{report.kind} {report.workload}"
            if report.divergence is None:
                typer.echo(
                    f"OK {shown}: {report.rounds} rounds, {report.decisions} decisions,"
                    f" {report.events} events"
                )
            else:
                typer.echo(report.divergence.describe())
            for line in report.describe_skipped():
                typer.echo(f"NOT RE-VERIFIABLE {shown}: {line}")
        if not reports:
            typer.echo("no workloads in the log")
        elif all_workloads:
            typer.echo(kind_counts(reports))
        if any(r.unverifiable for r in reports):
            typer.echo(f"note: {UNVERIFIABLE_NOTE}{'' if strict else '; --strict makes them fail verify'}")
        if failed:
            raise typer.Exit(1)

    @app.command("what-if")
    def what_if_command(
        rollout_id: str = typer.Argument(..., help="<namespace>/<name>@<revision>"),
        overrides: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                help="updateStrategy field=value, e.g. updateStrategy.partition=0, maxUnavailable=100%",
            ),
        ] = None,
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    ) -> None:
        """Re-plan a recorded rollout with another strategy against a model driven by its recorded pod
        timings; print it beside what happened. Nothing is written."""
        from services.cli.errors import CommandError
        from services.replay.operations import what_if_rollout
        from services.replay.whatif import WhatIfError, parse_overrides

        try:
            parsed = parse_overrides(overrides or [])
        except WhatIfError as error:
            raise CommandError(str(error), exit_code=2) from None
        result = run_with_store(lambda store, _: what_if_rollout(store, rollout_id, parsed))
        recorded, replanned = result.recorded.as_dict(), result.replanned.as_dict()
        if as_json:
            _print_json(
                {
                    "rollout": result.rollout_id,
                    "overrides": result.overrides,
                    "recorded": recorded,
                    "whatIf": replanned,
                    "timings": result.timings,
                }
            )
            return
        typer.echo(f"rollout {result.rollout_id}, what-if {result.overrides}")
        typer.echo(f"{'':28}{'recorded':>14}{'what-if':>14}")
        for key, label in (
            ("steps", "steps (rounds with actions)"),
            ("actions", "pod actions"),
            ("podsTouched", "pods touched"),
            ("maxUnavailable", "max pods unavailable"),
            ("longestUnavailableSeconds", "longest unavailable (s)"),
            ("durationSeconds", "duration (s)"),
            ("completed", "completed"),
        ):
            typer.echo(f"{label:28}{recorded[key]!s:>14}{replanned[key]!s:>14}")

    audit = typer.Typer(
        help="Tamper evidence of the event log (hash chain, checkpoints).", no_args_is_help=True
    )
    app.add_typer(audit, name="audit")

    @audit.command("verify")
    def audit_verify(
        checkpoint_file: Annotated[
            Path | None, typer.Option("--checkpoint-file", help="JSON-lines checkpoints to check")
        ] = None,
        bus: bool = typer.Option(True, "--bus/--no-bus", help="also check the checkpoints kept in JetStream"),
    ) -> None:
        """Recompute every event's hash chain and compare it with the stored hashes and the checkpoints kept
        outside the database. Exit 1 naming every edited, removed or reordered event."""
        from services.infra.checkpoints import Checkpoint, file_checkpoints, published_checkpoints
        from services.replay.audit import audit_log

        async def work(store: EventStore, settings: Settings) -> Any:
            given: list[tuple[str, Checkpoint]] = []
            if checkpoint_file is not None:
                given += [(str(checkpoint_file), cp) for cp in file_checkpoints(checkpoint_file)]
            if bus and settings.nats_url:
                from services.infra.bus import Bus

                connection = await Bus.connect(settings, name="rollbook-audit")
                try:
                    given += [("JetStream", cp) for cp in await published_checkpoints(connection)]
                finally:
                    await connection.close()
            return await audit_log(store, given)

        report = run_with_store(work, nats=bus)
        for finding in report.findings:
            typer.echo(finding.describe())
        if report.findings:
            typer.echo(f"TAMPERED: {len(report.findings)} finding(s) in {report.rows} events")
            raise typer.Exit(1)
        typer.echo(
            f"OK: {report.rows} events up to position {report.head}, {report.checkpoints_checked} checkpoints"
        )

    @audit.command("checkpoint")
    def audit_checkpoint(
        checkpoint_file: Annotated[
            Path | None, typer.Option("--file", help="also append it to this JSON-lines file")
        ] = None,
        bus: bool = typer.Option(
            True, "--bus/--no-bus", help="publish it to the JetStream checkpoint stream"
        ),
    ) -> None:
        """Record the chain hash at the head of the log (database, JetStream, file)."""
        from services.infra.checkpoints import take_checkpoint

        async def work(store: EventStore, settings: Settings) -> Any:
            if bus and settings.nats_url:
                from services.infra.bus import Bus

                connection = await Bus.connect(settings, name="rollbook-audit")
                try:
                    return await take_checkpoint(store, bus=connection, file=checkpoint_file)
                finally:
                    await connection.close()
            return await take_checkpoint(store, file=checkpoint_file)

        checkpoint = run_with_store(work, nats=bus)
        if checkpoint is None:
            typer.echo("the log is empty: nothing to checkpoint")
        else:
            typer.echo(f"checkpoint at position {checkpoint.global_position}: {checkpoint.chain_hash}")
