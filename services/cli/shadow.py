"""`rollbook shadow report <namespace>/<cloneset>`: per rollout of a CloneSet rollbook only shadows, where
its controller's pod actions and rollbook's decisions agree and where they differ (docs/shadow.md).

Reads the ``shadow_agreement`` and ``rollouts`` views (Postgres only, like ``rollbook history``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Annotated, Any

import typer

from services.cli.history import QueryError, clock, connect, parse_workload, short
from services.cli.terminal import console
from services.infra.settings import Settings


@dataclass
class Difference:
    at: str
    action: str
    pod: str
    reason: str
    pattern: str | None


@dataclass
class RolloutAgreement:
    rollout_id: str | None  # None: actions outside any observed rollout (scaling by hand, say)
    from_revision: str | None
    to_revision: str | None
    outcome: str | None
    compared: int = 0
    agree: int = 0
    differ: int = 0
    unknown: int = 0
    patterns: dict[str, int] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``differs`` (any action differs), ``agrees`` (some agree, none differs), else ``undecided``."""
        if self.differ:
            return "differs"
        return "agrees" if self.agree else "undecided"


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[RolloutAgreement]:
    """One summary per rollout, in the order of their first compared action. Pure."""
    by_rollout: dict[str | None, RolloutAgreement] = {}
    for row in rows:
        key = row["rollout_id"]
        summary = by_rollout.get(key)
        if summary is None:
            summary = by_rollout[key] = RolloutAgreement(
                key, row.get("from_revision"), row.get("to_revision"), row.get("rollout_outcome")
            )
        summary.compared += 1
        verdict = str(row["verdict"])
        setattr(summary, verdict, getattr(summary, verdict) + 1)
        if row.get("pattern"):
            summary.patterns[row["pattern"]] = summary.patterns.get(row["pattern"], 0) + 1
        if verdict == "differ":
            at = row["at"]
            summary.differences.append(
                Difference(
                    at.isoformat() if hasattr(at, "isoformat") else str(at),
                    str(row["action"]),
                    str(row["pod"]),
                    str(row["reason"]),
                    row.get("pattern"),
                )
            )
    return list(by_rollout.values())


def render(namespace: str, name: str, summaries: list[RolloutAgreement]) -> list[str]:
    lines = [
        f"shadow report of {namespace}/{name}: its controller's pod actions against rollbook's decisions"
    ]
    for s in summaries:
        what = s.rollout_id or "outside any rollout"
        if s.rollout_id and s.to_revision:
            revisions = f"{short(s.from_revision, name)} → {short(s.to_revision, name)}"
            what += f" ({revisions}, {s.outcome or 'in progress'})"
        patterns = "".join(f", {count} {pattern}" for pattern, count in sorted(s.patterns.items()))
        lines.append(
            f"{what}: {s.verdict}: {s.compared} compared, {s.agree} agree, {s.differ} differ,"
            f" {s.unknown} unknown{patterns}"
        )
        for d in s.differences:
            tag = f" [{d.pattern}]" if d.pattern else ""
            lines.append(f"  {clock(datetime.fromisoformat(d.at))} {d.action} {d.pod}: {d.reason}{tag}")
    return lines


async def shadow_report(settings: Settings, namespace: str, name: str, as_json: bool) -> int:
    from services.infra import audit_queries  # asyncpg: imported by the command that uses it

    async with connect(settings) as connection:
        if await audit_queries.view_missing(connection, "shadow_agreement"):
            raise QueryError("the shadow views are missing from this database: run `alembic upgrade head`")
        rows = await audit_queries.shadow_agreement(connection, namespace, name)
    if not rows:
        console().print(
            f"no shadow trail for {namespace}/{name}: run `rollbook up --shadow`, or label the CloneSet"
            " rollbook.io/manage=shadow (docs/shadow.md)"
        )
        return 1
    summaries = summarise([dict(r) for r in rows])
    if as_json:
        print(json.dumps([{**asdict(s), "verdict": s.verdict} for s in summaries], indent=2))
    else:
        for line in render(namespace, name, summaries):
            console().print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def register(application: typer.Typer) -> None:
    shadow = typer.Typer(help="Shadow mode: CloneSets rollbook observes but does not drive (docs/shadow.md).")
    application.add_typer(shadow, name="shadow")

    @shadow.command("report")
    def report(
        workload: Annotated[str, typer.Argument(help="<namespace>/<cloneset>")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
    ) -> None:
        """Per rollout: where the controller's pod actions and rollbook's decisions agree and differ."""
        import asyncio

        namespace, name = parse_workload(workload)
        raise typer.Exit(asyncio.run(shadow_report(Settings.from_env(), namespace, name, as_json)))
