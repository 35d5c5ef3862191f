"""`rollbook nats-auth DIR`: the NATS identities for a server rollbook does not start itself (Compose,
Kubernetes, your own): one random password file per identity in DIR (0600, kept if already there) and
``DIR/nats-server.conf`` (0600), the nats-server configuration naming each identity's permissions for this
stream and subject prefix (ROLLBOOK_STREAM_NAME, ROLLBOOK_SUBJECT_PREFIX, ROLLBOOK_BUS_PARTITIONS).
Nothing secret is printed. docs/security-bus.md says what each identity may do.

    rollbook nats-auth .secrets/nats --routes nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222
    kubectl -n rollbook-system create secret generic rollbook-nats-credentials \\
        --from-file=auditor=.secrets/nats/auditor --from-file=planner=.secrets/nats/planner \\
        --from-file=executor=.secrets/nats/executor
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from services.cli.errors import CommandError
from services.infra.settings import Settings


def register(app: typer.Typer) -> None:
    @app.command("nats-auth")
    def nats_auth_command(
        directory: Annotated[Path, typer.Argument(help="Where the password files and nats-server.conf go.")],
        routes: Annotated[
            str,
            typer.Option(
                help="Cluster routes, comma-separated (nats://host:6222,...); empty: a single server."
            ),
        ] = "",
        cluster_listen: Annotated[
            str, typer.Option(help="Where a node listens for routes.")
        ] = "0.0.0.0:6222",
        cluster_name: Annotated[str, typer.Option(help="The cluster's name.")] = "rollbook",
        store_dir: Annotated[str, typer.Option(help="JetStream store directory of the server.")] = "/data",
    ) -> None:
        """Write NATS passwords (one file per identity) and the nats-server config with their permissions."""
        from services.infra.nats_auth import (
            IDENTITIES,
            ensure_credentials,
            server_config,
            write_private,
        )

        settings = Settings.from_env()
        try:
            passwords = ensure_credentials(directory)
        except OSError as error:
            raise CommandError(f"cannot write NATS credentials in {directory}: {error.strerror}") from None
        cluster = None
        if routes:
            listed = [route.strip() for route in routes.split(",") if route.strip()]
            cluster = {"name": cluster_name, "listen": cluster_listen, "routes": listed}
        config = json.loads(server_config(settings, passwords, cluster=cluster))
        config["jetstream"]["store_dir"] = store_dir  # beside sync_interval (flush each write)
        write_private(directory / "nats-server.conf", json.dumps(config, indent=2) + "\n")
        typer.echo(
            f"wrote {directory}/nats-server.conf and a password file per identity ({', '.join(IDENTITIES)})"
        )
        typer.echo(
            "give each service only its own file (ROLLBOOK_NATS_CREDENTIALS_DIR); keep admin and operator for"
            " people; docs/security-bus.md"
        )
