"""`rollbook api-token`: print the bearer token of the trail's HTTP endpoints (the auditor's /history,
`rollbook ui` beyond the loopback), on explicit request only; nothing else prints it.

    curl -H "Authorization: Bearer $(rollbook api-token)" "http://127.0.0.1:8083/history?after=0"

The token is the file ``ROLLBOOK_API_TOKEN_FILE`` (default ``<data dir>/api-token``, 0600), made on first
use (services/infra/api_auth.py). With ``ROLLBOOK_API_AUTH=kubernetes`` there is no such token: use a
Kubernetes token RBAC lets read (docs/security.md).
"""

from __future__ import annotations

import typer

from services.cli.errors import CommandError
from services.infra.settings import Settings


def register(app: typer.Typer) -> None:
    @app.command("api-token")
    def api_token_command() -> None:
        """Print the bearer token for /history and `rollbook ui --host` (created 0600 on first use)."""
        from services.infra.api_auth import ensure_token, token_path

        settings = Settings.from_env()
        if settings.api_auth != "token":
            raise CommandError(
                f"ROLLBOOK_API_AUTH is {settings.api_auth!r}: the endpoints take Kubernetes tokens"
                " (kubectl create token <serviceaccount>), there is no token file"
            )
        try:
            typer.echo(ensure_token(token_path(settings)))
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read or create the API token: {error}") from None
