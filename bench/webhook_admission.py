"""How fast the SidecarSet webhook answers: AdmissionReviews over real HTTPS, and the pure injection alone.

    .venv/bin/python -m bench.webhook_admission [--requests 2000] [--concurrency 16] [--sidecarsets 200]

Prints latency percentiles and throughput for selected pods (injected) and unselected pods (no patch),
with --sidecarsets SidecarSets in the cache (one of them selects the injected pods).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.model import sidecarset as ss
from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder, MemorySink
from services.webhook.server import WebhookState, start_server
from services.webhook.tls import generate_self_signed


def sidecarsets(count: int) -> list[dict[str, Any]]:
    objects = []
    for i in range(count):
        objects.append(
            {
                "apiVersion": ss.API_VERSION,
                "kind": "SidecarSet",
                "metadata": {"name": f"ss-{i:04d}"},
                "spec": {
                    "selector": {"matchLabels": {"app": "bench" if i == 0 else f"other-{i}"}},
                    "containers": [
                        {
                            "name": f"agent-{i}",
                            "image": "busybox:1.36",
                            "shareVolumePolicy": {"type": "enabled"},
                            "transferEnv": [{"sourceContainerName": "app", "envName": "TZ"}],
                        }
                    ],
                },
            }
        )
    return objects


def pod(app_label: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "labels": {"app": app_label}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.25",
                    "env": [{"name": "TZ", "value": "UTC"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": obj,
        },
    }


def report(label: str, latencies: list[float], elapsed: float) -> None:
    ordered = sorted(latencies)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    print(
        f"{label:<28} n={len(ordered):>6}  p50={p(0.50):7.2f} ms  p99={p(0.99):7.2f} ms  "
        f"max={ordered[-1] * 1000:7.2f} ms  {len(ordered) / elapsed:8.0f} req/s"
    )


async def http_bench(args: argparse.Namespace) -> None:
    cache = SidecarSetCache()
    cache.replace(sidecarsets(args.sidecarsets))
    sink = MemorySink()
    recorder = InjectionRecorder(sink)
    recorder.start()
    state = WebhookState(sidecarsets=cache, namespaces=NamespaceLabels(), recorder=recorder)
    with tempfile.TemporaryDirectory() as tmp:
        certificate = generate_self_signed(Path(tmp))
        server = await start_server(state, certificate)
        connector = aiohttp.TCPConnector(ssl=certificate.client_context(), limit=args.concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            for label, app_label in (
                ("selected pod (injected)", "bench"),
                ("unselected pod (no patch)", "none"),
            ):
                latencies: list[float] = []
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(args.requests):
                    queue.put_nowait(i)

                async def worker(
                    app_label: str = app_label,
                    latencies: list[float] = latencies,
                    queue: asyncio.Queue[int] = queue,
                ) -> None:
                    while not queue.empty():
                        queue.get_nowait()
                        started = time.perf_counter()
                        async with session.post(
                            server.base_url + "/mutate-pod", json=review(pod(app_label))
                        ) as r:
                            await r.read()
                            assert r.status == 200
                        latencies.append(time.perf_counter() - started)

                started = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
                report(f"HTTPS {label}", latencies, time.perf_counter() - started)
        await server.stop()
    await recorder.stop()
    print(f"SidecarInjected events recorded: {len(sink.events)}")


def pure_bench(args: argparse.Namespace) -> None:
    parsed = [ss.parse_sidecarset(o) for o in sidecarsets(args.sidecarsets)]
    now = datetime.now(UTC)
    latencies = []
    started = time.perf_counter()
    for _ in range(args.requests):
        t = time.perf_counter()
        original = pod("bench")
        injected, _ = ss.inject(original, parsed, now=now, namespace="default")
        ss.json_patch(original, injected)
        latencies.append(time.perf_counter() - t)
    report("inject()+json_patch (pure)", latencies, time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sidecarsets", type=int, default=200)
    args = parser.parse_args()
    # One info line per injection is right for operators, but it would measure the terminal here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"{args.sidecarsets} SidecarSets cached, {args.requests} requests, concurrency {args.concurrency}")
    pure_bench(args)
    asyncio.run(http_bench(args))


if __name__ == "__main__":
    main()
