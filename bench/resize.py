"""Resize in place vs recreate: one CloneSet's cpu request raised, through pods/resize (resizePolicy
NotRequired) and then by recreation, on simcluster with a realistic kubelet (Timing.realistic: image
pulls, container start, readiness, resize actuation, graceful termination), the four services as
subprocesses, real Postgres and NATS.

    .venv/bin/python bench/resize.py [--replicas N] [--max-unavailable N]
                                     [--database-url URL] [--nats-url URL]

Phases: scale 0 -> N (every pod ready); cpu 100m -> 200m under InPlaceIfPossible (resized in place);
cpu 200m -> 300m under ReCreate (the same change, recreated). For each change: seconds and pods per
second until every pod runs the new requests and is ready, container restarts, pods recreated, and the
mean time a pod was unready (pods short of ``replicas`` ready, sampled in process every 50 ms). The
recreation phase is the ceiling this compares with: its ratio to the resize phase is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from kubernetes_asyncio import config  # noqa: E402

from bench._service_stack import service_stack  # noqa: E402
from services.simcluster import NodeConfig, SimCluster, SimConfig, Timing  # noqa: E402
from services.simcluster.resources import PODS  # noqa: E402
from tests.e2e.cluster import Cluster  # noqa: E402
from tests.plugins.stack import Stack, wait_for  # noqa: E402

NAME = "resized"
PODS_PER_NODE = 100


def cloneset(cpu: str, replicas: int, strategy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": NAME, "labels": {"app": NAME}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": {"containers": containers(cpu)}},
            "updateStrategy": strategy,
        },
    }


def containers(cpu: str) -> list[dict[str, Any]]:
    policy = [{"resourceName": r, "restartPolicy": "NotRequired"} for r in ("cpu", "memory")]
    return [
        {
            "name": "app",
            "image": "nginx:alpine",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
            "resizePolicy": policy,
        }
    ]


class Sampler:
    """Pods of the CloneSet short of ``replicas`` ready, integrated over time, read in process."""

    def __init__(self, sim: SimCluster, replicas: int) -> None:
        self.sim, self.replicas = sim, replicas
        self.unready_pod_seconds = 0.0
        self._task: asyncio.Task[None] | None = None

    def _ready(self) -> int:
        count = 0
        for pod in self.sim.store.objects[PODS].values():
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get("app") != NAME or meta.get("deletionTimestamp"):
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                count += 1
        return count

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.05)
            now = time.perf_counter()
            self.unready_pod_seconds += max(self.replicas - self._ready(), 0) * (now - last)
            last = now

    def __enter__(self) -> Sampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def snapshot(sim: SimCluster) -> dict[str, tuple[str, int]]:
    """Instance id -> (pod uid, container restarts) of the CloneSet's live pods."""
    out = {}
    for pod in sim.store.objects[PODS].values():
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get("app") != NAME or meta.get("deletionTimestamp"):
            continue
        instance = (meta.get("labels") or {}).get("apps.kruise.io/cloneset-instance-id", meta["name"])
        restarts = sum(
            int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or []
        )
        out[instance] = (meta["uid"], restarts)
    return out


async def main(args: argparse.Namespace) -> None:
    nodes = tuple(
        NodeConfig(name=f"sim-node-{i}", cpu_millis=128_000, max_pods=PODS_PER_NODE + 20)
        for i in range(math.ceil(args.replicas / PODS_PER_NODE) + 1)
    )
    sim_config = SimConfig(nodes=nodes, timing=Timing.realistic(), kubelet_events=False)
    async with service_stack(args.database_url, args.nats_url, sim_config) as running:
        await run(running.stack, running.sim, args)


async def run(stack: Stack, sim: SimCluster, args: argparse.Namespace) -> None:
    await stack.start("auditor", "watcher", "planner", "executor")
    n = args.replicas
    in_place = {"type": "InPlaceIfPossible", "maxUnavailable": args.max_unavailable}
    api = await config.new_client_from_config(config_file=str(sim.kubeconfig_path))
    async with api:
        cluster = Cluster(api)
        await cluster.create_cloneset(cloneset("100m", 0, in_place))

        async def all_at(cpu: str) -> bool:
            pods = await cluster.pods(NAME)
            return len(pods) == n and all(_ready(p) and _actuated_cpu(p) == cpu for p in pods.values())

        started = time.perf_counter()
        await cluster.patch_cloneset(NAME, {"spec": {"replicas": n}})
        await wait_for(lambda: all_at("100m"), within=1800, interval=0.2, what="scale-up")
        print(f"replicas={n} nodes={len(sim.nodes)} maxUnavailable={args.max_unavailable} (Timing.realistic)")
        print(f"scale 0->{n}: {time.perf_counter() - started:7.2f} s")
        results = []
        for label, cpu, strategy in (
            ("resize in place (NotRequired)", "200m", in_place),
            ("recreate (ReCreate)", "300m", {"type": "ReCreate", "maxUnavailable": args.max_unavailable}),
        ):
            before = snapshot(sim)
            with Sampler(sim, n) as sampler:
                started = time.perf_counter()
                await cluster.patch_cloneset(
                    NAME,
                    {
                        "spec": {
                            "updateStrategy": strategy,
                            "template": {"spec": {"containers": containers(cpu)}},
                        }
                    },
                )
                await wait_for(lambda cpu=cpu: all_at(cpu), within=1800, interval=0.2, what=label)
                seconds = time.perf_counter() - started
            after = snapshot(sim)
            recreated = sum(1 for i, (uid, _) in after.items() if before.get(i, ("", 0))[0] != uid)
            restarts = sum(r for i, (uid, r) in after.items() if before.get(i, ("", 0))[0] == uid) - sum(
                before[i][1] for i, (uid, _) in after.items() if before.get(i, ("", 0))[0] == uid
            )
            unready = sampler.unready_pod_seconds / n
            results.append(seconds)
            print(
                f"{label:32s} {seconds:7.2f} s  {n / seconds:7.1f} pods/s  container restarts {restarts}"
                f"  pods recreated {recreated}  unready per pod {unready:6.2f} s"
            )
        print(f"recreate / resize time: {results[1] / results[0]:.2f}x")


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _actuated_cpu(pod: dict[str, Any]) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    app = next((s for s in statuses if s.get("name") == "app"), {})
    return ((app.get("resources") or {}).get("requests") or {}).get("cpu")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--max-unavailable", type=int, default=50)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--nats-url", default=os.environ.get("ROLLBOOK_NATS_URL", "nats://127.0.0.1:4222"))
    asyncio.run(main(parser.parse_args()))
