"""A bus message nested deeper than any decoder takes (an attacker's, or an object stored just under the
watcher's limit and wrapped in an envelope) makes msgspec raise RecursionError, not DecodeError. It must
be dead-lettered with the reason on its first delivery, and the consumer must go on with the next
message: neither a dead consumer task nor a redelivery loop."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from nats.aio.msg import Msg

from services.infra.bus import Bus
from services.model.events import Envelope, ObjectObserved, encode, new_event
from tests.infra.bus_helpers import eventually, paused, unique

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

DEPTH = 1_100


def deep_observation(stream: str) -> bytes:
    """A well-formed ObjectObserved envelope whose object holds lists nested DEPTH levels."""
    observed = ObjectObserved(
        kind="CloneSet", namespace="default", name="deep", uid="u", resource_version="1", change="ADDED",
        object={"spec": "HOLE"},
    )  # fmt: skip
    envelope = new_event(observed, stream=stream, stream_version=3, occurred_at=datetime.now(UTC))
    return encode(envelope).replace(b'"HOLE"', b"[" * DEPTH + b"]" * DEPTH)


@pytest.mark.usefixtures("services_recursion_limit")
async def test_a_message_nested_too_deep_is_dead_lettered_once(bus: Bus) -> None:
    name = unique("deep")
    stream = f"CloneSet/default/{name}"
    before, after = paused(stream, 1), paused(stream, 2)
    await bus.publish(before)
    deep = deep_observation(stream)
    await bus.js.publish(bus.subject_for(before), deep, headers={"Nats-Msg-Id": "deep-" + name})
    await bus.publish(after)

    handled: list[uuid.UUID] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope.event_id)

    durable = unique("auditor")
    consumer = bus.consumer(durable, bus.event_filter(name=name), handle)
    task = asyncio.create_task(consumer.run())
    await eventually(
        lambda: len(handled) == 2 and consumer.stats.dead_lettered == 1 or task.done(),
        what="both handled, the deep one dead-lettered",
    )
    assert not task.done(), task.exception() if task.done() else None
    consumer.stop()
    await task

    assert handled == [before.event_id, after.event_id]
    [letter] = await bus.dead_letters(durable)
    assert letter.data == deep
    assert letter.reason.startswith("undecodable: nested too deep")
    assert letter.deliveries == 1
