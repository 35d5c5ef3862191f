"""`rollbook shadow report`'s summary (pure) and `rollbook up --shadow`'s services."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.cli.services import services_for
from services.cli.shadow import render, summarise
from services.infra.settings import Settings

AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def row(rollout: str | None, verdict: str, pod: str = "web-a", pattern: str | None = None) -> dict[str, Any]:
    return {
        "rollout_id": rollout,
        "action": "updateInPlace",
        "pod": pod,
        "at": AT,
        "verdict": verdict,
        "reason": f"rollbook reason for {pod}",
        "pattern": pattern,
        "rollout_outcome": "succeeded" if rollout else None,
        "from_revision": "web-old" if rollout else None,
        "to_revision": "web-new" if rollout else None,
    }


def test_one_summary_per_rollout_with_its_differences() -> None:
    rows = [
        row("default/web@web-new", "agree"),
        row(None, "differ", "web-x"),
        row("default/web@web-new", "differ", "web-b", "above maxUnavailable"),
        row("default/web@web-new", "unknown", "web-c"),
        row("default/web@web-2", "unknown"),
    ]
    first, outside, last = summarise(rows)
    assert (first.rollout_id, first.compared, first.agree, first.differ, first.unknown) == (
        "default/web@web-new", 3, 1, 1, 1,
    )  # fmt: skip
    assert (first.verdict, first.patterns) == ("differs", {"above maxUnavailable": 1})
    assert [(d.pod, d.pattern) for d in first.differences] == [("web-b", "above maxUnavailable")]
    assert (outside.rollout_id, outside.verdict) == (None, "differs")
    assert last.verdict == "undecided"
    lines = render("default", "web", [first])
    assert lines[1] == (
        "default/web@web-new (old → new, succeeded): differs: 3 compared, 1 agree, 1 differ, 1 unknown,"
        " 1 above maxUnavailable"
    )
    assert lines[2].endswith("updateInPlace web-b: rollbook reason for web-b [above maxUnavailable]")


def test_only_agreement_reads_agrees() -> None:
    [summary] = summarise([row("r", "agree"), row("r", "agree", "web-b")])
    assert (summary.verdict, summary.differences) == ("agrees", [])


def test_up_in_shadow_mode_starts_no_executor() -> None:
    assert services_for(Settings()) == ("watcher", "planner", "executor", "auditor")
    assert services_for(Settings(shadow=True)) == ("watcher", "planner", "auditor")
