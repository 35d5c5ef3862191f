"""The loop every bus-consuming service shares (planner, executor, auditor): a durable consumer run until
SIGTERM, its lag reported as metrics, and the shutdown order of docs/services.md ("Every service")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from services.infra.bus import Bus, Consumer, Handler, OrderKey, Prepare
from services.infra.metrics import CONSUMER_ACK_PENDING, CONSUMER_LAG
from services.infra.runtime import ServiceRuntime, run_until_stopped
from services.infra.store import EventStore
from services.infra.ticks import sleep_to_tick

LAG_INTERVAL_SECONDS = 2.0


async def report_consumer_lag(bus: Bus, runtime: ServiceRuntime, service: str, durable: str) -> None:
    """Set ``rollbook_consumer_lag`` / ``rollbook_consumer_ack_pending`` every 2 s until the service stops
    (on the 2 s grid, services/infra/ticks.py)."""
    while not runtime.stopping.is_set():
        try:
            info = await bus.js.consumer_info(bus.stream, durable)
            CONSUMER_LAG.labels(service, durable).set(info.num_pending or 0)
            CONSUMER_ACK_PENDING.labels(service, durable).set(info.num_ack_pending or 0)
        except Exception:  # the consumer may not exist yet, or NATS is reconnecting: lag is best effort
            pass
        await sleep_to_tick(LAG_INTERVAL_SECONDS)  # every durable's report at once: one wake-up


@dataclass(frozen=True)
class ConsumerSpec:
    """One durable consumer a service runs: its event types, handler and delivery settings.
    ``ordered`` allows one unacknowledged message at a time across every process sharing the durable, so
    its messages are handled strictly in stream order (see ``Bus.consumer``). ``concurrency`` > 1 handles
    that many at once in each process, those with the same ``order_key`` in order; ``partition`` limits
    the durable to one bus partition; ``prepare`` sees each fetched batch first (``Bus.consumer``)."""

    durable: str
    event_types: Sequence[str]
    handler: Handler
    batch: int
    ack_wait: float
    ordered: bool = False
    concurrency: int = 1
    order_key: OrderKey | None = None
    partition: int | None = None
    prepare: Prepare | None = None

    def consumer(self, bus: Bus) -> Consumer:
        return bus.consumer(
            self.durable,
            [bus.event_filter(partition=self.partition, event_type=t) for t in self.event_types],
            self.handler,
            batch=self.batch,
            ack_wait=self.ack_wait,
            ordered=self.ordered,
            concurrency=self.concurrency,
            order_key=self.order_key,
            prepare=self.prepare,
        )


async def serve_consumers(
    runtime: ServiceRuntime,
    bus: Bus,
    *,
    service: str,
    consumers: Sequence[ConsumerSpec],
    store: EventStore | None = None,
) -> None:
    """Run ``consumers`` until SIGTERM or a crash of any of them; ready once they all run. On the way out
    each finishes the message in hand and hands the rest of its fetched batch back to the bus."""
    await bus.ensure_stream()
    running = [spec.consumer(bus) for spec in consumers]
    tasks = [
        asyncio.create_task(consumer.run(), name=f"{service}-{spec.durable}")
        for consumer, spec in zip(running, consumers, strict=True)
    ]
    tasks += [
        asyncio.create_task(report_consumer_lag(bus, runtime, service, spec.durable)) for spec in consumers
    ]
    # The store losing what this service appended (an asynchronous failover) stops it: its successor
    # starts from the record as it is.
    watching = (
        [asyncio.create_task(store.watch_appends(runtime.stopping), name="store-failover-watch")]
        if store is not None
        else []
    )
    runtime.set_ready()
    try:
        await run_until_stopped(runtime, *tasks[: len(running)], *watching)
    finally:
        for consumer in running:
            consumer.stop()
        for task in tasks[len(running) :]:
            task.cancel()
        tasks += watching
        await asyncio.gather(*tasks, return_exceptions=True)
