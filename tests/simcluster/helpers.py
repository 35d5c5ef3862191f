"""Small helpers for simcluster tests: object factories and polling through the API."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from kubernetes_asyncio import client

from services.simcluster import SimCluster

T = TypeVar("T")


def pod_manifest(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "web"}},
        "spec": {
            "containers": [{"name": "app", "image": "nginx:1.25"}, {"name": "log", "image": "fluentd:1.0"}]
        },
    }
    body["spec"].update(spec)
    return body


async def wait_until(probe: Callable[[], Awaitable[T]], check: Callable[[T], bool], within: float = 5.0) -> T:
    """Poll ``probe`` until ``check`` holds; fail with the last value seen."""
    deadline = time.monotonic() + within
    value = await probe()
    while not check(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s; last value: {value!r}")
        await asyncio.sleep(0.01)
        value = await probe()
    return value


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


async def ready_pod(core: client.CoreV1Api, name: str, namespace: str = "default") -> client.V1Pod:
    return await wait_until(lambda: core.read_namespaced_pod(name, namespace), is_ready)


class Kubectl:
    """kubectl against one simcluster, run without blocking (simcluster serves from this event loop)."""

    def __init__(self, binary: Path, sim: SimCluster, cache_dir: Path) -> None:
        self.base = [str(binary), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(cache_dir)]

    async def __call__(self, *args: str, check: bool = True) -> str:
        process = await asyncio.create_subprocess_exec(
            *self.base, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        if check and process.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({process.returncode}): {err.decode()}")
        return out.decode() + err.decode()


def rows(table: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in table.strip().splitlines()]


@contextlib.asynccontextmanager
async def serving(path: str, handler: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[str]:
    """``handler`` served over HTTP at ``path`` on 127.0.0.1 (a webhook for the cluster to call): its URL."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()
