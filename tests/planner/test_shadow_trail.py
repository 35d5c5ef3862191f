"""The shadow trail (services/planner/shadow_trail.py): a CloneSet driven by someone else, as observed,
becomes observed rollouts, observed pod actions and their comparison with rollbook's decisions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from services.kinds.cloneset.rules.decisions import RULES_VERSION
from services.kinds.registry import CLONESET
from services.model.events import (
    Envelope,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionObserved,
    RolloutCompleted,
    RolloutStarted,
    ShadowCompared,
    ShadowPlanned,
)
from services.model.timestamps import parse_kube_time
from services.planner.shadow_trail import ShadowTrail
from tests.planner.kruise_observations import KruiseLog


def trail_of(log: KruiseLog, *, shadow_all: bool = True) -> tuple[ShadowTrail, list[Envelope]]:
    trail = ShadowTrail(log.namespace, log.name, shadow_all, RULES_VERSION)
    out: list[Envelope] = []
    for envelope in log.envelopes:
        out += trail.step(envelope)
    return trail, out


def of(envelopes: list[Envelope], kind: type) -> list[Any]:
    return [e.payload for e in envelopes if isinstance(e.payload, kind)]


def created(log: KruiseLog) -> list[str]:
    """Three pods created one by one, each ready before the next, as OpenKruise's slow start would."""
    log.write_status()
    names = []
    for instance in ("aaaaa", "bbbbb", "ccccc"):
        names.append(log.create_pod(instance, ready=False))
        log.set_ready(names[-1])
    log.write_status()
    return names


def update_one_by_one(log: KruiseLog, order: list[str]) -> None:
    for pod in order:
        log.start_in_place(pod)
        log.patch_in_place(pod)
        log.set_ready(pod)
        log.write_status()


def test_a_rollout_as_rollbook_would_drive_it_agrees_throughout() -> None:
    log = KruiseLog(maxUnavailable=1)
    a, b, c = created(log)
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    new = log.revision
    update_one_by_one(log, [c, b, a])  # newest first: OpenKruise's (and rollbook's) order for ready pods
    trail, out = trail_of(log)

    assert {e.stream for e in out} == {CLONESET.shadow_stream("default", "web")}
    assert [e.stream_version for e in out] == list(range(1, len(out) + 1))
    assert [(r.from_revision, r.to_revision) for r in of(out, RolloutStarted)] == [(old, new)]
    assert [(r.rollout_id, r.outcome) for r in of(out, RolloutCompleted)] == [
        (f"default/web@{new}#1", "succeeded")
    ]
    assert [(s.partition, s.max_unavailable) for s in of(out, PartitionStepPlanned)] == [(0, 1)]
    observed = [(o.action, o.pod) for o in of(out, PodActionObserved)]
    assert observed == [
        ("createPod", a), ("becameReady", a), ("createPod", b), ("becameReady", b),
        ("createPod", c), ("becameReady", c),
        ("updateInPlace", c), ("becameReady", c), ("updateInPlace", b), ("becameReady", b),
        ("updateInPlace", a), ("becameReady", a),
    ]  # fmt: skip
    compared = of(out, ShadowCompared)
    assert [(x.action, x.pod, x.verdict) for x in compared] == [
        (action, pod, "agree") for action, pod in observed if action != "becameReady"
    ], [x.reason for x in compared]
    # The in-place update starts when the pod leaves service, and its becameReady completes it.
    updates = {o.pod: o for o in of(out, PodActionObserved) if o.action == "updateInPlace"}
    readies = [o for o in of(out, PodActionObserved) if o.action == "becameReady" and o.completes]
    assert {r.completes for r in readies} >= {u.action_id for u in updates.values()}
    assert all(u.started_at < e.occurred_at for u in updates.values() for e in out if e.payload is u)
    assert all(u.rollout_id == f"default/web@{new}#1" for u in updates.values())
    # Every comparison names the recorded decision it compared with.
    planned = {e.event_id for e in out if isinstance(e.payload, ShadowPlanned)}
    assert {x.decision for x in compared} <= planned
    # The controller's status names the revision of the current template, so rollbook adopts that name
    # (revisions.reported_update_revision) and needs no alias of its own for it.
    assert trail.aliases == {}


def test_a_batch_larger_than_max_unavailable_differs() -> None:
    log = KruiseLog(maxUnavailable=1)
    a, b, c = created(log)
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    for pod in (c, b):  # two at once, maxUnavailable 1
        log.start_in_place(pod)
    for pod in (c, b):
        log.patch_in_place(pod)
    _, out = trail_of(log)
    verdicts = {(x.pod, x.verdict, x.pattern) for x in of(out, ShadowCompared) if x.action == "updateInPlace"}
    assert verdicts == {(c, "agree", None), (b, "differ", "above maxUnavailable")}
    [differ] = [x for x in of(out, ShadowCompared) if x.verdict == "differ"]
    # Its decision on that state was to go on with the pod already leaving service, not to start another.
    assert (
        differ.reason
        == f"rollbook would have updated in place {c} instead; 2 pods unavailable, maxUnavailable 1"
    )
    assert (differ.unavailable, differ.max_unavailable) == (2, 1)


def test_surge_thrash_is_named() -> None:
    log = KruiseLog(maxUnavailable=0, maxSurge=1)
    a, b, c = created(log)
    old = log.revision
    log.set_image("nginx:2.0")
    log.write_status(current=old)
    surge = log.create_pod("sssss", ready=False)
    log.delete_pod(surge)  # deleted again before it served: the thrash of kruise#2369
    _, out = trail_of(log)
    [deleted] = [x for x in of(out, ShadowCompared) if x.action == "deletePod"]
    assert (deleted.pod, deleted.verdict, deleted.pattern) == (surge, "differ", "surge thrash")
    [create] = [x for x in of(out, ShadowCompared) if x.pod == surge and x.action == "createPod"]
    assert create.verdict == "agree"  # creating the surge pod is what rollbook would do too


def test_recorded_only_while_shadowed() -> None:
    log = KruiseLog()
    created(log)
    _, out = trail_of(log, shadow_all=False)
    assert out == []  # not labelled rollbook.io/manage=shadow: rollbook drives it, no shadow trail
    log.cloneset["metadata"]["labels"] = {"rollbook.io/manage": "shadow"}
    log.observe_cloneset()
    pod = log.create_pod("ddddd", ready=False)  # a fourth pod (someone scaled by hand, say)
    _, out = trail_of(log, shadow_all=False)
    assert [(o.action, o.pod) for o in of(out, PodActionObserved)] == [("createPod", pod)]
    assert [x.verdict for x in of(out, ShadowCompared)] == ["differ"]  # 3 replicas: rollbook would not


def test_the_trail_is_the_same_when_derived_again() -> None:
    log = KruiseLog(maxUnavailable=1)
    a, b, c = created(log)
    log.set_image("nginx:2.0")
    log.write_status(current=None)
    update_one_by_one(log, [a, b, c])
    _, first = trail_of(log)
    _, second = trail_of(log)
    assert first == second
    assert len({e.event_id for e in first}) == len(first)


def test_pods_there_before_the_trail_started_were_not_created_under_observation() -> None:
    log = KruiseLog()
    log.write_status()
    log.create_pod("aaaaa")
    trail = ShadowTrail(log.namespace, log.name, True, RULES_VERSION)
    trail.first_seen = log.clock.replace(year=2027)  # the watcher first listed them long after
    out = []
    for envelope in log.envelopes:
        out += trail.step(envelope)
    assert [o.action for o in of(out, PodActionObserved)] == []


@pytest.mark.parametrize(("born", "actions"), [(True, ["createPod"]), (False, [])])
def test_a_pod_first_seen_in_the_second_after_its_creation_was_created_under_watch_if_born(
    born: bool, actions: list[str]
) -> None:
    """Shadow mode, the trail's first observation a pod whose ADDED came early in the second after it was
    created (before its CloneSet's): the watch's ADDED (born) says it was created while rollbook watched; a
    pod listed, or observed before ``born`` existed, is taken as there before the trail."""
    log = KruiseLog()
    pod = log.create_pod("aaaaa", ready=False)
    added = log.envelopes[-1]
    assert isinstance(added.payload, ObjectObserved)
    created = parse_kube_time(added.payload.object["metadata"]["creationTimestamp"])
    assert created is not None
    first = msgspec.structs.replace(
        added,
        stream_version=1,
        occurred_at=created + timedelta(seconds=1, milliseconds=50),
        payload=msgspec.structs.replace(added.payload, born=True if born else msgspec.UNSET),
    )
    out = ShadowTrail(log.namespace, log.name, True, RULES_VERSION).step(first)
    assert [(o.action, o.pod) for o in of(out, PodActionObserved)] == [(a, pod) for a in actions]
