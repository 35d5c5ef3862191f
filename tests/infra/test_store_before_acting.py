"""The executor's before-acting read for a batch of requests (``before_acting_many``) answers each request
as its own statement (``before_acting``) does: whether its outcome is stored, the actions its round
planned before it for the same pod, and whether the event is stored as the message carried it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from services.executor.service import outcome_id
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, PodActionRequested, PodActionSucceeded, RoundPlanned, new_event

pytestmark = pytest.mark.asyncio(loop_scope="session")

NOW = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)


def request(stream: str, version: int, round_id: uuid.UUID, action_id: str, pod: str) -> Envelope:
    return new_event(
        PodActionRequested(
            action_id=action_id, action="updateInPlace", namespace="default", pod=pod, rollout_id="r1"
        ),
        stream=stream,
        stream_version=version,
        occurred_at=NOW,
        causation_id=round_id,
        correlation_id="r1",
    )


def carried(envelope: Envelope) -> str:
    return msgspec.json.encode(envelope.payload).decode()


async def test_a_batch_is_answered_as_each_request_alone(event_store: EventStore) -> None:
    name = f"prep{uuid.uuid4().hex[:8]}"
    stream = CLONESET.decisions_stream("default", name)
    round_event = new_event(
        RoundPlanned(through={}, now=NOW, input_sha256="0" * 64),
        stream=stream,
        stream_version=1,
        occurred_at=NOW,
        correlation_id="r1",
    )
    first = request(stream, 2, round_event.event_id, f"{name}-a", f"{name}-0")
    second = request(stream, 3, round_event.event_id, f"{name}-b", f"{name}-0")  # after `first`, same pod
    other = request(stream, 4, round_event.event_id, f"{name}-c", f"{name}-1")
    await event_store.append([round_event, first, second, other], expected_version=0)
    done = new_event(
        PodActionSucceeded(action_id=f"{name}-a"),
        stream=CLONESET.actions_stream("default", name),
        stream_version=1,
        occurred_at=NOW,
        event_id=outcome_id(f"{name}-a"),
        causation_id=first.event_id,
        correlation_id="r1",
    )
    await event_store.append([done], expected_version=0)
    never_stored = request(stream, 5, round_event.event_id, f"{name}-d", f"{name}-0")
    altered = carried(other).replace("updateInPlace", "deletePod")

    requests: list[tuple[Envelope, uuid.UUID, str, str | None]] = [
        (first, outcome_id(f"{name}-a"), f"{name}-0", carried(first)),
        (second, outcome_id(f"{name}-b"), f"{name}-0", carried(second)),
        (other, outcome_id(f"{name}-c"), f"{name}-1", altered),
        (never_stored, outcome_id(f"{name}-d"), f"{name}-0", carried(never_stored)),
        (second, outcome_id(f"{name}-b"), f"{name}-0", None),
    ]
    batched = await event_store.before_acting_many(requests)
    alone = [await event_store.before_acting(*r) for r in requests]
    assert batched == alone
    assert batched == [
        (True, [], True),  # reported already
        (False, [f"{name}-a"], True),  # the round's earlier action on its pod
        (False, [], False),  # stored, but not as carried
        (False, [f"{name}-a", f"{name}-b"], None),  # no such event stored
        (False, [f"{name}-a"], None),  # nothing carried: not compared
    ]
    assert await event_store.before_acting_many([]) == []
