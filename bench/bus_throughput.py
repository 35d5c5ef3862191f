"""Bus throughput: publish_many (pipelined, Nats-Msg-Id) and one Consumer (fetch + ack per message).

    python bench/bus_throughput.py [N]     # uses ROLLBOOK_NATS_URL or an embedded nats-server
    python bench/bus_throughput.py [N] --cluster 3 --sync-interval always   # a 3-node cluster of its own
    python bench/bus_throughput.py [N] --cluster 3 --sync-interval 2m       # nats-server's default flush

With --cluster, a cluster on 127.0.0.1 (services/infra/nats_cluster.py) with streams of that many replicas,
flushing to disk at --sync-interval: the cost of flushing every write before its ack.

Runs on a scratch stream of its own, deleted afterwards. Prints events/s for each phase; for scale,
nats-py's `fetch()` tops out at about 23-29k msgs/s on a 2-core machine, raw `MSG.NEXT` pulls at about
84k (docs/bus.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.aio.msg import Msg

from services.infra.bus import Bus
from services.infra.embedded import resolved_settings
from services.infra.nats_cluster import EmbeddedNatsCluster
from services.infra.settings import Settings
from services.model.events import Envelope, PodActionRequested, new_event


def events(n: int) -> list[Envelope]:
    now = datetime.now(UTC)
    return [
        new_event(
            PodActionRequested(
                action_id=f"a{i}",
                action="updateInPlace",
                namespace="default",
                pod=f"web-{i % 100}",
                revision="r2",
            ),
            stream=f"CloneSet/default/web-{i % 1000}",
            stream_version=i // 1000 + 1,
            occurred_at=now,
        )
        for i in range(n)
    ]


@contextlib.asynccontextmanager
async def bus_settings(cluster: int, sync_interval: str) -> AsyncIterator[Settings]:
    if not cluster:
        async with resolved_settings(migrate=False) as settings:
            yield settings
        return
    with tempfile.TemporaryDirectory(prefix="rollbook-bus-bench-") as scratch:
        async with EmbeddedNatsCluster(Path(scratch), size=cluster, sync_interval=sync_interval) as nodes:
            yield Settings(nats_url=nodes.url, bus_replicas=cluster)


async def main(n: int, cluster: int, sync_interval: str) -> None:
    async with bus_settings(cluster, sync_interval) as settings:
        suffix = uuid.uuid4().hex[:8]
        scratch = msgspec.structs.replace(
            settings, stream_name=f"RBBENCH_{suffix}", subject_prefix=f"rbbench{suffix}"
        )
        bus = await Bus.connect(scratch)
        try:
            await bus.ensure_stream()
            batch = events(n)
            started = time.perf_counter()
            await bus.publish_many(batch)
            publish_s = time.perf_counter() - started

            done = asyncio.Event()
            count = 0

            async def handle(envelope: Envelope, msg: Msg) -> None:
                nonlocal count
                count += 1
                if count == n:
                    done.set()

            consumer = bus.consumer("bench", bus.event_filter(), handle, batch=500)
            started = time.perf_counter()
            task = asyncio.create_task(consumer.run())
            await done.wait()
            consume_s = time.perf_counter() - started
            consumer.stop()
            await task
            await bus.js.delete_stream(scratch.stream_name)
        finally:
            await bus.close()
    if cluster:
        print(f"{cluster}-node cluster, {cluster} replicas, sync_interval {sync_interval}")
    print(f"publish_many   {n} events  {n / publish_s:>9,.0f} events/s")
    print(f"consume (ack)  {n} events  {n / consume_s:>9,.0f} events/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("events", type=int, nargs="?", default=50_000, help="events to publish and consume")
    parser.add_argument("--cluster", type=int, default=0, help="start a cluster of this many nodes")
    parser.add_argument("--sync-interval", default="always", help="the cluster's JetStream flush interval")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.cluster, arguments.sync_interval))
