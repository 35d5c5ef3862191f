"""What `rollbook up` says: one summary once every service is ready (services and their endpoints, the
stack's URLs, the kubeconfig, where the logs are), then nothing unless something needs attention (a
service that exits is named with its log). The services log to ``<data dir>/logs/<service>.log``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from services.infra.settings import Settings

READY_TIMEOUT = 120.0


def log_dir(settings: Settings) -> Path:
    return settings.data_path / "logs"


def log_path(settings: Settings, service: str) -> Path:
    return log_dir(settings) / f"{service}.log"


def summary(settings: Settings, ports: dict[str, int], started: float) -> str:
    """The lines printed once everything is ready (``ports``: each service's HTTP port)."""
    host = settings.http_host
    rows = [
        (service, f"http://{host}:{port}  (/healthz /readyz /metrics)") for service, port in ports.items()
    ]
    rows += [
        ("postgres", settings.database_url),
        ("nats", settings.nats_url),
        ("kubeconfig", settings.kubeconfig or "in-cluster config, else ~/.kube/config"),
        ("logs", f"{log_dir(settings)}/<service>.log"),
        ("next", "rollbook status; rollbook get NS/NAME -w; rollbook stack (URLs for psql)"),
        ("stop", "Ctrl-C (or SIGTERM): the services finish their work, then the servers stop"),
    ]
    lines = [f"rollbook up: ready in {time.monotonic() - started:.1f}s"]
    lines += [f"  {label:<10}  {value}" for label, value in rows]
    return "\n".join(lines)


async def wait_ready(
    settings: Settings,
    services: Sequence[str],
    starts: dict[str, int],
    timeout: float = READY_TIMEOUT,  # noqa: ASYNC109 - checked between polls
) -> dict[str, int] | str:
    """Each service's port once its /readyz answers 200, or a message naming those not ready in time."""
    import asyncio

    import aiohttp

    from services.infra.runtime import logged_port

    ports: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while len(ports) < len(services):
            for service in services:
                if service in ports or service not in starts:  # not started yet: its log is an old run's
                    continue
                port = logged_port(log_path(settings, service), starts[service])
                if port and await _ready(session, f"http://{settings.http_host}:{port}/readyz"):
                    ports[service] = port
            if len(ports) == len(services):
                break
            if time.monotonic() > deadline:
                waiting = [s for s in services if s not in ports]
                return (
                    f"rollbook up: {', '.join(waiting)} not ready after {timeout:.0f}s;"
                    f" logs in {log_dir(settings)}"
                )
            await asyncio.sleep(0.2)
    return {service: ports[service] for service in services}


async def _ready(session: object, url: str) -> bool:
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    try:
        async with session.get(url) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False
