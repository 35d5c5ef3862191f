"""The loop every bus-consuming service shares (planner, executor, auditor): a durable consumer run until
SIGTERM, its lag reported as metrics, and the shutdown order of docs/services.md ("Every service")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from services.domain.bus import Bus, Handler
from services.domain.metrics import CONSUMER_ACK_PENDING, CONSUMER_LAG
from services.domain.runtime import ServiceRuntime, run_until_stopped

LAG_INTERVAL_SECONDS = 2.0


async def report_consumer_lag(bus: Bus, runtime: ServiceRuntime, service: str, durable: str) -> None:
    """Set ``rollbook_consumer_lag`` / ``rollbook_consumer_ack_pending`` every 2 s until the service stops."""
    while not runtime.stopping.is_set():
        try:
            info = await bus.js.consumer_info(bus.stream, durable)
            CONSUMER_LAG.labels(service, durable).set(info.num_pending or 0)
            CONSUMER_ACK_PENDING.labels(service, durable).set(info.num_ack_pending or 0)
        except Exception:  # the consumer may not exist yet, or NATS is reconnecting: lag is best effort
            pass
        await asyncio.sleep(LAG_INTERVAL_SECONDS)


async def serve_consumer(
    runtime: ServiceRuntime,
    bus: Bus,
    *,
    service: str,
    durable: str,
    event_types: Sequence[str],
    handler: Handler,
    batch: int,
    ack_wait: float,
) -> None:
    """Consume ``event_types`` on the durable ``durable`` until SIGTERM or a crash of the consumer; ready
    once the consumer runs. On the way out the message in hand finishes and the rest of the fetched batch
    goes back to the bus."""
    await bus.ensure_stream()
    filters = [bus.event_filter(event_type=t) for t in event_types]
    consumer = bus.consumer(durable, filters, handler, batch=batch, ack_wait=ack_wait)
    task = asyncio.create_task(consumer.run(), name=f"{service}-consumer")
    lag = asyncio.create_task(report_consumer_lag(bus, runtime, service, durable))
    runtime.set_ready()
    try:
        await run_until_stopped(runtime, task)
    finally:
        consumer.stop()
        lag.cancel()
        await asyncio.gather(task, lag, return_exceptions=True)
