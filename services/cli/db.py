"""`rollbook db`: the schema of the event store (Alembic migrations) on the configured Postgres.

rollbook db upgrade [--revision head] [--set-passwords]
                                           apply migrations (what services do at start in embedded mode);
                                           then set the duty logins' passwords from their URLs
rollbook db current                        print the revision the database is at
rollbook db downgrade --revision REV --yes revert to REV ("base" drops the events table and every event)
"""

from __future__ import annotations

import typer

from services.cli.runtime import run_command
from services.infra.settings import Settings

db_app = typer.Typer(name="db", help="Event store schema: apply, inspect or revert migrations.")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app)


@db_app.command("upgrade")
def upgrade_command(
    revision: str = typer.Option("head", help="target revision"),
    set_passwords: bool = typer.Option(
        False,
        "--set-passwords",
        help="then give the writer, reader and webhook logins the passwords in ROLLBOOK_DATABASE_URL,"
        " ROLLBOOK_DATABASE_READER_URL and ROLLBOOK_DATABASE_WEBHOOK_URL (deploy/'s migration Job)",
    ),
) -> None:
    """Apply migrations up to REVISION (default: the newest)."""

    import asyncio

    from services.cli.errors import CommandError
    from services.infra.database import upgrade
    from services.infra.db_roles import Duty, LoginPasswordError, set_login_passwords

    async def body(settings: Settings) -> int:
        await asyncio.to_thread(upgrade, settings.url_for("owner"), revision)
        typer.echo(f"database at {await _current(settings.url_for('owner')) or 'base'}")
        if set_passwords:
            urls: dict[Duty, str] = {
                "writer": settings.database_url,
                "reader": settings.database_reader_url,
                "webhook": settings.database_webhook_url,
            }
            try:
                done = await set_login_passwords(settings.url_for("owner"), urls)
            except LoginPasswordError as error:
                raise CommandError(str(error)) from None
            typer.echo(f"passwords set: {', '.join(done.roles) or 'none'}")
            if done.as_owner:
                typer.echo(
                    f"warning: the {', '.join(done.as_owner)} URL(s) log in as the owner's login, whose"
                    " rights those services then have (each SET ROLEs to its duty, but may RESET it): give"
                    " each duty its own login outside a trial (docs/security-database.md)",
                    err=True,
                )
        return 0

    raise typer.Exit(run_command(body, migrate=False))


@db_app.command("current")
def current_command() -> None:
    """Print the migration revision the database is at ("base" when none is applied)."""

    async def body(settings: Settings) -> int:
        typer.echo(await _current(settings.url_for("owner")) or "base")
        return 0

    raise typer.Exit(run_command(body, migrate=False))


@db_app.command("downgrade")
def downgrade_command(
    revision: str = typer.Option(..., help='target revision; "base" removes the events table'),
    yes: bool = typer.Option(False, "--yes", help="confirm: reverting can drop recorded events"),
) -> None:
    """Revert migrations down to REVISION. Reverting the first migration deletes every stored event."""
    import asyncio

    if not yes:
        typer.echo(
            "refusing to downgrade without --yes: it can drop the events table and every event", err=True
        )
        raise typer.Exit(2)

    from services.infra.database import downgrade

    async def body(settings: Settings) -> int:
        await asyncio.to_thread(downgrade, settings.url_for("owner"), revision)
        typer.echo(f"database at {await _current(settings.url_for('owner')) or 'base'}")
        return 0

    raise typer.Exit(run_command(body, migrate=False))


async def _current(database_url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine

    from services.infra.database import sqlalchemy_url

    engine = create_async_engine(sqlalchemy_url(database_url))
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_revision()
            )
    finally:
        await engine.dispose()


__all__ = ["register"]
