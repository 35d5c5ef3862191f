"""simcluster benchmark: create N pods, list them, fan a watch out to W watchers. Prints the figures.

    .venv/bin/python bench/simcluster.py [--pods 10000] [--watchers 4] [--concurrency 64]

simcluster runs as its own process (`rollbook simcluster --instant`), the way users run it; the scheduler and
kubelet are on, so every pod is also bound and brought to Ready (about 4 writes per pod). Goal: a list of
10,000 pods answered in under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml
from kubernetes_asyncio import client, config

ROOT = Path(__file__).resolve().parents[1]


def pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{i:05d}", "labels": {"app": "bench", "shard": str(i % 10)}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
    }


async def watcher(
    session: aiohttp.ClientSession, url: str, rv: str, expected: int, done: asyncio.Future
) -> None:
    added = 0
    events = 0
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"}
    async with session.get(f"{url}/api/v1/namespaces/bench/pods", params=params) as response:
        async for line in response.content:
            events += 1
            if b'"ADDED"' in line[:20]:
                added += 1
                if added == expected:
                    done.set_result((time.perf_counter(), events))
                    return


async def run(pods: int, watchers: int, concurrency: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="simcluster-bench-"))
    kubeconfig = tmp / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "simcluster",
        "--instant",
        "--kubeconfig",
        str(kubeconfig),
        "--max-pods",
        str(pods),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        await process.stdout.readline()
        url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        connector = aiohttp.TCPConnector(limit=concurrency + watchers + 4)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": "bench"}}) as r:
                assert r.status == 201, await r.text()
            async with session.get(f"{url}/api/v1/namespaces/bench/pods") as r:
                rv = (await r.json())["metadata"]["resourceVersion"]
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in range(watchers)]
            tasks = [asyncio.create_task(watcher(session, url, rv, pods, f)) for f in futures]
            await asyncio.sleep(0.2)

            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(pods):
                queue.put_nowait(i)

            async def creator() -> None:
                while not queue.empty():
                    i = queue.get_nowait()
                    async with session.post(f"{url}/api/v1/namespaces/bench/pods", json=pod(i)) as r:
                        assert r.status == 201, await r.text()

            started = time.perf_counter()
            await asyncio.gather(*(creator() for _ in range(concurrency)))
            created = time.perf_counter() - started
            print(
                f"create   {pods} pods ({concurrency} concurrent): {created:.2f} s "
                f"({pods / created:,.0f} pods/s)"
            )

            results = await asyncio.wait_for(asyncio.gather(*futures), 600)
            lags = [t - started for t, _ in results]
            print(
                f"watch    {watchers} watchers each saw all {pods} ADDED after {max(lags):.2f} s "
                f"(events per watcher incl. kubelet status updates: {results[0][1]:,})"
            )
            for task in tasks:
                task.cancel()
            # Let the kubelet finish bringing pods up: wait until the resourceVersion stops moving.
            last = ""
            while True:
                async with session.get(f"{url}/api/v1/namespaces/bench/pods", params={"limit": "1"}) as r:
                    current = (await r.json())["metadata"]["resourceVersion"]
                if current == last:
                    break
                last = current
                await asyncio.sleep(0.3)

            timings = []  # (response fully read, json decoded)
            size = 0
            for _ in range(5):
                t0 = time.perf_counter()
                async with session.get(f"{url}/api/v1/namespaces/bench/pods") as r:
                    body = await r.read()
                t1 = time.perf_counter()
                items = json.loads(body)["items"]
                timings.append((t1 - t0, time.perf_counter() - t0))
                size = len(body)
            assert len(items) == pods
            received = sorted(t for t, _ in timings)
            decoded = sorted(t for _, t in timings)
            print(
                f"list     {pods} pods ({size / 1e6:.1f} MB), median of 5: response read "
                f"{received[2] * 1000:.0f} ms, + json decode {decoded[2] * 1000:.0f} ms "
                f"(worst {decoded[-1] * 1000:.0f} ms)  goal < 1000 ms"
            )

            t0 = time.perf_counter()
            async with session.get(
                f"{url}/api/v1/namespaces/bench/pods",
                params={"labelSelector": "shard=3", "fieldSelector": "status.phase=Running"},
            ) as r:
                selected = len((await r.json())["items"])
            print(
                f"list     with label+field selector -> {selected} pods: "
                f"{(time.perf_counter() - t0) * 1000:.0f} ms"
            )

        api_client = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api_client:
            t0 = time.perf_counter()
            listed = await client.CoreV1Api(api_client).list_namespaced_pod("bench")
            print(
                f"list     {len(listed.items)} pods via kubernetes-asyncio (incl. model deserialisation): "
                f"{time.perf_counter() - t0:.2f} s"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--watchers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(run(args.pods, args.watchers, args.concurrency))


if __name__ == "__main__":
    main()
