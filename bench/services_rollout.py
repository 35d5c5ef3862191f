"""End-to-end rollout benchmark: the four services as subprocesses, a simcluster (zero-delay kubelet) in
this process, real Postgres and NATS. Prints how long each phase takes and what the trail holds.

    .venv/bin/python bench/services_rollout.py [--replicas N] [--max-unavailable N] [--executors N]
                                                    [--database-url URL] [--nats-url URL]

Phases: scale 0 -> N (every pod ready), then an InPlaceIfPossible image rollout (gracePeriodSeconds 0)
until every pod is updated and ready. Figures: seconds per phase, pods per second, events stored, pod
actions, planning rounds, and the planner's mean round time from its /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import asyncpg  # noqa: E402
from kubernetes_asyncio import config  # noqa: E402

from bench._service_stack import service_stack  # noqa: E402
from services.infra.database import asyncpg_url  # noqa: E402
from services.simcluster import SimCluster, SimConfig  # noqa: E402
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image  # noqa: E402
from tests.plugins.stack import Stack, wait_for  # noqa: E402

NAME = "sample"


async def main(args: argparse.Namespace) -> None:
    async with service_stack(args.database_url, args.nats_url, SimConfig()) as running:
        await run(running.stack, running.sim, args, running.database_url)


async def run(stack: Stack, sim: SimCluster, args: argparse.Namespace, database_url: str) -> None:
    await stack.start("auditor", "watcher", "planner", "executor")
    for index in range(1, args.executors):
        await stack.start("executor", name=f"executor-{index + 1}")
    api = await config.new_client_from_config(config_file=str(sim.kubeconfig_path))
    async with api:
        cluster = Cluster(api)
        strategy = {
            "type": "InPlaceIfPossible",
            "maxUnavailable": args.max_unavailable,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0},
        }
        seed = seed_cloneset("cloneset-sample.yaml", replicas=0, updateStrategy=strategy)
        await cluster.create_cloneset(seed)
        n = args.replicas

        async def all_on(image: str) -> Any:
            pods = await cluster.pods(NAME)
            return len(pods) == n and all(is_ready(p) and image_of(p) == image for p in pods.values())

        started = time.perf_counter()
        await cluster.patch_cloneset(NAME, {"spec": {"replicas": n}})
        await wait_for(lambda: all_on("nginx:alpine"), within=600, interval=0.05, what="scale-up")
        scale_s = time.perf_counter() - started
        started = time.perf_counter()
        await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
        await wait_for(lambda: all_on("nginx:mainline"), within=600, interval=0.05, what="rollout")
        rollout_s = time.perf_counter() - started
        planner_metrics = await stack.get_text("planner", "/metrics")

    conn = await asyncpg.connect(asyncpg_url(database_url))
    counts = dict(await conn.fetch("SELECT type, count(*) FROM events GROUP BY type"))
    await conn.close()
    total_s = _metric(planner_metrics, "rollbook_planning_seconds_sum")
    rounds = _metric(planner_metrics, "rollbook_planning_seconds_count")
    print(f"replicas={n} maxUnavailable={args.max_unavailable} executors={args.executors}")
    print(f"scale 0->{n}:        {scale_s:6.2f} s  ({n / scale_s:6.1f} pods/s)")
    print(f"in-place rollout:  {rollout_s:6.2f} s  ({n / rollout_s:6.1f} pods/s)")
    print(
        f"events stored:     {sum(counts.values())}  ("
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + ")"
    )
    mean_ms = 1000 * total_s / max(rounds, 1)
    print(f"planning calls:    {int(rounds)}  mean {mean_ms:.2f} ms (catch-up + decide + append)")


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--max-unavailable", type=int, default=5)
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--nats-url", default=os.environ.get("ROLLBOOK_NATS_URL", "nats://127.0.0.1:4222"))
    asyncio.run(main(parser.parse_args()))
