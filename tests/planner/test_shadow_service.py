"""The planner's shadow hook against the event store (services/planner/shadow_service.py): what it appends
is the pure trail of the observations, once, across a restart that re-derives the trail."""

from __future__ import annotations

import uuid

import msgspec
import pytest

from services.infra.store import EventStore
from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.kinds.registry import CLONESET
from services.model.events import PodActionObserved, RolloutStarted
from services.planner.shadow_service import ShadowRecorder
from services.planner.shadow_trail import ShadowTrail
from tests.planner.kruise_observations import KruiseLog

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_restarted_recorder_appends_only_what_is_not_stored_and_the_trail_is_the_pure_one(
    event_store: EventStore,
) -> None:
    log, before_rollout = rolled_in_place()

    await event_store.append(log.envelopes[:before_rollout], expected_version=0)
    first = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION)
    appended = await first.record(log.namespace, log.name)
    assert appended > 0
    assert await first.record(log.namespace, log.name) == 0  # nothing new observed

    # A restart (or another planner taking over): the trail is derived again from the first observation.
    await event_store.append(log.envelopes[before_rollout:], expected_version=before_rollout)
    second = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION)
    assert await second.record(log.namespace, log.name) > 0
    stored = [
        s.envelope for s in await event_store.read_stream(CLONESET.shadow_stream(log.namespace, log.name))
    ]

    pure = ShadowTrail(log.namespace, log.name, True, RULES_VERSION)
    expected = [e for envelope in log.envelopes for e in pure.step(envelope)]
    assert [(e.event_id, e.stream_version, e.type) for e in stored] == [
        (e.event_id, e.stream_version, e.type) for e in expected
    ]
    assert [e.payload for e in stored] == [e.payload for e in expected]


async def test_shadow_mode_records_from_its_own_start_and_a_restart_keeps_that_start(
    event_store: EventStore,
) -> None:
    """`rollbook up --shadow` on a CloneSet whose pods were created before (by rollbook, say): no observed
    action stamped before shadow mode began, and a restarted planner (a new ``since``) re-derives the
    same trail from the start the stored one recorded."""
    log = KruiseLog(name=f"web-{uuid.uuid4().hex[:8]}", maxUnavailable=1)
    log.write_status()
    pods = [log.create_pod(i) for i in ("aaaaa", "bbbbb")]
    log.write_status()
    begun = len(log.envelopes) + 1
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    middle = len(log.envelopes) + 2
    for pod in pods:
        log.start_in_place(pod)
        log.patch_in_place(pod)
        log.set_ready(pod)
    log.write_status()
    since = log.envelopes[begun - 1].occurred_at

    await event_store.append(log.envelopes[:middle], expected_version=0)
    first = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION, since=since)
    assert await first.record(log.namespace, log.name) > 0
    await event_store.append(log.envelopes[middle:], expected_version=middle)
    later = log.envelopes[-1].occurred_at  # a restart long after: its own start is not the trail's
    second = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION, since=later)
    assert await second.record(log.namespace, log.name) > 0

    stored = [
        s.envelope for s in await event_store.read_stream(CLONESET.shadow_stream(log.namespace, log.name))
    ]
    pure = ShadowTrail(log.namespace, log.name, True, RULES_VERSION, since=since)
    expected = [e for envelope in log.envelopes for e in pure.step(envelope)]
    assert [(e.event_id, e.payload) for e in stored] == [(e.event_id, e.payload) for e in expected]
    actions = [e.payload for e in stored if isinstance(e.payload, PodActionObserved)]
    assert actions and all(a.started_at >= since for a in actions)
    assert not any(a.action == "createPod" for a in actions)
    started = [e.payload for e in stored if isinstance(e.payload, RolloutStarted)]
    assert len(started) == 1 and {a.rollout_id for a in actions} == {started[0].rollout_id}


@pytest.mark.parametrize("stored", ["one event fewer", "one event more"])
async def test_a_trail_other_rules_recorded_goes_on_after_a_takeover(
    event_store: EventStore, stored: str
) -> None:
    """The stored shadow trail holds one event fewer, or one more, than the fold now derives from the same
    observations (other rules recorded it: a planner from before a rule changed, say). A planner taking
    over keeps the stored trail as it is and appends what the observations after it mean, numbered after
    its head. Cut at the stored version instead, the first later event was taken for one on record, and
    lost, when the stored trail held more."""
    log, before_rollout = rolled_in_place()

    pure = ShadowTrail(log.namespace, log.name, True, RULES_VERSION)
    before = [e for envelope in log.envelopes[:before_rollout] for e in pure.step(envelope)]
    after = [e for envelope in log.envelopes[before_rollout:] for e in pure.step(envelope)]
    assert len(before) > 1 and after
    if stored == "one event fewer":
        recorded = before[1:]
    else:  # the last one twice, as another event of the same observation
        recorded = [*before, msgspec.structs.replace(before[-1], event_id=uuid.uuid4())]
    other_rules = [msgspec.structs.replace(e, stream_version=i + 1) for i, e in enumerate(recorded)]
    await event_store.append(log.envelopes, expected_version=0)
    await event_store.append(other_rules, expected_version=0)

    taking_over = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION)
    assert await taking_over.record(log.namespace, log.name) == len(after)
    trail = [
        s.envelope for s in await event_store.read_stream(CLONESET.shadow_stream(log.namespace, log.name))
    ]
    assert [(e.event_id, e.stream_version) for e in trail] == [
        (e.event_id, e.stream_version) for e in other_rules
    ] + [(e.event_id, len(other_rules) + i + 1) for i, e in enumerate(after)]
    again = ShadowRecorder(event_store, shadow_all=True, rules=RULES_VERSION)
    assert await again.record(log.namespace, log.name) == 0


def rolled_in_place() -> tuple[KruiseLog, int]:
    """OpenKruise's log of a 2-pod CloneSet scaled out, then rolled in place, and how many of its events
    come before the rollout."""
    log = KruiseLog(name=f"web-{uuid.uuid4().hex[:8]}", maxUnavailable=1)
    log.write_status()
    pods = [log.create_pod(i, ready=False) for i in ("aaaaa", "bbbbb")]
    for pod in pods:
        log.set_ready(pod)
    log.write_status()
    before_rollout = len(log.envelopes)
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    for pod in pods:
        log.start_in_place(pod)
        log.patch_in_place(pod)
        log.set_ready(pod)
        log.write_status()
    return log, before_rollout
