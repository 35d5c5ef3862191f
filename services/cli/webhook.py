"""`rollbook webhook` runs the SidecarSet webhook; `rollbook webhook-config` prints real-cluster config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.runtime import CommandBody, run_command
from services.infra.settings import Settings

if TYPE_CHECKING:  # imported where used: `rollbook --help` must not pay for the webhook's dependencies
    from services.webhook.service import WebhookOptions


def _serve(options: WebhookOptions, record: str) -> CommandBody:
    import asyncio

    async def serve(settings: Settings) -> int:
        from kubernetes_asyncio.config.config_exception import ConfigException

        from services.infra.store import EventStore
        from services.webhook.recorder import EventSink, LogSink
        from services.webhook.revisions import StoreRevisions
        from services.webhook.service import run_webhook
        from services.webhook.sinks import EventStoreSink

        sink: EventSink
        if record == "store":
            # The store only: the auditor's relay publishes what is stored (no NATS identity here).
            store_sink = EventStoreSink(lambda: EventStore.connect(settings.database_url, duty="webhook"))
            sink = store_sink
            # The recorded revisions of SidecarSets pinning one are read from the same event store.
            revisions = StoreRevisions(
                lambda: EventStore.connect(settings.database_url, pool_size=2, duty="webhook"),
                timeout_seconds=settings.sidecarset_revisions_timeout,
            )
        else:
            store_sink, sink, revisions = None, LogSink(), None
        try:
            async with run_webhook(settings, options, sink, revisions) as running:
                typer.echo(f"webhook listening on {running.base_url}", err=True)
                await asyncio.Event().wait()  # until SIGINT/SIGTERM cancels us
        except ConfigException as err:
            where = settings.kubeconfig or "in-cluster config / ~/.kube/config"
            typer.echo(f"error: cannot load the Kubernetes configuration ({where}): {err}", err=True)
            return 1
        except TimeoutError:
            typer.echo(
                f"error: could not list SidecarSets and Namespaces from the API server within "
                f"{options.sync_timeout_seconds:g}s (see the watch_failed log lines)",
                err=True,
            )
            return 1
        finally:
            if store_sink is not None:
                await store_sink.close()
            if revisions is not None:
                await revisions.close()
        return 0

    return serve


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
    record: Annotated[
        str, typer.Option(help="Where SidecarInjected events go: store (the event store) or log.")
    ] = "store",
) -> None:
    """Run the SidecarSet injection webhook until interrupted."""
    if failure_policy not in ("Ignore", "Fail"):
        raise typer.BadParameter("must be Ignore or Fail", param_hint="--failure-policy")
    from services.webhook.service import WebhookOptions
    from services.webhook.tls import DEFAULT_HOSTS

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
    if record not in ("store", "log"):
        raise typer.BadParameter("must be store or log", param_hint="--record")
    settings = Settings.from_env()
    from services.webhook.admission import UNAVAILABLE_CHOICES

    if settings.sidecarset_revisions_unavailable not in UNAVAILABLE_CHOICES:
        typer.echo(
            "error: ROLLBOOK_SIDECARSET_REVISIONS_UNAVAILABLE must be one of "
            f"{', '.join(UNAVAILABLE_CHOICES)}, got {settings.sidecarset_revisions_unavailable!r}",
            err=True,
        )
        raise typer.Exit(2)
    # Migrations only for an embedded database; a given database is migrated by its owner, and the
    # webhook must start (and admit pods) even while that database is down.
    raise typer.Exit(
        run_command(_serve(options, record), settings=settings, migrate=not settings.database_url)
    )


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
    import yaml

    from services.webhook import register as registration

    ca_bundle = ca_file.read_bytes()
    documents = [
        registration.mutating_configuration(
            registration.service_client_config(namespace, service, "/mutate-pod", ca_bundle, port),
            failure_policy=failure_policy,
            sidecarset_client_config=registration.service_client_config(
                namespace, service, "/mutate-sidecarset", ca_bundle, port
            ),
        ),
        registration.validating_configuration(
            registration.service_client_config(namespace, service, "/validate-sidecarset", ca_bundle, port),
            cloneset_client_config=registration.service_client_config(
                namespace, service, "/validate-cloneset", ca_bundle, port
            ),
        ),
    ]
    typer.echo(yaml.safe_dump_all(documents, sort_keys=False), nl=False)


def register(app: typer.Typer) -> None:
    app.command("webhook")(webhook_command)
    app.command("webhook-config")(webhook_config_command)
