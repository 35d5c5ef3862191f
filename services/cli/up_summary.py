"""What `rollbook up` says: one summary once every service is ready (services and their endpoints, the
stack's URLs, the kubeconfig, where the logs are), then nothing unless something needs attention (a
service that exits is named with its log). The services log to ``<data dir>/logs/<service>.log``."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from services.infra.redact import redacted
from services.infra.settings import Settings


def log_dir(settings: Settings) -> Path:
    return settings.data_path / "logs"


def summary(settings: Settings, ports: dict[str, int], started: float) -> str:
    """The lines printed once everything is ready (``ports``: each service's HTTP port)."""
    from services.cli.terminal import invocation

    host, me = settings.http_host, invocation()
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
        ("next", f"{me} status; {me} get NS/NAME -w; {me} stack (URLs for psql)"),
        ("stop", "Ctrl-C (or SIGTERM): the services finish their work, then the servers stop"),
    ]
    lines = [f"rollbook up: ready in {time.monotonic() - started:.1f}s"]
    lines += [f"  {label:<10}  {value}" for label, value in rows]
    return "\n".join(lines)


STATE_FILE = "up.json"


@dataclass
class UpState:
    """``<data dir>/up.json`` while `rollbook up` runs: its pid, and whether every service is ready (with
    their ports). `rollbook stack --wait` waits for it to say ready; `up` removes it on its way out."""

    settings: Settings

    @property
    def path(self) -> Path:
        return self.settings.data_path / STATE_FILE

    def write(self, *, ready: bool, ports: dict[str, int] | None = None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.tmp")
        partial.write_text(json.dumps({"pid": os.getpid(), "ready": ready, "ports": ports or {}}))
        partial.replace(self.path)  # atomic: a reader sees the old state or the new one

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def running_up(data_path: Path) -> dict[str, object] | None:
    """The state of the `rollbook up` running on ``data_path`` (its up.json, when its pid is alive)."""
    import psutil

    try:
        state = json.loads((data_path / STATE_FILE).read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not psutil.pid_exists(pid):
        return None
    return dict(state)
