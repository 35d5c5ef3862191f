"""`rollbook stack`: the Postgres and NATS URLs of the running stack, found as every command finds them
(services/infra/stack.py: the configured URLs, else the embedded servers `rollbook up` runs on
ROLLBOOK_DATA_DIR).

    rollbook stack                  # one line per server, with where the URL came from
    psql "$(rollbook stack --postgres)"
    eval "$(rollbook stack --env)"  # later commands, and other tools, use the same servers
"""

from __future__ import annotations

import shlex

import typer

from services.cli.errors import CommandError
from services.infra.settings import Settings


def register(app: typer.Typer) -> None:
    @app.command("stack")
    def stack_command(
        postgres: bool = typer.Option(
            False, "--postgres", help="Print only the reader's Postgres URL (for psql; no password in it)."
        ),
        nats: bool = typer.Option(False, "--nats", help="Print only the NATS URL."),
        env: bool = typer.Option(
            False, "--env", help="Print export lines for ROLLBOOK_DATABASE_URL and ROLLBOOK_NATS_URL."
        ),
        wait: float = typer.Option(
            0.0, "--wait", help="Seconds to wait for a stack that is starting (`rollbook up &`)."
        ),
    ) -> None:
        """Print the running stack's Postgres and NATS URLs (exit 1 when none runs)."""
        import time

        from services.infra.stack import find_stack

        settings = Settings.from_env()
        deadline = time.monotonic() + wait
        found = find_stack(settings)
        while not (found.database_url and found.nats_url) and time.monotonic() < deadline:
            time.sleep(0.2)  # a stack starting: its servers appear one after the other
            found = find_stack(settings)
        if not found.database_url and not found.nats_url:
            raise CommandError(
                f"no running stack on data dir {settings.data_path} and no ROLLBOOK_DATABASE_URL /"
                " ROLLBOOK_NATS_URL: start one with `rollbook up`"
            )
        reader_url = found.database_reader_url or found.database_url
        wanted = [(postgres, reader_url, "Postgres"), (nats, found.nats_url, "NATS")]
        if postgres or nats:
            for asked, url, what in wanted:
                if asked and not url:
                    raise CommandError(f"no {what} running on data dir {settings.data_path}")
                if asked:
                    typer.echo(url)
            return
        if env:
            for variable, url in (
                ("ROLLBOOK_DATABASE_URL", found.database_url),
                ("ROLLBOOK_DATABASE_READER_URL", found.database_reader_url),
                ("ROLLBOOK_NATS_URL", found.nats_url),
            ):
                if url:
                    typer.echo(f"export {variable}={shlex.quote(url)}")
            return
        for label, url, source in (
            ("postgres", found.database_url, found.database_source),
            ("nats", found.nats_url, found.nats_source),
            *([("reader", reader_url, found.database_source)] if reader_url != found.database_url else []),
        ):
            typer.echo(f"{label:9} {url or '-':48} {source or 'not running'}")
        typer.echo(f"data dir  {settings.data_path}")
