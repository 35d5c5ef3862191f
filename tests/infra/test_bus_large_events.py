"""An event larger than a NATS message travels by reference: the message names the event, consumers
read its body from the event store; without a store, or for an unknown event, a clear dead letter."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from nats.aio.msg import Msg

from services.infra.bus import BODY_HEADER, BODY_IN_STORE, Bus
from services.infra.store import EventStore
from services.model.events import Envelope, ObjectObserved, encode, new_event
from tests.infra.bus_helpers import eventually, paused, unique

ENV_VALUE_BYTES = 1_200_000  # the 1.2 MB env value the API server accepts in a pod template


def huge_observation(name: str) -> Envelope:
    cloneset = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()), "resourceVersion": "7"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "nginx",
                            "env": [{"name": "BIG", "value": "x" * ENV_VALUE_BYTES}],
                        }
                    ]
                }
            }
        },
    }
    return new_event(
        ObjectObserved(
            kind="CloneSet",
            namespace="default",
            name=name,
            uid=cloneset["metadata"]["uid"],  # type: ignore[index]
            resource_version="7",
            change="ADDED",
            object=cloneset,
        ),
        stream=f"CloneSet/default/{name}",
        stream_version=1,
        occurred_at=datetime.now(UTC),
    )


async def test_an_event_above_max_payload_reaches_consumers_by_reference(
    bus: Bus, event_store: EventStore
) -> None:
    name = unique("huge")
    event = huge_observation(name)
    assert len(encode(event)) > bus.nc.max_payload  # the bus could not carry it as it is
    await event_store.append([event], expected_version=None)
    data, headers = bus.event_message(event)
    assert headers[BODY_HEADER] == BODY_IN_STORE and len(data) < 1000
    await bus.publish(event, partition_key=f"CloneSet/default/{name}")

    seen: list[Envelope] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        seen.append(envelope)

    bus.bodies = event_store.read_event
    try:
        consumer = bus.consumer(unique("planner"), bus.event_filter(name=name), handle)
        task = asyncio.create_task(consumer.run())
        await eventually(lambda: len(seen) == 1, what="the huge event handled")
        consumer.stop()
        await task
    finally:
        bus.bodies = None
    [received] = seen
    assert received == (await event_store.read_event(event.event_id))
    assert received.payload.object["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == (  # type: ignore[union-attr]
        "x" * ENV_VALUE_BYTES
    )
    assert consumer.stats.dead_lettered == 0


async def test_a_reference_without_a_store_or_to_an_unknown_event_is_dead_lettered_with_the_reason(
    bus: Bus, event_store: EventStore
) -> None:
    name = unique("orphan")
    never_stored = huge_observation(name)
    await bus.publish(never_stored, partition_key=f"CloneSet/default/{name}")
    after = paused(f"CloneSet/default/{name}", 1)
    await bus.publish(after)
    handled: list[Envelope] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope)

    without_store = unique("no-store")
    consumer = bus.consumer(without_store, bus.event_filter(name=name), handle)
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: handled == [after], what="the consumer went on past the reference")
    consumer.stop()
    await task
    [letter] = await bus.dead_letters(without_store)
    assert "carried by reference to the event store, and this consumer reads no store" in letter.reason

    bus.bodies = event_store.read_event
    try:
        with_store = unique("with-store")
        consumer = bus.consumer(with_store, bus.event_filter(name=name), handle)
        task = asyncio.create_task(consumer.run())
        await eventually(lambda: consumer.stats.dead_lettered == 1, what="the unknown event dead-lettered")
        consumer.stop()
        await task
    finally:
        bus.bodies = None
    [letter] = await bus.dead_letters(with_store)
    assert f"referenced event {never_stored.event_id} is not in the event store" in letter.reason
