"""The flight recorder taking over a trail that other rules recorded (services/watcher/recorder.py): a
watcher restarted or handed over folds the trail again, appends what the later observations mean after the
stored head, and never stops recording for what the stored trail says of earlier ones."""

from __future__ import annotations

import msgspec
import pytest

from services.kinds import registry
from services.model.events import Envelope, ObjectObserved, PodActionObserved
from services.model.memory_store import InMemoryEventStore
from services.watcher.recorder import Recorder
from tests.replay.test_recorded_trails import TRAILS, load

pytestmark = [pytest.mark.pure, pytest.mark.asyncio]


async def test_a_trail_recorded_before_born_goes_on_after_a_watcher_that_stores_born() -> None:
    """The StatefulSet trail the previous recorder stored, half of it, while the new watcher stored db-0's
    first ADDED ``born``: folded anew, that observation means one event more (db-0's createPod) than the
    stored trail holds. The takeover keeps the stored trail as it is and appends what the observations
    after it mean, numbered after its head (it failed on every wake-up before: its first event was one
    already stored)."""
    workload, events = load(TRAILS / "recorded-statefulset-before-born.json.gz")
    namespace, name = workload.split("/")
    kind = registry.KINDS["StatefulSet"]
    observed_stream = kind.observed_stream(namespace, name)
    observed = [e for e in events if e.stream == observed_stream]
    old_trail = [e for e in events if e.stream == kind.recorded_stream(namespace, name)]
    first = observed[0].payload
    assert isinstance(first, ObjectObserved)
    observed[0] = msgspec.structs.replace(observed[0], payload=msgspec.structs.replace(first, born=True))

    # The old recorder got as far as its tenth event; the observations up to that one's cause are stored.
    head = old_trail[9]
    through = next(i for i, e in enumerate(observed) if e.event_id == head.causation_id) + 1
    store = InMemoryEventStore()
    await store.append(observed[:through], expected_version=0)
    await store.append(old_trail[:10], expected_version=0)
    await store.append(observed[through:], expected_version=through)

    appended = await Recorder(store).record(observed_stream)

    trail = kind.trail(namespace, name)  # type: ignore[misc]
    later = {e.event_id for e in observed[through:]}
    folded = [e for o in observed for e in trail.fold(o)]
    expected: list[Envelope] = [e for e in folded if e.causation_id in later]
    # The fold now records db-0's creation, which the stored trail does not hold.
    assert [_pod_action(e) for e in folded].count("createPod:db-0") == 1
    assert "createPod:db-0" not in [_pod_action(e) for e in old_trail]
    stored = [s.envelope for s in await store.read_stream(kind.recorded_stream(namespace, name))]
    assert appended == len(expected) > 0
    assert stored[:10] == old_trail[:10]
    assert [(e.stream_version, e.event_id, e.type) for e in stored[10:]] == [
        (10 + i + 1, e.event_id, e.type) for i, e in enumerate(expected)
    ]
    assert await Recorder(store).record(observed_stream) == 0  # taken over again: nothing twice


def _pod_action(envelope: Envelope) -> str | None:
    payload = envelope.payload
    return f"{payload.action}:{payload.pod}" if isinstance(payload, PodActionObserved) else None
