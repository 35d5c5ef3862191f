"""Upcasting: an event stored with an older schema_version is read through its upcaster, so an old rollout
replays after the schema evolved. "v2 code" here is a PodActionFailed that gained a required field
(``http_status``), with the v1 -> v2 upcaster deriving it from the v1 reason text."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from services.infra.database import upgrade_async
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import EVENT_TYPES, SCHEMA_VERSIONS, ObjectObserved, PodActionFailed, new_event
from services.model.upcasting import PayloadDecoder, UpcastError
from services.replay.reads import workload_events
from services.replay.timeline import state_at
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class PodActionFailedV2(PodActionFailed, frozen=True, kw_only=True, tag="PodActionFailed"):
    """Schema v2: the HTTP status the API answered, required."""

    http_status: int


def upcast_failed_v1(data: dict[str, Any]) -> dict[str, Any]:
    match = re.match(r"\s*(\d{3})\b", str(data.get("reason", "")))
    return {**data, "http_status": int(match.group(1)) if match else 0}


V2_UNION: Any = PodActionFailedV2
for name, cls in EVENT_TYPES.items():
    if name != "PodActionFailed":
        V2_UNION = V2_UNION | cls
V2_DECODER = PayloadDecoder(
    V2_UNION, {**SCHEMA_VERSIONS, "PodActionFailed": 2}, {("PodActionFailed", 1): upcast_failed_v1}
)


@pytest.fixture
async def database(server_urls: ServerUrls) -> AsyncIterator[str]:
    async with fresh_database(server_urls.database_url, prefix="rollbook_upcast") as url:
        await upgrade_async(url)
        yield url


@pytest.mark.asyncio(loop_scope="session")
async def test_a_v1_event_replays_with_v2_code(database: str) -> None:
    v1_store = await EventStore.connect(database)  # today's code writes PodActionFailed at schema v1
    pod: dict[str, Any] = {"metadata": {"name": "web-1", "uid": "u1", "labels": {}}, "spec": {}, "status": {}}
    cloneset: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "prod", "uid": "c1"},
        "spec": {"replicas": 1},
    }
    try:
        await v1_store.append_many(
            [
                new_event(
                    ObjectObserved(
                        kind=kind,
                        namespace="prod",
                        name=name,
                        uid=obj["metadata"]["uid"],
                        resource_version=str(i),
                        change="ADDED",
                        object=obj,
                    ),
                    stream=CLONESET.observed_stream("prod", "web"),
                    stream_version=i,
                    occurred_at=T0,
                )
                for i, (kind, name, obj) in enumerate(
                    [("CloneSet", "web", cloneset), ("Pod", "web-1", pod)], 1
                )
            ]
        )
        failed = new_event(
            PodActionFailed(action_id="a1", reason="422 Unprocessable Entity: spec.containers is invalid"),
            stream=CLONESET.actions_stream("prod", "web"),
            stream_version=1,
            occurred_at=T0,
            event_id=uuid.uuid4(),
        )
        assert failed.schema_version == 1
        await v1_store.append([failed], expected_version=0)
    finally:
        await v1_store.close()

    v2_store = await EventStore.connect(database, decoder=V2_DECODER)
    try:
        events = await workload_events(v2_store, "prod", "web")
        payload = events[-1].envelope.payload
        assert isinstance(payload, PodActionFailedV2)
        assert (payload.action_id, payload.http_status) == ("a1", 422)
        state, last = state_at("prod", "web", events)
        assert last is not None and state.outcomes == {"a1": "failed"} and set(state.pods) == {"web-1"}
        # What the relay sends on (payloads as stored JSON, older ones upcast) is the same JSON.
        as_json = await v2_store.read_batch_json()
        relayed = [msgspec.json.decode(msgspec.json.encode(e.envelope)) for e in as_json]
        assert relayed == [msgspec.to_builtins(e.envelope) for e in await v2_store.read_batch()]
        assert relayed[-1]["payload"]["http_status"] == 422
    finally:
        await v2_store.close()


def test_unknown_paths_and_future_versions_are_clear_errors() -> None:
    no_upcaster = PayloadDecoder(V2_UNION, {**SCHEMA_VERSIONS, "PodActionFailed": 2}, {})
    with pytest.raises(UpcastError, match="no upcaster for PodActionFailed from schema_version 1"):
        no_upcaster.decode("PodActionFailed", 1, b'{"type":"PodActionFailed","action_id":"a","reason":"x"}')
    with pytest.raises(UpcastError, match="newer than this code"):
        V2_DECODER.decode("PodActionFailed", 3, b'{"type":"PodActionFailed","action_id":"a","reason":"x"}')
