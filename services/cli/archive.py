"""`rollbook archive --before DATE --to DIR`: write the months of the event log before DATE to files, then
drop them from the database (docs/retention.md)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from services.cli.runtime import run_command
from services.infra.settings import Settings


def parse_date(option: str, value: str) -> datetime:
    """An ISO 8601 date or time; one without a zone is UTC. typer.BadParameter otherwise."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{option} takes an ISO 8601 date, e.g. 2026-01-01, got {value!r}") from None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return moment


def register(app: typer.Typer) -> None:
    @app.command("archive")
    def archive_command(
        before: Annotated[
            str,
            typer.Option("--before", help="archive the partitions (months) that end at or before this date"),
        ],
        to: Annotated[Path, typer.Option("--to", help="directory of the archive (the same one every time)")],
    ) -> None:
        """Write the event log's partitions that end before DATE to gzip JSON-lines files in DIR, with the
        hashes and signed checkpoints that verify them, then drop them from the database (as the owner role:
        ROLLBOOK_DATABASE_OWNER_URL). Safe to run again: nothing is dropped that is not in a file."""
        moment = parse_date("--before", before)
        if to.exists() and not to.is_dir():
            raise typer.BadParameter(f"--to {to} is not a directory")

        async def body(settings: Settings) -> int:
            from services.cli.errors import CommandError
            from services.infra.archive import ArchiveError, archive_before

            try:
                outcome = await archive_before(settings.url_for("owner"), moment, to)
            except ArchiveError as error:
                raise CommandError(str(error)) from None
            if outcome.events:
                rate = outcome.events / outcome.seconds_writing if outcome.seconds_writing else 0.0
                typer.echo(
                    f"archived {outcome.events} events (positions {outcome.first_position}-"
                    f"{outcome.last_position}) to {to / (outcome.file or '')} ({rate:,.0f} events/s written)"
                )
                if outcome.dropped:
                    typer.echo(f"dropped partitions: {', '.join(outcome.dropped)}")
                for name, left in outcome.kept.items():
                    typer.echo(f"kept {left} events of {name} in the database (after the archived prefix)")
                if outcome.reason:
                    typer.echo(f"stopped at position {outcome.last_position}: {outcome.reason}")
            else:
                typer.echo(f"nothing archived: {outcome.reason}")
            return 0

        raise typer.Exit(run_command(body, migrate=False))
