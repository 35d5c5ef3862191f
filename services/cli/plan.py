"""`rollbook plan -f FILE|-`: print the plan for one observed state as JSON (docs/plan.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_command(
        file: str = typer.Option(
            ..., "-f", "--file", help="state JSON (cloneSet, pods, pvcs, revisions, now); - for stdin"
        ),
    ) -> None:
        """Plan one reconcile round for a CloneSet and print the plan as JSON."""
        from services.kinds.cloneset.rules.plan import plan_json

        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        sys.stdout.buffer.write(plan_json(data) + b"\n")
        sys.stdout.flush()
