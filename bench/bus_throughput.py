"""Bus throughput: publish_many (pipelined, Nats-Msg-Id) and one Consumer (fetch + ack per message).

    python bench/bus_throughput.py [N]     # uses ROLLBOOK_NATS_URL or an embedded nats-server

Runs on a scratch stream of its own, deleted afterwards. Prints events/s for each phase; for scale,
nats-py's `fetch()` tops out at about 23-29k msgs/s on a 2-core machine, raw `MSG.NEXT` pulls at about
84k (docs/bus.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import UTC, datetime

import msgspec
from nats.aio.msg import Msg

from services.infra.bus import Bus
from services.infra.embedded import resolved_settings
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


async def main(n: int) -> None:
    async with resolved_settings(migrate=False) as settings:
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
    print(f"publish_many   {n} events  {n / publish_s:>9,.0f} events/s")
    print(f"consume (ack)  {n} events  {n / consume_s:>9,.0f} events/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("events", type=int, nargs="?", default=50_000, help="events to publish and consume")
    asyncio.run(main(parser.parse_args().events))
