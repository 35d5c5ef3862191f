"""`rollbook sidecarset plan|verify`: the SidecarSet in-place upgrade round, offline and over the record
(docs/sidecarset.md, "Upgrade in place")."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from services.infra.settings import Settings

if TYPE_CHECKING:
    from services.infra.store import EventStore
    from services.kinds.sidecarset.rules.upgrade import SidecarSetRound

sidecarset_app = typer.Typer(
    name="sidecarset", help="SidecarSet in-place upgrades: plan a round, verify the record."
)


def register(app: typer.Typer) -> None:
    app.add_typer(sidecarset_app)


def round_json(result: SidecarSetRound) -> dict[str, Any]:
    return {
        "sidecarSet": result.sidecarset,
        "revision": result.revision_name,
        "latestRevision": result.revisions.latest.name,
        "revisionRecorded": result.revisions.record is not None,
        "revisionsPruned": result.revisions.pruned,
        "updateType": result.update_type,
        "paused": result.paused,
        "partition": result.partition,
        "maxUnavailable": result.max_unavailable,
        "expectedUpdated": result.expected_updated,
        "candidates": result.candidates,
        "notUpgradable": result.not_upgradable,
        "upgrades": [
            {"namespace": u.namespace, "pod": u.pod, "images": u.images, "patch": u.patch}
            for u in result.upgrades
        ],
        "status": result.status,
    }


@sidecarset_app.command("plan")
def plan_command(
    file: str = typer.Option(
        ..., "-f", "--file", help="state JSON {sidecarSet, pods, now[, revisions]}; - for stdin"
    ),
) -> None:
    """Decide one upgrade round for a SidecarSet and print it as JSON (exit 2 for an invalid SidecarSet)."""
    from services.kinds.sidecarset.rules.upgrade import plan_sidecarset
    from services.model.sidecarset import SidecarSetError

    data = json.loads(sys.stdin.read() if file == "-" else Path(file).read_text())
    now = datetime.fromisoformat(str(data["now"]).replace("Z", "+00:00"))
    try:
        result = plan_sidecarset(
            data["sidecarSet"], data.get("pods") or [], now, revisions=data.get("revisions") or []
        )
    except SidecarSetError as error:
        typer.echo(f"invalid SidecarSet: {error}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(round_json(result), indent=2, sort_keys=True))


@sidecarset_app.command("verify")
def verify_command(
    name: str = typer.Argument(..., help="SidecarSet name"),
    strict: bool = typer.Option(
        False, "--strict", help="also exit 1 when rounds were recorded by other planner rules"
    ),
) -> None:
    """Replay every recorded round of SidecarSet NAME from the event store; exit 1 at a divergence. Rounds
    recorded by other planner rules (an older rollbook) are reported as not re-verifiable, exit 0 unless
    --strict."""
    from services.cli.errors import CommandError
    from services.cli.runtime import run_with_store
    from services.kinds.sidecarset.rules.decisions import RULES_VERSION
    from services.replay.operations import verify_sidecarset
    from services.replay.verify import VerifyReport

    async def read(store: EventStore, _: Settings) -> VerifyReport:
        return await verify_sidecarset(store, name)

    def body() -> int:
        report = run_with_store(read)
        if report.events == 0:
            raise CommandError(
                f"nothing recorded for SidecarSet {name} (is the name right? a SidecarSet is cluster-scoped,"
                " named without a namespace)",
                exit_code=2,
            )
        for version, count in sorted(report.skipped.items()):
            typer.echo(
                f"NOT RE-VERIFIABLE SidecarSet {name}: {count} round{'s' if count != 1 else ''} recorded by"
                f" planner rules v{version}, this rollbook has v{RULES_VERSION}: not re-verifiable"
                " (`rollbook audit verify` still checks that they are unaltered)"
            )
        if report.divergence is not None:
            typer.echo(report.divergence.describe())
            return 1
        typer.echo(f"OK: {report.rounds} rounds of SidecarSet {name} replayed, every decision identical")
        return 1 if strict and report.skipped else 0

    raise typer.Exit(body())
