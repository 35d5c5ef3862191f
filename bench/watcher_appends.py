"""How fast the watcher stores a burst of watch events: batched appends against one append per event.

    .venv/bin/python bench/watcher_appends.py [--events 5000] [--clonesets 50] [--database-url URL]

A watch burst (pod changes spread over --clonesets CloneSets, as a rollout of many pods produces) goes
through the watcher's own code (``Watcher._on_watch_event``: diff against its cache, queue, the appender)
into a fresh database, twice in the same run:

- batched: as the watcher runs, each watch event queued and the appender storing what queued up
  meanwhile, one append per stream per cycle;
- one at a time (the ceiling to beat, the watcher's behaviour before batching): each watch event waits
  until its observation is stored before the next is handled.

Prints events/s, the bench process's CPU per event (the watcher's work: diff, queue, encode, append
call; the database's is not in it), store appends and events per append for each, and the ratio. The
process's garbage collector is set as the watcher's (``calm_cyclic_collector``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import structlog  # noqa: E402
from kubernetes_asyncio import client  # noqa: E402

from bench.scale import fresh_database, load  # noqa: E402
from services.infra.runtime import calm_cyclic_collector  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from services.infra.store import EventStore  # noqa: E402
from services.watcher.service import KindWatch, Watcher  # noqa: E402


def pod(run: str, index: int, clonesets: int, version: int) -> dict[str, Any]:
    """Pod ``index`` (owned by CloneSet index % clonesets) at ``version``, as a watch event carries it."""
    owner = f"{run}-cs-{index % clonesets:04d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{owner}-pod-{index:05d}",
            "namespace": "default",
            "uid": f"{run}-uid-{index:05d}",
            "resourceVersion": str(version),
            "labels": {"app": owner, "controller-revision-hash": f"{owner}-rev"},
            "annotations": {"bench/step": str(version)},  # a real change every time
            "ownerReferences": [
                {
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "CloneSet",
                    "name": owner,
                    "uid": f"{owner}-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]},
        "status": {"phase": "Running"},
    }


async def burst(
    store: EventStore, events: int, clonesets: int, *, one_at_a_time: bool
) -> tuple[float, float, int]:
    """Seconds (wall, and this process's CPU) to store ``events`` observations through the watcher, and
    the appends it made."""
    api = client.ApiClient()  # never called: the watch events are fed in
    watcher = Watcher(Settings(), store, api)
    pods = KindWatch("Pod", watcher.kinds[1].list_func)
    run = uuid.uuid4().hex[:8]
    appender = asyncio.create_task(watcher.append_queued())
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        for number in range(events):
            await watcher._on_watch_event(pods, "MODIFIED", pod(run, number % 1000, clonesets, number + 1))
            if one_at_a_time:
                await watcher._idle.wait()
        await watcher._idle.wait()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()
    return seconds, cpu, watcher.appends


async def main(args: argparse.Namespace) -> None:
    # The watcher logs one line per observation; not what is measured here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    calm_cyclic_collector()  # as the watcher process does
    async with fresh_database(args.database_url) as url:
        store = await EventStore.connect(url)
        try:
            print(f"{args.events} pod watch events over {args.clonesets} CloneSets; {load()}")
            results = {}
            for mode, one in (("one at a time", True), ("batched", False)):
                seconds, cpu, appends = await burst(store, args.events, args.clonesets, one_at_a_time=one)
                results[mode] = seconds
                print(
                    f"  {mode:14} {args.events / seconds:8.0f} events/s, "
                    f"{cpu / args.events * 1e6:4.0f} us CPU per event; {appends:6d} appends, "
                    f"{args.events / max(appends, 1):6.1f} events per append; {seconds:.2f} s; {load()}",
                    flush=True,
                )
            print(f"  batched / one at a time: {results['one at a time'] / results['batched']:.1f}x")
        finally:
            await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--clonesets", type=int, default=50)
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test"),
        help="Postgres server (a fresh database is created and dropped)",
    )
    asyncio.run(main(parser.parse_args()))
