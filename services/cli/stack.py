"""`rollbook stack`: the Postgres and NATS URLs of the running stack, found as every command finds them
(services/infra/stack.py: the configured URLs, else the embedded servers `rollbook up` runs on
ROLLBOOK_DATA_DIR).

    rollbook stack                  # one line per server, with where the URL came from
    psql "$(rollbook stack --postgres)"
    eval "$(rollbook stack --env)"  # later commands, and other tools, use the same servers

No secret is printed: passwords are left out of the URLs (masked in the table), and the embedded NATS
server's identities keep theirs in files; `--nats` names the operator's on stderr (docs/security-bus.md).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from services.cli.errors import CommandError
from services.infra.redact import redacted
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
            0.0,
            "--wait",
            help="Seconds to wait for a stack that is starting (`rollbook up &`): its servers, and the"
            " services of a `rollbook up` on the data dir until they are ready.",
        ),
    ) -> None:
        """Print the running stack's Postgres and NATS URLs (exit 1 when none runs)."""
        import time

        from services.cli.up_summary import running_up
        from services.infra.stack import find_stack

        if wait < 0:
            raise CommandError(f"--wait must be 0 or more seconds, not {wait:g}", exit_code=2)
        settings = Settings.from_env()
        deadline = time.monotonic() + wait

        def starting() -> bool:
            # Its servers appear one after the other, then `rollbook up`'s services become ready (its
            # up.json says so): with --wait, the stack is there once both have.
            servers = find_stack(settings)
            up = running_up(settings.data_path)
            return not (servers.database_url and servers.nats_url) or (up is not None and not up["ready"])

        while wait and starting() and time.monotonic() < deadline:
            time.sleep(0.2)
        found = find_stack(settings)
        if not found.database_url and not found.nats_url:
            raise CommandError(
                f"no running stack on data dir {settings.data_path} and no ROLLBOOK_DATABASE_URL /"
                " ROLLBOOK_NATS_URL: start one with `rollbook up`"
            )
        up = running_up(settings.data_path)
        if wait and up is not None and not up["ready"]:
            raise CommandError(
                f"`rollbook up` (pid {up['pid']}) on data dir {settings.data_path}: its services are not"
                f" ready after {wait:g}s; see {settings.data_path / 'logs'}"
            )
        # No secret is ever printed: a password in a configured URL is left out of what a client uses
        # (psql takes it from PGPASSWORD or ~/.pgpass) and masked in the table; the NATS identities'
        # passwords stay in their files, whose directory is named instead. Postgres: the reader's login.
        reader_url = found.database_reader_url or found.database_url
        usable = {
            "Postgres": redacted(reader_url, mask=""),
            "NATS": redacted(found.nats_url, mask=""),
        }
        credentials = found.nats_credentials_dir
        wanted = [(postgres, usable["Postgres"], "Postgres"), (nats, usable["NATS"], "NATS")]
        if postgres or nats:
            for asked, url, what in wanted:
                if asked and not url:
                    raise CommandError(f"no {what} running on data dir {settings.data_path}")
                if asked:
                    typer.echo(url)
            if nats and credentials:
                typer.echo(nats_login_hint(usable["NATS"], credentials), err=True)
            return
        if env:
            for variable, value in (
                ("ROLLBOOK_DATABASE_URL", redacted(found.database_url, mask="")),
                ("ROLLBOOK_DATABASE_READER_URL", redacted(found.database_reader_url, mask="")),
                ("ROLLBOOK_NATS_URL", usable["NATS"]),
                ("ROLLBOOK_NATS_CREDENTIALS_DIR", credentials),
            ):
                if value:
                    typer.echo(f"export {variable}={shlex.quote(value)}")
            return
        for label, url, source in (
            ("postgres", found.database_url, found.database_source),
            ("nats", found.nats_url, found.nats_source),
            *([("reader", reader_url, found.database_source)] if reader_url != found.database_url else []),
        ):
            typer.echo(f"{label:9} {redacted(url) or '-':48} {source or 'not running'}")
        if credentials:
            typer.echo(f"nats auth {credentials} (one password file per identity; operator: read-only)")
        if up is not None:
            ports: dict[str, int] = up.get("ports") or {}  # type: ignore[assignment]
            said = ", ".join(f"{name} :{port}" for name, port in ports.items())
            typer.echo(
                f"services  {'ready: ' + said if up['ready'] else 'starting'} (rollbook up, pid {up['pid']})"
            )
        typer.echo(f"data dir  {settings.data_path}")


def nats_login_hint(url: str, credentials: str) -> str:
    """How an operator logs in to the stack's NATS with a tool of their own, naming the password file,
    never printing the password."""
    from services.infra.nats_auth import ADMIN, OPERATOR

    password = shlex.quote(str(Path(credentials) / OPERATOR))
    return (
        f"NATS requires a user: read-only as {OPERATOR}, e.g. "
        f'nats --server {url} --user {OPERATOR} --password "$(cat {password})" stream ls'
        f" ({ADMIN}, in the same directory, may do anything)"
    )
