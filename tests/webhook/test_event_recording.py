"""SidecarInjected events reach the real event store (Postgres), once, and never the bus directly (the
auditor's relay publishes them), and a store outage neither blocks admission nor loses the event."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import nats.js.errors
import pytest

from services.infra.bus import Bus
from services.infra.store import EventStore
from services.model import events
from services.model import sidecarset as ss
from services.webhook.recorder import InjectionRecorder, injection_events
from services.webhook.sinks import EventStoreSink
from tests.webhook.test_injection_rules import container, make_sidecarset, pod, seed_pod, seed_sidecarset

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def unique_sidecarset() -> ss.SidecarSet:
    # A SidecarSet name of its own per test: its stream is SidecarSet//<name> in the shared session store.
    return ss.parse_sidecarset(make_sidecarset(f"ss-{uuid.uuid4().hex[:8]}", containers=[container("agent")]))


def records_for(sidecarset: ss.SidecarSet) -> list[ss.InjectionRecord]:
    _, records = ss.inject(pod([container("app")], namespace="team-a"), [sidecarset], now=NOW)
    return records


async def test_injection_is_stored_and_not_published_by_the_webhook(
    database_url: str, bus: Bus, event_store: EventStore
) -> None:
    sidecarset = unique_sidecarset()
    admission_uid = str(uuid.uuid4())
    sink = EventStoreSink(lambda: EventStore.connect(database_url))
    recorder = InjectionRecorder(sink)
    recorder.start()
    pending = injection_events(records_for(sidecarset), admission_uid=admission_uid, occurred_at=NOW)
    recorder.submit(pending)
    recorder.submit(pending)  # the API server called us twice for one admission
    assert await recorder.flush(10.0)
    await recorder.stop()
    await sink.close()

    [stored] = await event_store.read_stream(f"SidecarSet//{sidecarset.name}")
    envelope = stored.envelope
    assert envelope.stream_version == 1 and envelope.correlation_id == admission_uid
    assert envelope.payload == events.SidecarInjected(
        namespace="team-a",
        pod="p",
        sidecarset=sidecarset.name,
        revision=sidecarset.hash,
        containers=["agent"],
    )
    # Only the relay publishes events: nothing reached the bus from the webhook.
    with pytest.raises(nats.js.errors.NotFoundError):
        await bus.js.get_last_msg(bus.stream, bus.subject_for(envelope))


async def test_concurrent_injections_of_one_sidecarset_get_consecutive_versions(
    database_url: str, event_store: EventStore
) -> None:
    sidecarset = unique_sidecarset()
    sinks = [EventStoreSink(lambda: EventStore.connect(database_url)) for _ in range(2)]  # two replicas
    recorders = [InjectionRecorder(sink) for sink in sinks]
    for recorder in recorders:
        recorder.start()
    for i in range(10):
        pending = injection_events(records_for(sidecarset), admission_uid=f"uid-{i}", occurred_at=NOW)
        recorders[i % 2].submit(pending)
    for recorder in recorders:
        assert await recorder.flush(10.0)
        await recorder.stop()
    for sink in sinks:
        await sink.close()
    stored = await event_store.read_stream(f"SidecarSet//{sidecarset.name}")
    assert [s.envelope.stream_version for s in stored] == list(range(1, 11))
    assert sorted(s.envelope.correlation_id or "" for s in stored) == sorted(f"uid-{i}" for i in range(10))


async def test_store_outage_keeps_the_event_until_the_store_is_back(
    database_url: str, event_store: EventStore
) -> None:
    sidecarset = unique_sidecarset()
    urls = ["postgresql://root@127.0.0.1:9/unreachable"]  # nothing listens on port 9: connection refused

    async def connect() -> EventStore:
        return await EventStore.connect(urls[-1])

    sink = EventStoreSink(connect)
    recorder = InjectionRecorder(sink, first_retry_seconds=0.05, max_retry_seconds=0.2)
    recorder.start()
    recorder.submit(injection_events(records_for(sidecarset), admission_uid="outage", occurred_at=NOW))
    assert not await recorder.flush(0.5)
    assert recorder.failed_attempts >= 1 and recorder.backlog == 1
    urls.append(database_url)  # the store is back
    assert await recorder.flush(10.0)
    await recorder.stop()
    await sink.close()
    [stored] = await event_store.read_stream(f"SidecarSet//{sidecarset.name}")
    assert stored.envelope.correlation_id == "outage"


async def test_event_payload_roundtrips_through_the_envelope_codec() -> None:
    [pending] = injection_events(
        ss.inject(seed_pod(), [ss.parse_sidecarset(seed_sidecarset())], now=NOW)[1],
        admission_uid="u",
        occurred_at=NOW,
    )
    envelope = events.new_event(pending.payload, stream=pending.stream, stream_version=1, occurred_at=NOW)
    assert msgspec.json.decode(events.encode(envelope))["type"] == "SidecarInjected"
    assert events.decode(events.encode(envelope)).payload == pending.payload
