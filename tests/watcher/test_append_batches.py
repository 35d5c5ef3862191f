"""What the watcher stores of a burst of watch events, through its own code (diff, queue, appender) into
the store: a MODIFIED that a later watch event of the same object in the same append supersedes is not
stored, so a kubelet's burst of status changes of one pod is one observation, its last state; the
planner's fold of what was stored is the fold of every watch event. A CloneSet rollbook only shadows
keeps every observation (its shadow trail compares each observed state)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import CLONESET
from services.model.events import Envelope, ObjectObserved, StatusPlanned, new_event
from services.model.management import MANAGE_LABEL, SHADOW
from services.model.streams import ACTION_ID_ANNOTATION, STATUS_FIELD_MANAGER
from services.watcher.objects import observation
from services.watcher.service import RECENT_PLANNED, KindWatch, Watcher

NS = "default"
OWN = STATUS_FIELD_MANAGER  # rollbook's executor writing a status


def cloneset(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "labels": labels,
        },
        "spec": {"replicas": 2},
    }


def pod(owner: str, name: str, version: int, *, ready: str, action: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{owner}-{name}",
            "resourceVersion": str(version),
            "annotations": {ACTION_ID_ANNOTATION: action},
            "ownerReferences": [
                {
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "CloneSet",
                    "name": owner,
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}],
            "containerStatuses": [{"name": "main", "ready": ready == "True", "restartCount": restarts}],
        },
    }


def rollout_burst(owner: str) -> list[tuple[str, dict[str, Any]]]:
    """Pod a's kubelet restarting it after an in-place update (four states in quick succession) while
    pod b is marked not ready once: what one append cycle of a rollout receives."""
    return [
        ("MODIFIED", pod(owner, "a", 11, ready="False", action="update-a")),
        ("MODIFIED", pod(owner, "b", 12, ready="False", action="mark-b")),
        ("MODIFIED", pod(owner, "a", 13, ready="False", action="update-a", restarts=1)),
        ("MODIFIED", pod(owner, "a", 14, ready="True", action="update-a", restarts=1)),
    ]


@pytest.fixture
async def watcher(event_store: EventStore) -> AsyncIterator[Watcher]:
    api = client.ApiClient()  # never called: the watch events are fed in
    watched = Watcher(Settings(), event_store, api)
    appender = asyncio.create_task(watched.append_queued())
    try:
        yield watched
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()


def kind_watch(watcher: Watcher, kind: str) -> KindWatch:
    return next(k for k in watcher.kinds if k.kind == kind)


async def feed(watcher: Watcher, kind: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Watch events arriving while the appender is busy: queued, then stored in one append cycle."""
    for change, obj in events:
        await watcher._on_watch_event(kind_watch(watcher, kind), change, obj)
    await watcher._idle.wait()


async def stored_pods(store: EventStore, owner: str) -> list[tuple[str, str]]:
    stored = await store.read_stream(CLONESET.observed_stream(NS, owner))
    return [
        (e.envelope.payload.name, e.envelope.payload.resource_version)
        for e in stored
        if isinstance(e.envelope.payload, ObjectObserved) and e.envelope.payload.kind == "Pod"
    ]


def fold(events: list[Envelope], owner: str) -> WorkloadState:
    """The planner's fold of one observed stream, its events numbered in order."""
    state = WorkloadState(NS, owner)
    for version, envelope in enumerate(events, start=1):
        state.fold(msgspec.structs.replace(envelope, stream_version=version))
    return state


async def test_a_pods_burst_in_one_append_is_stored_as_its_last_state(
    watcher: Watcher, event_store: EventStore
) -> None:
    owner = f"web-{uuid.uuid4().hex[:8]}"
    await feed(watcher, "CloneSet", [("ADDED", cloneset(owner, 10))])
    burst = rollout_burst(owner)
    await feed(watcher, "Pod", [("ADDED", pod(owner, "a", 1, ready="True", action="mark-a"))])
    await feed(watcher, "Pod", burst)

    # a's first restart step is superseded by its second (same action id, both not ready); its last
    # not-ready state stays, the moment it was unavailable (the audit trail counts it).
    assert await stored_pods(event_store, owner) == [("a", "1"), ("b", "12"), ("a", "13"), ("a", "14")]

    # The planner folds what was stored to the state it folds from every watch event.
    stored = [e.envelope for e in await event_store.read_stream(CLONESET.observed_stream(NS, owner))]
    every = stored[:2] + [
        observation(
            "Pod",
            watcher.policy.redact_object("Pod", obj) or {},  # as the watcher records every object
            change,
            stream=CLONESET.observed_stream(NS, owner),
            correlation_id=None,
        )
        for change, obj in burst
    ]
    from_stored, from_every = fold(stored, owner), fold(every, owner)
    assert from_stored.pods == from_every.pods
    assert from_stored.cloneset == from_every.cloneset
    assert from_stored.seen_action_ids == from_every.seen_action_ids


async def test_a_shadowed_clonesets_stream_keeps_every_observation(
    watcher: Watcher, event_store: EventStore
) -> None:
    owner = f"web-{uuid.uuid4().hex[:8]}"
    await feed(watcher, "CloneSet", [("ADDED", cloneset(owner, 10, **{MANAGE_LABEL: SHADOW}))])
    await feed(watcher, "Pod", rollout_burst(owner))

    assert await stored_pods(event_store, owner) == [("a", "11"), ("b", "12"), ("a", "13"), ("a", "14")]

    # Once the label is gone rollbook drives it: superseded observations are dropped again.
    await feed(watcher, "CloneSet", [("MODIFIED", cloneset(owner, 20))])
    await feed(
        watcher,
        "Pod",
        [
            ("MODIFIED", pod(owner, "a", 21, ready="False", action="update-a2")),
            ("MODIFIED", pod(owner, "a", 22, ready="False", action="update-a2", restarts=1)),
        ],
    )
    assert (await stored_pods(event_store, owner))[4:] == [("a", "22")]


async def test_bursts_of_many_clonesets_are_one_append_each_stream_in_watch_order(
    watcher: Watcher, event_store: EventStore
) -> None:
    owners = [f"web-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for owner in owners:
        await feed(watcher, "CloneSet", [("ADDED", cloneset(owner, 10))])
        await feed(watcher, "Pod", [("ADDED", pod(owner, "a", 1, ready="True", action="mark-a"))])
    appends_before = watcher.appends
    # The three CloneSets' rollout bursts interleaved, as one watch of all pods delivers them.
    interleaved = [
        event for step in zip(*(rollout_burst(owner) for owner in owners), strict=True) for event in step
    ]
    await feed(watcher, "Pod", interleaved)

    assert watcher.appends == appends_before + 1  # one append for every stream, not one per stream
    for owner in owners:
        assert await stored_pods(event_store, owner) == [("a", "1"), ("b", "12"), ("a", "13"), ("a", "14")]


async def test_an_object_observed_again_unchanged_is_not_stored_again(
    watcher: Watcher, event_store: EventStore
) -> None:
    """A resync (a MODIFIED whose only change is the resourceVersion), a relist (each item as ADDED) and a
    watcher started again (its cache rebuilt from the store, then a relist) store nothing for an object
    that did not change: each repeated observation would be a row, a publish and a fold."""
    owner = f"web-{uuid.uuid4().hex[:8]}"
    await feed(watcher, "CloneSet", [("ADDED", cloneset(owner, 10))])
    await feed(watcher, "Pod", [("ADDED", pod(owner, "a", 1, ready="True", action="mark-a"))])
    await feed(watcher, "Pod", [("MODIFIED", pod(owner, "a", 2, ready="True", action="mark-a"))])
    await feed(watcher, "Pod", [("ADDED", pod(owner, "a", 3, ready="True", action="mark-a"))])

    api = client.ApiClient()
    restarted = Watcher(Settings(), event_store, api)
    appender = asyncio.create_task(restarted.append_queued())
    try:
        await restarted.rebuild()
        await feed(restarted, "CloneSet", [("ADDED", cloneset(owner, 11))])
        await feed(restarted, "Pod", [("ADDED", pod(owner, "a", 4, ready="True", action="mark-a"))])
        # A real change is stored.
        await feed(restarted, "Pod", [("MODIFIED", pod(owner, "a", 5, ready="False", action="mark-a"))])
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()

    assert await stored_pods(event_store, owner) == [("a", "1"), ("a", "5")]
    stored = await event_store.read_stream(CLONESET.observed_stream(NS, owner))
    assert [e.envelope.payload.kind for e in stored] == ["CloneSet", "Pod", "Pod"]


def counted(obj: dict[str, Any], writer: str, **status: Any) -> dict[str, Any]:
    """``obj`` with a steady CloneSet's spec and status, ``status`` written last by ``writer`` through the
    status subresource (as the API server's managedFields say: the last writer owns a field)."""
    labels = {"app": obj["metadata"]["name"]}
    base = {
        "observedGeneration": 1,
        "replicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "updateRevision": "r1",
        "currentRevision": "r1",
        "conditions": [],
    }
    managed = [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {
            "manager": writer,
            "operation": "Update",
            "subresource": "status",
            "fieldsV1": {"f:status": {f"f:{k}": {} for k in {**base, **status}}},
        },
    ]
    spec = {
        "replicas": 2,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
        },
    }
    metadata = {**obj["metadata"], "generation": 1, "managedFields": managed}
    return {**obj, "metadata": metadata, "spec": spec, "status": {**base, **status}}


async def plan(store: EventStore, obj: dict[str, Any]) -> dict[str, Any]:
    """Store in ``obj``'s CloneSet's decisions stream the StatusPlanned of the status ``obj`` shows: the
    planner's decision, stored before rollbook's executor writes it (the executor acts only on a stored
    one). ``obj``."""
    name = obj["metadata"]["name"]
    status = StatusPlanned(kind="CloneSet", namespace=NS, name=name, status=obj["status"])
    stream = CLONESET.decisions_stream(NS, name)
    envelope = new_event(status, stream=stream, stream_version=1, occurred_at=datetime.now(UTC))
    await store.append([envelope], expected_version=None)
    return obj


async def test_rollbooks_own_pod_count_write_is_not_stored_again_another_controllers_is(
    watcher: Watcher, event_store: EventStore
) -> None:
    """A readiness flap changes one pod (stored) and then the CloneSet's status counts, which rollbook's
    executor writes (field manager ``STATUS_FIELD_MANAGER``) from the planner's StatusPlanned: that write
    is not stored a second time as an observation (the planner does not read the counts back:
    tests/planner/test_properties.py). The same counts written by another field manager (OpenKruise's,
    before a handover) are stored, and so is any other change, a count of a CloneSet whose spec rollbook
    rejected (its status then repeats the observed one) or one rollbook only shadows."""
    owner = f"web-{uuid.uuid4().hex[:8]}"
    every = [
        ("CloneSet", "ADDED", counted(cloneset(owner, 10), "kruise-manager")),
        ("Pod", "ADDED", pod(owner, "a", 11, ready="True", action="create-a")),
        ("Pod", "ADDED", pod(owner, "b", 12, ready="True", action="create-b")),
        ("Pod", "MODIFIED", pod(owner, "a", 13, ready="False", action="create-a")),
        ("CloneSet", "MODIFIED", counted(cloneset(owner, 14), OWN, readyReplicas=1, availableReplicas=1)),
        ("Pod", "MODIFIED", pod(owner, "a", 15, ready="True", action="create-a")),
        ("CloneSet", "MODIFIED", counted(cloneset(owner, 16), OWN)),
        ("Pod", "MODIFIED", pod(owner, "a", 17, ready="False", action="create-a")),
        ("CloneSet", "MODIFIED", counted(cloneset(owner, 18), "kruise-manager", readyReplicas=1)),
    ]
    for kind, change, obj in every:
        if kind == "CloneSet" and obj["metadata"]["managedFields"][1]["manager"] == OWN:
            await plan(event_store, obj)  # rollbook's executor writes a status the planner stored
        await feed(watcher, kind, [(change, obj)])

    def observed(stored: list[Any]) -> list[tuple[str, str]]:
        return [(e.envelope.payload.kind, e.envelope.payload.resource_version) for e in stored]

    stream = CLONESET.observed_stream(NS, owner)
    assert observed(await event_store.read_stream(stream)) == [
        ("CloneSet", "10"),
        ("Pod", "11"),
        ("Pod", "12"),
        ("Pod", "13"),
        ("Pod", "15"),
        ("Pod", "17"),
        ("CloneSet", "18"),  # OpenKruise's count: stored
    ]

    # rollbook's write of the count again differs from the stored state in it only: not stored. A count
    # another manager still claims, and anything else in the status (the planner reads revisions and
    # conditions back) is stored, as is a spec change that comes with new counts.
    await feed(
        watcher, "CloneSet", [("MODIFIED", await plan(event_store, counted(cloneset(owner, 19), OWN)))]
    )
    shared = counted(cloneset(owner, 20), OWN, readyReplicas=0)
    shared["metadata"]["managedFields"][0]["fieldsV1"]["f:status"] = {"f:readyReplicas": {}}
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, shared))])
    revision = counted(cloneset(owner, 21), OWN, currentRevision="r0")
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, revision))])
    scaled = counted(cloneset(owner, 22), OWN, replicas=3, currentRevision="r0")
    scaled["spec"] = {**scaled["spec"], "replicas": 3}
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, scaled))])
    assert observed(await event_store.read_stream(stream))[7:] == [
        ("CloneSet", "20"),
        ("CloneSet", "21"),
        ("CloneSet", "22"),
    ]

    # Started again (its cache rebuilt from the store), a relist showing only rollbook's newer counts
    # stores nothing; the same counts by another manager are stored.
    api = client.ApiClient()
    restarted = Watcher(Settings(), event_store, api)
    appender = asyncio.create_task(restarted.append_queued())
    try:
        await restarted.rebuild()
        relisted = counted(cloneset(owner, 23), OWN, replicas=2, readyReplicas=1, currentRevision="r0")
        relisted["spec"] = {**relisted["spec"], "replicas": 3}
        await feed(restarted, "CloneSet", [("ADDED", await plan(event_store, relisted))])
        assert len(await event_store.read_stream(stream)) == 10
        theirs = counted(cloneset(owner, 24), "kruise-manager", replicas=2, currentRevision="r0")
        theirs["spec"] = {**theirs["spec"], "replicas": 3}
        await feed(restarted, "CloneSet", [("MODIFIED", theirs)])
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()
    assert observed(await event_store.read_stream(stream))[10:] == [("CloneSet", "24")]

    rejected = f"web-{uuid.uuid4().hex[:8]}"
    refusal = [{"type": "Rejected", "status": "True", "reason": "InvalidSpec"}]
    await feed(watcher, "CloneSet", [("ADDED", counted(cloneset(rejected, 30), OWN, conditions=refusal))])
    recount = counted(cloneset(rejected, 31), OWN, conditions=refusal, readyReplicas=1)
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, recount))])
    assert len(await event_store.read_stream(CLONESET.observed_stream(NS, rejected))) == 2

    shadowed = f"web-{uuid.uuid4().hex[:8]}"
    labelled = counted(cloneset(shadowed, 40, **{MANAGE_LABEL: SHADOW}), OWN)
    await feed(watcher, "CloneSet", [("ADDED", labelled)])
    recount = counted(cloneset(shadowed, 41, **{MANAGE_LABEL: SHADOW}), OWN, readyReplicas=1)
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, recount))])
    assert observed(await event_store.read_stream(CLONESET.observed_stream(NS, shadowed))) == [
        ("CloneSet", "40"),
        ("CloneSet", "41"),
    ]


async def test_another_writer_setting_back_the_counts_rollbooks_write_changed_is_stored(
    watcher: Watcher, event_store: EventStore
) -> None:
    """rollbook's own count write is not stored, but the state it left is what a later observation is new
    against: another controller writing back the counts the store last held is a change, and is stored."""
    owner = f"web-{uuid.uuid4().hex[:8]}"
    await feed(watcher, "CloneSet", [("ADDED", counted(cloneset(owner, 10), "kruise-manager"))])
    ours = counted(cloneset(owner, 11), OWN, readyReplicas=1, availableReplicas=1)
    await feed(watcher, "CloneSet", [("MODIFIED", await plan(event_store, ours))])
    await feed(watcher, "CloneSet", [("MODIFIED", counted(cloneset(owner, 12), "kruise-manager"))])
    stored = await event_store.read_stream(CLONESET.observed_stream(NS, owner))
    assert [e.envelope.payload.resource_version for e in stored] == ["10", "12"]


async def test_counts_written_under_rollbooks_name_are_stored_unless_rollbook_planned_them_lately(
    watcher: Watcher, event_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A field manager's name is whatever the writer claims: a count write under rollbook's executor's
    name goes unstored only when its counts are one of the CloneSet's latest StatusPlanned (the planner
    may have planned again since). Counts no StatusPlanned carried, one of another CloneSet's, one
    planned longer ago than the last ``RECENT_PLANNED``, and any write while the store cannot be read are
    stored (a row too many is safe, a change lost is not), and so are counts set back to a plan rollbook
    already wrote."""
    owner, other = (f"web-{uuid.uuid4().hex[:8]}" for _ in range(2))
    stream = CLONESET.observed_stream(NS, owner)
    await feed(watcher, "CloneSet", [("ADDED", counted(cloneset(owner, 10), "kruise-manager"))])

    def stored_versions(stored: list[Any]) -> list[str]:
        return [e.envelope.payload.resource_version for e in stored]

    # Planned, then planned again twice before the watcher saw the write: still rollbook's, not stored.
    await plan(event_store, counted(cloneset(owner, 11), OWN, readyReplicas=1, availableReplicas=1))
    await plan(event_store, counted(cloneset(owner, 11), OWN, readyReplicas=0, availableReplicas=0))
    await plan(event_store, counted(cloneset(owner, 11), OWN))
    ours = counted(cloneset(owner, 11), OWN, readyReplicas=1, availableReplicas=1)
    await feed(watcher, "CloneSet", [("MODIFIED", ours)])
    assert stored_versions(await event_store.read_stream(stream)) == ["10"]

    # Counts no StatusPlanned carried, written under rollbook's name: stored.
    await feed(watcher, "CloneSet", [("MODIFIED", counted(cloneset(owner, 12), OWN, readyReplicas=3))])
    # Counts only another CloneSet's plan carried: stored.
    other_plan = await plan(event_store, counted(cloneset(other, 13), OWN, replicas=5, availableReplicas=5))
    spoofed = counted(cloneset(owner, 13), OWN, replicas=5, availableReplicas=5)
    assert spoofed["status"] == other_plan["status"]
    await feed(watcher, "CloneSet", [("MODIFIED", spoofed)])
    # Counts set back to a plan rollbook already wrote (it writes each plan once): stored.
    set_back = counted(cloneset(owner, 14), OWN, readyReplicas=1, availableReplicas=1)
    assert set_back["status"] == ours["status"]
    await feed(watcher, "CloneSet", [("MODIFIED", set_back)])
    assert stored_versions(await event_store.read_stream(stream)) == ["10", "12", "13", "14"]

    # Counts planned once, with RECENT_PLANNED plans since: a replay of an old plan, stored.
    old = await plan(event_store, counted(cloneset(owner, 15), OWN, readyReplicas=0))
    for ready in range(RECENT_PLANNED):
        await plan(event_store, counted(cloneset(owner, 15), OWN, readyReplicas=10 + ready))
    await feed(watcher, "CloneSet", [("MODIFIED", old)])
    assert stored_versions(await event_store.read_stream(stream))[4:] == ["15"]

    # The store cannot say what was planned: stored.
    async def unreadable(*args: Any) -> list[Any]:
        raise ConnectionError("the store is restarting")

    planned = await plan(event_store, counted(cloneset(owner, 16), OWN, readyReplicas=1))
    monkeypatch.setattr(event_store, "read_stream_latest", unreadable)
    await feed(watcher, "CloneSet", [("MODIFIED", planned)])
    monkeypatch.undo()
    assert stored_versions(await event_store.read_stream(stream))[5:] == ["16"]

    # A genuine write again, the store readable: not stored.
    await feed(
        watcher, "CloneSet", [("MODIFIED", await plan(event_store, counted(cloneset(owner, 17), OWN)))]
    )
    assert stored_versions(await event_store.read_stream(stream))[6:] == []


async def trickle_appends(event_store: EventStore, pace_interval: float, spacing: float) -> tuple[int, bool]:
    """One pod's watch events ``spacing`` seconds apart (a rollout held to the API rate): how many appends
    stored them, and whether the first was stored before the pace interval had passed."""
    api = client.ApiClient()  # never called: the watch events are fed in
    watched = Watcher(Settings(pace_interval=pace_interval), event_store, api)
    appender = asyncio.create_task(watched.append_queued())
    owner = f"trickle-{uuid.uuid4().hex[:8]}"
    try:
        await feed(watched, "CloneSet", [("ADDED", cloneset(owner, 10))])  # before the trickle: a quiet spell
        await asyncio.sleep(pace_interval)
        before = watched.appends
        first_on_time = False
        for version in range(11, 15):
            ready = "True" if version % 2 else "False"
            change = ("MODIFIED", pod(owner, "a", version, ready=ready, action=f"act-{version}"))
            await watched._on_watch_event(kind_watch(watched, "Pod"), *change)
            if version == 11:
                try:
                    await asyncio.wait_for(
                        watched._idle.wait(), pace_interval * 0.75 if pace_interval else 30
                    )
                    first_on_time = True
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(spacing)
            if not pace_interval:  # unpaced, each is stored before the next arrives, however slow the host
                await asyncio.wait_for(watched._idle.wait(), 30)
        await asyncio.wait_for(watched._idle.wait(), 30)
        assert [version for _, version in await stored_pods(event_store, owner)] == ["11", "12", "13", "14"]
        return watched.appends - before, first_on_time
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()


async def test_watch_events_trickling_in_within_the_pace_interval_are_one_append_a_lone_one_waits_for_none(
    event_store: EventStore,
) -> None:
    paced, first_on_time = await trickle_appends(event_store, pace_interval=1.0, spacing=0.2)
    # The first, after a quiet spell, was stored at once; the three after it, arriving within the interval
    # of that append's start, are one append (each a state of its own: all stored).
    assert first_on_time
    assert paced == 2
    unpaced, _ = await trickle_appends(event_store, pace_interval=0.0, spacing=0.2)
    assert unpaced == 4
