"""`rollbook webhook` runs the SidecarSet webhook; `rollbook webhook-config` prints real-cluster config."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
import yaml

from services.domain.settings import Settings
from services.webhook import register as registration
from services.webhook.service import WebhookOptions, run_webhook
from services.webhook.tls import DEFAULT_HOSTS


async def _serve(settings: Settings, options: WebhookOptions) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    async with run_webhook(settings, options) as running:
        typer.echo(f"webhook listening on {running.base_url}", err=True)
        await stop.wait()


def webhook_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTPS port (0 = pick a free one).")] = 9443,
    cert_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where a generated self-signed CA and certificate go (default: <data_dir>/webhook-tls)."
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serving certificate (PEM); with --tls-key, no generation.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Serving key (PEM).")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(help="CA bundle (PEM) for caBundle; default: the certificate.")
    ] = None,
    san: Annotated[
        list[str] | None,
        typer.Option("--san", help="Names/IPs of a generated certificate; repeat for several."),
    ] = None,
    register: Annotated[
        bool,
        typer.Option(
            help="Register URL-based webhook configurations pointing at this server (local/simcluster)."
        ),
    ] = True,
    failure_policy: Annotated[
        str, typer.Option(help="Pod webhook failurePolicy: Ignore (default) or Fail.")
    ] = "Ignore",
) -> None:
    """Run the SidecarSet injection webhook until interrupted."""
    if failure_policy not in ("Ignore", "Fail"):
        raise typer.BadParameter("must be Ignore or Fail", param_hint="--failure-policy")
    options = WebhookOptions(
        host=host,
        port=port,
        cert_dir=cert_dir,
        cert_file=tls_cert,
        key_file=tls_key,
        ca_file=tls_ca,
        hosts=tuple(san or DEFAULT_HOSTS),
        register=register,
        failure_policy=failure_policy,
    )
    asyncio.run(_serve(Settings.from_env(), options))


def webhook_config_command(
    ca_file: Annotated[
        Path, typer.Option(help="CA bundle (PEM) that signs the webhook's serving certificate.")
    ],
    namespace: Annotated[str, typer.Option(help="Namespace of the webhook Service.")] = "rollbook-system",
    service: Annotated[str, typer.Option(help="Name of the webhook Service.")] = "rollbook-webhook",
    port: Annotated[int, typer.Option(help="Service port.")] = 443,
    failure_policy: Annotated[
        str, typer.Option(help="Pod webhook failurePolicy: Ignore or Fail.")
    ] = "Ignore",
) -> None:
    """Print service-based webhook configurations for a real cluster (kubectl apply -f -)."""
    ca_bundle = ca_file.read_bytes()
    documents = [
        registration.mutating_configuration(
            registration.service_client_config(namespace, service, "/mutate-pod", ca_bundle, port),
            failure_policy=failure_policy,
        ),
        registration.validating_configuration(
            registration.service_client_config(namespace, service, "/validate-sidecarset", ca_bundle, port)
        ),
    ]
    typer.echo(yaml.safe_dump_all(documents, sort_keys=False), nl=False)


def register(app: typer.Typer) -> None:
    app.command("webhook")(webhook_command)
    app.command("webhook-config")(webhook_config_command)
