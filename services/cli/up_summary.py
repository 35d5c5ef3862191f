"""What `rollbook up` says: one summary once every service is ready (services and their endpoints, the
stack's URLs, the kubeconfig, where the logs are), then nothing unless something needs attention (a
service that exits is named with its log). The services log to ``<data dir>/logs/<service>.log``."""

from __future__ import annotations

import time
from pathlib import Path

from services.infra.redact import redacted
from services.infra.settings import Settings


def log_dir(settings: Settings) -> Path:
    return settings.data_path / "logs"


def summary(settings: Settings, ports: dict[str, int], started: float) -> str:
    """The lines printed once everything is ready (``ports``: each service's HTTP port)."""
    host = settings.http_host
    rows = [
        (service, f"http://{host}:{port}  (/healthz /readyz /metrics)") for service, port in ports.items()
    ]
    rows += [
        ("postgres", redacted(settings.database_url)),
        ("nats", redacted(settings.nats_url)),
        *(
            [("nats auth", f"{settings.nats_credentials_dir}/<identity> (docs/security-bus.md)")]
            if settings.nats_credentials_dir
            else []
        ),
        ("kubeconfig", settings.kubeconfig or "in-cluster config, else ~/.kube/config"),
        ("logs", f"{log_dir(settings)}/<service>.log"),
        ("next", "rollbook status; rollbook get NS/NAME -w; rollbook stack (URLs for psql)"),
        ("stop", "Ctrl-C (or SIGTERM): the services finish their work, then the servers stop"),
    ]
    lines = [f"rollbook up: ready in {time.monotonic() - started:.1f}s"]
    lines += [f"  {label:<10}  {value}" for label, value in rows]
    return "\n".join(lines)
