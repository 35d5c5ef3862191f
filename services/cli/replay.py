"""`rollbook replay | verify | what-if | audit verify | audit checkpoint` (docs/replay.md). They read the
event store only: they work with the services stopped and the cluster gone."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec
import typer

from services.cli.runtime import run_with_store
from services.infra.settings import Settings

if TYPE_CHECKING:  # imported where used: the store pulls in SQLAlchemy, which `--help` does not need
    from services.infra.store import EventStore
    from services.replay.recorded import RecordedReport
    from services.replay.verify import Decide, VerifyReport

_json = msgspec.json.Encoder(order="sorted")
T = TypeVar("T")


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


def kind_counts(reports: list[VerifyReport], recorded: list[RecordedReport]) -> str:
    """One line with how many workloads of each kind were verified and how many diverged (and, when
    any, how many have rounds recorded by other planner rules, or a recorder behind its observations)."""
    from services.kinds.registry import DRIVEN, RECORDED

    parts = []
    for kind in (k.name for k in DRIVEN):
        mine = [r for r in reports if r.kind == kind]
        diverged = sum(1 for r in mine if r.divergence is not None)
        part = f"{kind}: {len(mine)} verified, {diverged} diverged"
        older = sum(1 for r in mine if r.unverifiable)
        if older:
            part += f", {older} with rounds not re-verifiable"
        parts.append(part)
    for kind in (k.name for k in RECORDED):
        trails = [r for r in recorded if r.kind == kind]
        part = (
            f"{kind}: {len(trails)} verified, {sum(1 for r in trails if r.divergence is not None)} diverged"
        )
        behind = sum(1 for r in trails if r.divergence is None and r.pending)
        if behind:
            part += f", {behind} with observations not recorded yet"
        parts.append(part)
    return "; ".join(parts)


def recorded_json(report: RecordedReport) -> dict[str, Any]:
    """`verify <kind>/<ns>/<name> --json`: the recorded workload's counts, ``pending`` (events its
    observations fold into that the recorder has not stored yet), ``divergence`` (the first differing event
    as a line, or null) and ``first`` (the same as a planned workload's divergence)."""
    return dataclasses.asdict(report) | {"pending": report.pending}


def recorded_entry(report: RecordedReport) -> dict[str, Any]:
    """A recorded workload's entry in `verify --all --json`: the fields of a planned workload's report,
    with the same meaning (no planner: no rounds, decisions, rules or skipped rounds), and its own counts."""
    return {
        "kind": report.kind,
        "workload": report.workload,
        "events": report.observations + report.recorded,
        "rounds": 0,
        "decisions": 0,
        "rules": 0,
        "skipped": {},
        "divergence": None if report.first is None else dataclasses.asdict(report.first),
        "observations": report.observations,
        "recorded": report.recorded,
        "refolded": report.refolded,
        "pending": report.pending,
    }


# `rollbook audit verify`: the log verifies, but a failover lost events for good (docs/audit.md).
LOSS_EXIT = 3
PUBLIC_KEY_OPTION = typer.Option(
    "--public-key",
    help="a trusted public key (C2SP verifier key, or a file of them); repeat for several. Default:"
    " ROLLBOOK_AUDIT_PUBLIC_KEY, else the public half of the signing key file",
)


UNVERIFIABLE_NOTE = (
    "rounds recorded by other planner rules are not re-run (their decisions are folded as recorded);"
    " `rollbook audit verify` still checks that they are unaltered"
)


ARCHIVE_OPTION = typer.Option(
    "--archive", help="directory of `rollbook archive`: read the archived events from its files too"
)


def archived(
    work: Callable[[EventStore, Settings], Awaitable[T]], archive: Path | None
) -> Callable[[EventStore, Settings], Awaitable[T]]:
    """``work`` on the store with the archive's events in front of each stream (replay, what-if)."""
    if archive is None:
        return work

    async def on_archive(store: EventStore, settings: Settings) -> T:
        from services.cli.errors import CommandError
        from services.infra.archive import ArchivedEventStore, ArchiveError

        try:
            combined = ArchivedEventStore(store, archive)
        except ArchiveError as error:
            raise CommandError(str(error)) from None
        return await work(combined, settings)

    return on_archive


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_command(
        target: str = typer.Argument(
            ...,
            help="<namespace>/<name>, or a rollout id <namespace>/<name>@<revision>#<n>; a recorded"
            " Deployment or StatefulSet as <kind>/<namespace>/<name>[@<revision>#<n>]",
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
        archive: Annotated[Path | None, ARCHIVE_OPTION] = None,
    ) -> None:
        """Rebuild a workload's state from the event store alone: one line per event with the state after
        it, or the full state at a time / global position. For a recorded Deployment or StatefulSet
        (<kind>/<namespace>/<name>) its observations are folded again and the stored trail checked against
        them: exit 1 if they differ."""
        from services.replay.operations import replay_at, replay_lines, replay_records, verify_recorded
        from services.replay.reads import split_kind

        recorded = split_kind(target)[0] is not None

        moment: datetime | None = None
        if at is not None:
            try:
                moment = datetime.fromisoformat(at)
            except ValueError:
                raise typer.BadParameter(f"--at takes an ISO 8601 time, got {at!r}") from None
            if moment.tzinfo is None:
                moment = moment.astimezone()  # a time without zone is local time
        if moment is None and position is None and as_json:
            for record in run_with_store(archived(lambda store, _: replay_records(store, target), archive)):
                sys.stdout.buffer.write(_json.encode(record) + b"\n")
            sys.stdout.flush()
            return
        if moment is None and position is None:

            async def lines(store: EventStore, _: Settings) -> tuple[list[str], Any]:
                shown = await replay_lines(store, target)
                return shown, (await verify_recorded(store, target) if recorded else None)

            shown, report = run_with_store(archived(lines, archive))
            for line in shown:
                typer.echo(line)
            if report is not None:
                typer.echo(report.describe())
                if report.divergence is not None:
                    raise typer.Exit(1)
            return
        summary, last = run_with_store(
            archived(lambda store, _: replay_at(store, target, at_time=moment, at_position=position), archive)
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
        target: str | None = typer.Argument(
            None,
            help="<namespace>/<name> or a rollout id; <kind>/<namespace>/<name> for a recorded Deployment or"
            " StatefulSet; omit with --all",
        ),
        all_workloads: bool = typer.Option(
            False,
            "--all",
            help="verify every workload in the log: every CloneSet and SidecarSet, and every recorded"
            " Deployment and StatefulSet's trail",
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
        every CloneSet and SidecarSet in the log, checks every recorded Deployment's and StatefulSet's trail
        against its observations, and prints how many of each kind were verified. Exit 1 if
        any workload diverges (its first divergence is printed with both sides). Rounds recorded by other
        planner rules (an older rollbook) are not re-run: reported as not re-verifiable, exit 0 unless
        --strict."""
        from services.kinds.cloneset.rules.decisions import decide as planner_decide
        from services.replay.operations import verify_log, verify_recorded, verify_target
        from services.replay.reads import split_kind

        if all_workloads == (target is not None):
            raise typer.BadParameter("give a target or --all, not both")
        decision = load_decide(decide) if decide else planner_decide

        if target is not None and split_kind(target)[0] is not None:
            report = run_with_store(lambda store, _: verify_recorded(store, target))
            if as_json:
                _print_json([recorded_json(report)])
            else:
                typer.echo(report.describe())
            if report.divergence is not None:
                raise typer.Exit(1)
            return

        async def work(store: EventStore, _: Settings) -> tuple[list[VerifyReport], list[RecordedReport]]:
            if target is not None:
                return [await verify_target(store, target, decision)], []
            log = await verify_log(store, decision)
            return log.planned, log.recorded

        reports, trails = run_with_store(work)
        failed = (
            any(r.divergence is not None for r in reports)
            or any(t.divergence is not None for t in trails)
            or (strict and any(r.unverifiable for r in reports))
        )
        if as_json:
            _print_json([dataclasses.asdict(r) for r in reports] + [recorded_entry(t) for t in trails])
            if failed:
                raise typer.Exit(1)
            return
        from services.kinds.registry import CLONESET

        for planned in reports:
            shown = (
                planned.workload if planned.kind == CLONESET.name else f"{planned.kind} {planned.workload}"
            )
            if planned.divergence is None:
                typer.echo(
                    f"OK {shown}: {planned.rounds} rounds, {planned.decisions} decisions,"
                    f" {planned.events} events"
                )
            else:
                typer.echo(planned.divergence.describe())
            for line in planned.describe_skipped():
                typer.echo(f"NOT RE-VERIFIABLE {shown}: {line}")
        for trail in trails:
            typer.echo(trail.describe())
        if not reports and not trails:
            typer.echo("no workloads in the log")
        elif all_workloads:
            typer.echo(kind_counts(reports, trails))
        if any(r.unverifiable for r in reports):
            typer.echo(f"note: {UNVERIFIABLE_NOTE}{'' if strict else '; --strict makes them fail verify'}")
        if failed:
            raise typer.Exit(1)

    @app.command("what-if")
    def what_if_command(
        rollout_id: str = typer.Argument(..., help="<namespace>/<name>@<revision>#<n>"),
        overrides: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                help="updateStrategy field=value, e.g. updateStrategy.partition=0, maxUnavailable=100%",
            ),
        ] = None,
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
        archive: Annotated[Path | None, ARCHIVE_OPTION] = None,
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
        result = run_with_store(
            archived(lambda store, _: what_if_rollout(store, rollout_id, parsed), archive)
        )
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
        help="Tamper evidence of the event log: hash chain, Merkle tree, signed checkpoints, receipts"
        " (docs/audit.md).",
        no_args_is_help=True,
    )
    app.add_typer(audit, name="audit")

    def trusted(settings: Settings, given: list[str] | None) -> list[Any]:
        from services.cli.errors import CommandError
        from services.infra.transparency import TransparencyError, trusted_verifiers

        try:
            verifiers = trusted_verifiers(settings, given or [])
        except TransparencyError as error:
            raise CommandError(str(error)) from None
        if not verifiers:
            raise CommandError(
                "no trusted public key: give --public-key (`rollbook audit public-key` where the"
                " auditor runs prints it) or set ROLLBOOK_AUDIT_PUBLIC_KEY; the database's own is never"
                " trusted alone"
            )
        return verifiers

    @audit.command("verify")
    def audit_verify(
        checkpoint_file: Annotated[
            Path | None, typer.Option("--checkpoint-file", help="JSON-lines checkpoints to check too")
        ] = None,
        checkpoint_dir: Annotated[
            Path | None,
            typer.Option(
                "--checkpoint-dir",
                help="directory of signed checkpoints (default: ROLLBOOK_AUDIT_CHECKPOINT_DIR, or"
                " <data_dir>/audit/checkpoints)",
            ),
        ] = None,
        public_key: Annotated[list[str] | None, PUBLIC_KEY_OPTION] = None,
        max_age: Annotated[
            float | None,
            typer.Option(
                "--max-age", help="seconds the newest checkpoint may lag (ROLLBOOK_AUDIT_MAX_CHECKPOINT_AGE)"
            ),
        ] = None,
        bus: bool = typer.Option(True, "--bus/--no-bus", help="also check the checkpoints kept in JetStream"),
        accept_loss: Annotated[
            list[str] | None,
            typer.Option(
                "--accept-loss",
                help="the id of a store loss record an operator has dealt with (repeatable): still printed,"
                " no longer exit 3",
            ),
        ] = None,
        archive: Annotated[
            Path | None,
            typer.Option(
                "--archive",
                help="directory of `rollbook archive`: verify the archived events too, as one chain with"
                " the live ones",
            ),
        ] = None,
    ) -> None:
        """Recompute every event's hash chain and the Merkle tree over the log, and check them against every
        signed checkpoint in the database and outside it. Exit 1 naming every finding; exit 3 when the log
        verifies but records events a failover lost for good (named)."""

        async def work(store: EventStore, settings: Settings) -> Any:
            from services.cli.errors import CommandError

            try:
                verifiers = trusted(settings, public_key)
            except CommandError:
                # An empty trail (no event, no checkpoint) needs no key: anything else does.
                if await store.head_position() or await store.has_signed_checkpoint():
                    raise
                verifiers = []
            return await verify_trail(
                store,
                settings,
                verifiers,
                checkpoint_file=checkpoint_file,
                checkpoint_dir=checkpoint_dir,
                max_age=max_age,
                bus=bus,
                archive=archive,
            )

        report = run_with_store(work, nats=bus)
        for line in report.redactions + report.accepted + report.losses:
            typer.echo(line)
        for finding in report.findings:
            typer.echo(finding.describe())
        if report.findings:
            typer.echo(f"TAMPERED: {len(report.findings)} finding(s) in {report.rows} events")
            raise typer.Exit(1)
        unreviewed = [record for record in report.unrecovered if record not in set(accept_loss or [])]
        if unreviewed:
            # Not tampering (exit 1): the trail verifies, but a failover lost events for good, and a check
            # that wants a complete record must not pass. --accept-loss once an operator has dealt with it.
            typer.echo(
                f"INCOMPLETE: {report.rows} events verify, but {len(unreviewed)} store loss record(s) name"
                f" events lost for good ({', '.join(unreviewed)}; --accept-loss ID once dealt with)"
            )
            raise typer.Exit(LOSS_EXIT)
        typer.echo(
            f"OK: {report.rows} events up to position {report.head}, {report.checkpoints_checked} checkpoints"
        )

    @audit.command("redact")
    def audit_redact(
        public_key: Annotated[list[str] | None, PUBLIC_KEY_OPTION] = None,
        bus: bool = typer.Option(
            True, "--bus/--no-bus", help="check and publish to the JetStream checkpoint stream"
        ),
    ) -> None:
        """Rewrite the values recorded before redaction (or under a narrower deny-list) under the current
        policy, re-chain the log, record it, rebuild the Merkle tree and sign a checkpoint of it
        (docs/audit.md, "Redacting a signed trail"). Stop the services first; ROLLBOOK_DATABASE_OWNER_URL (or
        ROLLBOOK_DATABASE_URL) must be the owner's, and the auditor's signing key must be at hand."""
        import asyncpg

        from services.cli.errors import CommandError
        from services.infra.redaction_key import RedactionKeyError, load_policy
        from services.infra.transparency import TransparencyError, load_signer
        from services.replay.redact import RedactionAborted

        async def work(store: EventStore, settings: Settings) -> Any:
            try:
                policy = load_policy(settings)
            except RedactionKeyError as error:
                raise CommandError(str(error)) from None
            signed_before = await store.has_signed_checkpoint()
            try:
                # A log signed before needs the key that signed it; a new one is made only for a log
                # that never had a checkpoint (as the auditor would at its start).
                signer = load_signer(settings, create=not signed_before)
            except TransparencyError as error:
                raise CommandError(
                    f"{error}: a redaction re-signs the log with the auditor's key, so it is needed here"
                ) from None
            verifiers = trusted(settings, public_key)
            connection = None
            if bus and settings.nats_url:
                from services.infra.bus import Bus

                connection = await Bus.connect(settings, name="rollbook-audit", identity="operator")
            try:
                return await redact_signed(store, settings, policy, signer, verifiers, bus=connection)
            except RedactionAborted as error:
                raise CommandError(str(error)) from None
            except asyncpg.InsufficientPrivilegeError as error:
                raise CommandError(
                    f"the database refused the rewrite ({error}): run it with the owner's"
                    " ROLLBOOK_DATABASE_OWNER_URL, the one migrations run with"
                ) from None
            finally:
                if connection is not None:
                    await connection.close()

        result = run_with_store(work, nats=bus, duty="writer")
        plan = result.plan
        if result.record is None:
            typer.echo(
                f"OK: {plan.events} events already recorded under policy {plan.policy}; nothing rewritten"
            )
            return
        record = result.record
        typer.echo(
            f"redacted {len(record.positions)} of {plan.events} events under policy {record.policy}"
            f" ({record.rounds_resealed} round input digests resealed, {plan.workloads} workloads verified);"
            f" chain at position {record.head}: {record.chain_before} -> {record.chain_after}"
        )
        if result.checkpoint is not None:
            body = result.checkpoint.body
            typer.echo(
                f"signed checkpoint of the rewritten log: tree size {body.tree_size}, root"
                f" {body.root_hash.hex()} (before: {record.tree_size_before} events, root"
                f" {record.root_before}); it supersedes {len(record.signed_superseded)} signed checkpoint(s)"
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
        """Extend the Merkle tree and sign a checkpoint of its head now (database, JetStream, checkpoint
        directory, file), as the auditor does periodically. Needs the signing key."""
        from services.cli.errors import CommandError
        from services.infra.transparency import Checkpointer, TransparencyError, checkpoint_dir, load_signer

        async def work(store: EventStore, settings: Settings) -> Any:
            try:
                signer = load_signer(settings)
            except TransparencyError as error:
                raise CommandError(str(error)) from None
            checkpointer = Checkpointer(
                store, signer, directory=checkpoint_dir(settings), file=checkpoint_file
            )
            if bus and settings.nats_url:
                from services.infra.bus import Bus

                checkpointer.bus = await Bus.connect(settings, name="rollbook-audit", identity="operator")
            try:
                return await checkpointer.checkpoint(force=True)
            finally:
                if checkpointer.bus is not None:
                    await checkpointer.bus.close()

        checkpoint = run_with_store(work, nats=bus, duty="writer")
        typer.echo(checkpoint.note, nl=False)

    @audit.command("public-key")
    def audit_public_key() -> None:
        """Print the auditor's public key (C2SP verifier key), from its signing key file: give it to whoever
        verifies the trail (`audit verify --public-key`, `audit verify-receipt --public-key`)."""
        from services.cli.errors import CommandError
        from services.infra.transparency import TransparencyError, load_signer

        try:
            typer.echo(load_signer(Settings.from_env(), create=False).verifier.text())
        except TransparencyError as error:
            raise CommandError(str(error)) from None

    @audit.command("keygen")
    def audit_keygen(
        output: Annotated[
            Path, typer.Option("-o", "--output", help="private key file to create (mode 0600)")
        ],
        name: Annotated[
            str, typer.Option("--name", help="key name and checkpoint origin, e.g. rollbook.example.com/prod")
        ] = "rollbook",
    ) -> None:
        """Create a checkpoint signing key (C2SP signer key) for the auditor, e.g. for a Kubernetes Secret;
        print its public key. Never overwrites a file."""
        import os

        from services.cli.errors import CommandError
        from services.model.signed_note import NoteError, Signer

        try:
            signer = Signer.generate(name)
        except NoteError as error:
            raise CommandError(str(error), 2) from None
        try:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            raise CommandError(f"{output}: {error.strerror}") from None
        with os.fdopen(fd, "w") as out:
            out.write(signer.text() + "\n")
        typer.echo(signer.verifier.text())

    @audit.command("prove")
    def audit_prove(
        target: str = typer.Argument(..., help="a global position, or an event id"),
        public_key: Annotated[list[str] | None, PUBLIC_KEY_OPTION] = None,
        as_json: bool = typer.Option(False, "--json", help="print the proof as JSON"),
    ) -> None:
        """Print the inclusion proof of one event in the newest signed checkpoint (checked before printed)."""
        import uuid

        from services.cli.errors import CommandError
        from services.infra.transparency import TransparencyError, prove

        position: int | None = None
        event_id: uuid.UUID | None = None
        if target.isascii() and target.isdigit():
            position = int(target)
        else:
            try:
                event_id = uuid.UUID(target)
            except ValueError:
                raise CommandError(f"{target!r} is neither a global position nor an event id", 2) from None

        async def work(store: EventStore, settings: Settings) -> Any:
            try:
                return await prove(store, trusted(settings, public_key), position=position, event_id=event_id)
            except TransparencyError as error:
                raise CommandError(str(error)) from None

        proof = run_with_store(work)
        body = proof.checkpoint.body
        if as_json:
            _print_json(
                {
                    "global_position": proof.global_position,
                    "leaf_index": proof.leaf_index,
                    "leaf_hash": proof.leaf_hash.hex(),
                    "tree_size": body.tree_size,
                    "inclusion_proof": [p.hex() for p in proof.proof],
                    "checkpoint": proof.checkpoint.note,
                }
            )
            return
        typer.echo(f"event at position {proof.global_position}: leaf {proof.leaf_index} of {body.tree_size}")
        typer.echo(f"leaf hash {proof.leaf_hash.hex()}")
        for step, digest in enumerate(proof.proof):
            typer.echo(f"proof[{step}] {digest.hex()}")
        typer.echo("signed checkpoint:")
        typer.echo(proof.checkpoint.note, nl=False)

    @audit.command("export")
    def audit_export(
        target: Annotated[str, typer.Argument(help="<namespace>/<name> of the workload")],
        rollout: Annotated[
            str,
            typer.Option("--rollout", help="the rollout id (<namespace>/<name>@<revision>) or its revision"),
        ],
        output: Annotated[Path, typer.Option("-o", "--output", help="receipt file to write (JSON)")],
        public_key: Annotated[list[str] | None, PUBLIC_KEY_OPTION] = None,
    ) -> None:
        """Write a receipt of one rollout: its events, their inclusion proofs, the signed checkpoint and the
        public key, checkable offline with `rollbook audit verify-receipt` or docs/verify_receipt.py."""
        from services.cli.errors import CommandError
        from services.infra.transparency import TransparencyError, export_receipt
        from services.model.receipt import canonical_json

        rollout_id = rollout if "@" in rollout else f"{target}@{rollout}"
        if not rollout_id.startswith(f"{target}@"):
            raise CommandError(f"rollout {rollout_id} is not one of {target}", 2)

        async def work(store: EventStore, settings: Settings) -> Any:
            try:
                return await export_receipt(store, trusted(settings, public_key), rollout_id)
            except TransparencyError as error:
                raise CommandError(str(error)) from None

        receipt = run_with_store(work)
        output.write_bytes(canonical_json(receipt))
        typer.echo(f"{output}: {len(receipt['events'])} events of {rollout_id}")

    @audit.command("verify-receipt")
    def audit_verify_receipt(
        receipt: Annotated[Path, typer.Argument(help="the receipt file")],
        public_key: Annotated[list[str] | None, PUBLIC_KEY_OPTION] = None,
        against_log: bool = typer.Option(
            False,
            "--log",
            help="also ask the log as it is now: still extended by its newest signed checkpoint,"
            " superseded by a signed redaction, or rewritten without one (exit 1)",
        ),
    ) -> None:
        """Check a receipt offline (no database, no server): every event's content, its inclusion proof,
        and the checkpoint's signature. Without --public-key the receipt's own key is used and named."""
        from services.cli.errors import CommandError
        from services.infra.transparency import TransparencyError, parse_verifier_keys
        from services.model.receipt import ReceiptError, verify_receipt

        try:
            keys = [v for source in public_key or [] for v in parse_verifier_keys(source)] or None
            data = receipt.read_bytes()
        except (TransparencyError, OSError) as error:
            raise CommandError(str(error)) from None
        try:
            result = verify_receipt(data, keys)
        except ReceiptError as error:
            raise CommandError(f"receipt refused: {error}") from None
        typer.echo(
            f"OK: {result.events} events of {result.rollout} in the log of {result.tree_size} events"
            f" (up to position {result.global_position}), signed by {result.signer.text()}"
        )
        if not result.pinned:
            typer.echo("note: the key is the receipt's own: compare it with the published one (--public-key)")
        if not against_log:
            return
        import json

        from services.infra.transparency import checkpoint_standing
        from services.model.signed_note import SignedCheckpoint

        document = json.loads(data)
        positions = [int(e["global_position"]) for e in document["events"]]
        held = SignedCheckpoint.open(document["checkpoint"], [result.signer])

        async def work(store: EventStore, settings: Settings) -> Any:
            try:
                return await checkpoint_standing(store, [result.signer], held, positions)
            except TransparencyError as error:
                raise CommandError(str(error)) from None

        standing = run_with_store(work)
        if standing.state == "current":
            typer.echo(f"current: {standing.detail}")
        elif standing.state == "superseded":
            typer.echo(f"SUPERSEDED: {standing.detail}")
        else:
            typer.echo(f"NOT IN THE LOG: {standing.detail}")
            raise typer.Exit(1)


async def verify_trail(
    store: EventStore,
    settings: Settings,
    verifiers: list[Any],
    *,
    checkpoint_file: Path | None = None,
    checkpoint_dir: Path | None = None,
    max_age: float | None = None,
    bus: bool = True,
    archive: Path | None = None,
) -> Any:
    """What `rollbook audit verify` checks: the log against every checkpoint it can find (the database,
    the checkpoint directory, the JSON-lines file, JetStream) with the trusted keys ``verifiers``."""
    from services.infra.checkpoints import Checkpoint, file_checkpoints
    from services.infra.transparency import checkpoint_dir as default_dir
    from services.infra.transparency import directory_checkpoints, file_notes
    from services.replay.audit import Finding, Parallel, TrailSources, audit_trail, read_database_trail

    legacy: list[tuple[str, Checkpoint]] = []
    external: list[tuple[str, str]] = []
    extra: list[Finding] = []
    if checkpoint_file is not None:
        legacy += [(str(checkpoint_file), cp) for cp in file_checkpoints(checkpoint_file)]
        external += [(str(checkpoint_file), note) for note in file_notes(checkpoint_file)]
    directory = checkpoint_dir or default_dir(settings)
    if directory is not None:
        external += [(str(directory), note) for note in directory_checkpoints(directory)]
    if bus and settings.nats_url:
        from services.infra.bus import Bus
        from services.infra.checkpoints import checkpoint_stream, published_checkpoints, stream_protection
        from services.infra.transparency import published_notes

        connection = await Bus.connect(settings, name="rollbook-audit", identity="operator")
        try:
            problem = await stream_protection(connection)
            if problem is not None:
                extra.append(Finding("bus-stream-unprotected", None, None, None, None, problem))
            legacy += [("JetStream", cp) for cp in await published_checkpoints(connection)]
            external += [
                (f"JetStream {checkpoint_stream(connection)}", note)
                for note in await published_notes(connection)
            ]
        finally:
            await connection.close()
    notes, keys = await read_database_trail(store)
    sources = TrailSources(
        database_notes=notes,
        external_notes=external,
        database_keys=keys,
        trusted=verifiers,
        legacy=legacy,
        max_age=settings.audit_max_checkpoint_age if max_age is None else max_age,
    )
    # By default the CPUs this process may run on (a container's cpuset, not the host's count), at most 8:
    # each range holds a database connection.
    processes = settings.audit_verify_processes or min(len(os.sched_getaffinity(0)), 8)
    parallel = Parallel(store.database_url, store.duty, processes) if processes > 1 else None
    report = await audit_trail(store, sources, archive=archive, parallel=parallel)
    report.findings[:0] = extra
    return report


async def redact_signed(
    store: EventStore,
    settings: Settings,
    policy: Any,
    signer: Any,
    verifiers: list[Any],
    *,
    bus: Any = None,
) -> Any:
    """`rollbook audit redact` (services/replay/redact.py) wired to the signed log: the trail as it is must
    pass `audit verify` (every sink, JetStream too when ``bus`` is given), and the rewritten log is signed
    with ``signer`` into the database and every sink (the checkpoint directory, the file, JetStream)."""
    import math

    from services.infra.transparency import Checkpointer, MerkleLog, checkpoint_dir
    from services.replay.redact import redact_trail

    checkpointer = Checkpointer(
        store,
        signer,
        bus=bus,
        directory=checkpoint_dir(settings),
        file=Path(settings.checkpoint_file) if settings.checkpoint_file else None,
    )

    async def audit() -> Any:
        return await verify_trail(store, settings, verifiers, max_age=math.inf, bus=bus is not None)

    async def tree_head() -> tuple[int, bytes]:
        head = await MerkleLog(store).extend()
        return head.size, head.root

    async def sign() -> Any:
        checkpointer.tree = MerkleLog(store)  # over the rewritten log, from its first event
        checkpointer.last = None
        return await checkpointer.checkpoint(force=True)

    return await redact_trail(
        store, settings.url_for("owner"), policy, audit=audit, tree_head=tree_head, sign=sign
    )
