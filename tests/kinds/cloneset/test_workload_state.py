"""The planner service's fold: expectations and order independence (what makes replay exact)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import CLONESET
from services.model.events import (
    Envelope,
    Event,
    ObjectObserved,
    PodActionFailed,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    new_event,
)
from services.model.rounds import EXPECTATION_TIMEOUT, UNREPORTED_TIMEOUT, encode_input
from services.model.streams import ACTION_ID_ANNOTATION

NS, NAME = "default", "web"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Log:
    """Builds the three streams of one workload with consecutive versions."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}

    def add(self, stream: str, payload: Event, at: datetime) -> Envelope:
        version = self.versions[stream] = self.versions.get(stream, 0) + 1
        return new_event(payload, stream=stream, stream_version=version, occurred_at=at)

    def observe(
        self,
        kind: str,
        name: str,
        uid: str,
        change: str = "ADDED",
        action: str | None = None,
        at: datetime = T0,
    ) -> Envelope:
        metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid}
        if action:
            metadata["annotations"] = {ACTION_ID_ANNOTATION: action}
        obj = {"kind": kind, "metadata": metadata, "spec": {"replicas": 1}}
        payload = ObjectObserved(
            kind=kind, namespace=NS, name=name, uid=uid, resource_version="1", change=change, object=obj
        )  # type: ignore[arg-type]
        return self.add(CLONESET.observed_stream(NS, NAME), payload, at)

    def request(
        self,
        action_id: str,
        action: str,
        pod: str,
        at: datetime = T0,
        round_id: uuid.UUID | None = None,
        **details: Any,
    ) -> Envelope:
        payload = PodActionRequested(
            action_id=action_id, action=action, namespace=NS, pod=pod, details=details
        )
        stream = CLONESET.decisions_stream(NS, NAME)
        version = self.versions[stream] = self.versions.get(stream, 0) + 1
        return new_event(
            payload, stream=stream, stream_version=version, occurred_at=at, causation_id=round_id
        )

    def outcome(self, payload: Event, at: datetime = T0) -> Envelope:
        return self.add(CLONESET.actions_stream(NS, NAME), payload, at)


def folded(events: list[Envelope]) -> WorkloadState:
    state = WorkloadState(NS, NAME)
    for event in events:
        state.fold(event)
    return state


def test_a_create_is_pending_until_its_action_id_is_seen_on_the_pod() -> None:
    log = Log()
    events = [log.observe("CloneSet", NAME, "cs"), log.request("a1", "createPod", "web-x")]
    assert [p.event.action_id for p in folded(events).pending()] == ["a1"]
    events.append(log.outcome(PodActionSucceeded(action_id="a1")))
    assert len(folded(events).pending()) == 1  # reported done, but not seen yet: still expected
    events.append(log.observe("Pod", "web-x", "u1", action="a1"))
    assert folded(events).pending() == []


def _claim(name: str) -> dict[str, Any]:
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS}}


def test_a_create_with_claims_is_pending_until_the_pod_and_each_claim_are_seen() -> None:
    # The watcher sees pods and claims on separate watches: the pod may show up first. Planning on a view
    # with the pod but not its claim could delete the pod without it (scale in), leaving the claim behind.
    claims = [_claim("data-web-x"), _claim("logs-web-x")]
    seen_first = {
        "the pod": ("Pod", "web-x"),
        "one claim": ("PersistentVolumeClaim", "data-web-x"),
    }
    for what, (kind, name) in seen_first.items():
        log = Log()
        events = [log.observe("CloneSet", NAME, "cs"), log.request("a1", "createPod", "web-x", pvcs=claims)]
        events += [
            log.outcome(PodActionSucceeded(action_id="a1")),
            log.observe(kind, name, "u1", action="a1"),
        ]
        assert [p.event.action_id for p in folded(events).pending()] == ["a1"], what
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.request("a1", "createPod", "web-x", pvcs=claims),
        log.observe("Pod", "web-x", "u1", action="a1"),
        log.observe("PersistentVolumeClaim", "data-web-x", "c1", action="a1"),
        # made by an earlier try of this instance (another action id): not yet this create's claim
        log.observe("PersistentVolumeClaim", "logs-web-x", "c2", action="a0"),
    ]
    state = folded(events)
    assert [p.event.action_id for p in state.pending()] == ["a1"]
    assert state.requested["a1"].event.details["pvcs"] == ["data-web-x", "logs-web-x"]  # names, not objects
    # The executor took that claim for this create: it carries the create's id now.
    events.append(log.observe("PersistentVolumeClaim", "logs-web-x", "c2", action="a1", change="MODIFIED"))
    assert folded(events).pending() == []


def test_only_this_creates_id_on_each_claim_puts_it_in_effect_even_if_seen_as_deleted() -> None:
    # A pod and its claim deleted by a user, the same instance id planned again: the older claim's
    # observations (another action id) are not this create's claim; this create's claim seen only as
    # it went (the watcher missed its ADDED) is.
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.observe("PersistentVolumeClaim", "data-web-x", "c0", action="a0"),
        log.observe("PersistentVolumeClaim", "data-web-x", "c0", action="a0", change="DELETED"),
        log.request("a1", "createPod", "web-x", pvcs=[_claim("data-web-x")]),
        log.observe("Pod", "web-x", "u1", action="a1"),
    ]
    assert [p.event.action_id for p in folded(events).pending()] == ["a1"]
    events.append(log.observe("PersistentVolumeClaim", "data-web-x", "c1", action="a1", change="DELETED"))
    assert folded(events).pending() == []


def test_a_create_pvc_of_an_older_trail_is_pending_until_its_claim_is_seen() -> None:
    # CloneSet rules before 11 created each claim as an action of its own: such trails still fold.
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.request("p1", "createPVC", "web-x", pvc="data-web-x", object=_claim("data-web-x")),
        log.request("a1", "createPod", "web-x"),
        log.observe("Pod", "web-x", "u1", action="a1"),
    ]
    assert [p.event.action_id for p in folded(events).pending()] == ["p1"]
    events.append(log.observe("PersistentVolumeClaim", "data-web-x", "c1", action="p1"))
    assert folded(events).pending() == []


def test_an_action_seen_overwritten_by_a_later_one_of_its_round_for_the_pod_is_in_effect() -> None:
    # markNotReady then updateInPlace, one round, one pod: the executor applies them in order, and the
    # annotation then names only the update. A watcher restarted in between relists the pod with the
    # update's id alone; the markNotReady must not hold planning until its 60 s expectation timeout.
    log, round_1, round_2 = Log(), uuid.uuid4(), uuid.uuid4()
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.request("m1", "markNotReady", "web-x", round_id=round_1),
        log.request("u1", "updateInPlace", "web-x", round_id=round_1),
        log.request("m2", "markNotReady", "web-y", round_id=round_1),
        log.outcome(PodActionSucceeded(action_id="m1")),
        log.outcome(PodActionSucceeded(action_id="u1")),
        log.observe("Pod", "web-x", "ux", action="u1"),
    ]
    assert [p.event.action_id for p in folded(events).pending()] == ["m2"]  # another pod: still expected
    # Only a later action of the same round counts: seeing an earlier one, or another round's, does not.
    log = Log()
    earlier = [
        log.observe("CloneSet", NAME, "cs"),
        log.request("m1", "markNotReady", "web-x", round_id=round_1),
        log.request("u1", "updateInPlace", "web-x", round_id=round_1),
        log.request("r2", "markReady", "web-x", round_id=round_2),
        log.observe("Pod", "web-x", "ux", action="m1"),
    ]
    assert [p.event.action_id for p in folded(earlier).pending()] == ["u1", "r2"]
    earlier.append(log.observe("Pod", "web-x", "ux", action="r2", change="MODIFIED"))
    assert [p.event.action_id for p in folded(earlier).pending()] == ["u1"]


def test_an_update_carrying_its_not_ready_condition_is_in_effect_once_its_patch_is_seen() -> None:
    # One updateInPlace writes the InPlaceUpdateReady=False condition (pods/status, no action id), then the
    # patch with the action id: the pod showing the condition alone is not the action in effect (the
    # patch may still be on its way, or the executor died between the two writes and its redelivery will
    # write it); the pod carrying the action id is.
    log, round_1 = Log(), uuid.uuid4()
    not_ready = {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}
    events = [
        log.observe("CloneSet", NAME, "cs"),
        log.observe("Pod", "web-x", "ux"),
        log.request("u1", "updateInPlace", "web-x", round_id=round_1, uid="ux", notReady=not_ready),
        log.observe("Pod", "web-x", "ux", change="MODIFIED"),  # the condition write
    ]
    assert [p.event.action_id for p in folded(events).pending()] == ["u1"]
    events.append(log.observe("Pod", "web-x", "ux", action="u1", change="MODIFIED"))  # the patch
    assert folded(events).pending() == []


def test_a_failed_action_is_not_pending() -> None:
    log = Log()
    events = [
        log.request("a1", "createPod", "web-x"),
        log.outcome(PodActionFailed(action_id="a1", reason="no")),
    ]
    assert folded(events).pending() == []


def test_expectations_time_out_on_round_time_not_wall_time() -> None:
    log = Log()
    events = [
        log.request("a1", "createPod", "web-x", at=T0),
        log.outcome(PodActionSucceeded(action_id="a1"), at=T0),
        log.observe("CloneSet", NAME, "cs", at=T0),
    ]
    assert len(folded(events).pending()) == 1
    events.append(log.observe("CloneSet", NAME, "cs", change="MODIFIED", at=T0 + EXPECTATION_TIMEOUT))
    assert folded(events).pending() == []


def test_an_action_still_queued_for_an_executor_does_not_time_out() -> None:
    # 1,000 creates at 14/s take 70 s: timing the last ones out from their request would make the
    # planner request the same pods again. The clock starts when the executor reports the action done.
    log = Log()
    events = [log.request("a1", "createPod", "web-x", at=T0), log.observe("CloneSet", NAME, "cs", at=T0)]
    late = T0 + 3 * EXPECTATION_TIMEOUT
    events.append(log.observe("CloneSet", NAME, "cs", change="MODIFIED", at=late))
    state = folded(events)
    assert [p.event.action_id for p in state.pending()] == ["a1"]
    events.append(log.outcome(PodActionSucceeded(action_id="a1"), at=late))
    state = folded(events)
    assert state.expectation_deadline(state.pending()[0]) == late + EXPECTATION_TIMEOUT
    events.append(log.observe("CloneSet", NAME, "cs", change="MODIFIED", at=late + EXPECTATION_TIMEOUT))
    assert folded(events).pending() == []


def test_an_action_never_reported_stops_blocking_after_the_long_timeout() -> None:
    log = Log()
    events = [log.request("a1", "createPod", "web-x", at=T0), log.observe("CloneSet", NAME, "cs", at=T0)]
    events.append(log.observe("CloneSet", NAME, "cs", change="MODIFIED", at=T0 + UNREPORTED_TIMEOUT))
    assert folded(events).pending() == []


def test_a_delete_is_done_when_its_uid_is_gone_even_if_the_name_comes_back() -> None:
    log = Log()
    events = [log.observe("Pod", "web-x", "u1"), log.request("d1", "deletePod", "web-x", uid="u1")]
    assert len(folded(events).pending()) == 1
    events.append(log.observe("Pod", "web-x", "u1", change="DELETED"))
    events.append(log.observe("Pod", "web-x", "u2"))  # replaced with the same name
    state = folded(events)
    assert state.pending() == []
    assert state.pods["web-x"]["metadata"]["uid"] == "u2"


def test_a_late_deleted_of_an_old_pod_keeps_the_new_one() -> None:
    log = Log()
    events = [log.observe("Pod", "web-x", "u2"), log.observe("Pod", "web-x", "u1", change="DELETED")]
    assert folded(events).pods["web-x"]["metadata"]["uid"] == "u2"


def test_the_fold_does_not_depend_on_how_streams_interleave() -> None:
    log = Log()
    observed = [
        log.observe("CloneSet", NAME, "cs", at=T0),
        log.observe("Pod", "web-x", "u1", action="a1", at=T0 + timedelta(seconds=2)),
        log.observe("Pod", "web-y", "u3", at=T0 + timedelta(seconds=3)),
    ]
    decisions = [
        log.request("a1", "createPod", "web-x", at=T0),
        log.request("d1", "deletePod", "web-y", uid="u3"),
    ]
    outcomes = [log.outcome(PodActionSucceeded(action_id="a1"), at=T0 + timedelta(seconds=1))]
    results = set()
    for order in itertools.permutations([observed, decisions, outcomes]):
        for interleave in (lambda s: [e for stream in s for e in stream], _round_robin):
            state = folded(interleave(list(order)))
            pending = tuple(sorted(p.event.action_id for p in state.pending()))
            results.add(
                (encode_input(state.plan_input())[1], pending, tuple(sorted(state.through().items())))
            )
    assert len(results) == 1
    ((_, pending, _),) = results
    assert pending == ("d1",)


def test_an_executor_taking_an_action_is_no_planner_input() -> None:
    log = Log()
    events = [
        log.observe("CloneSet", NAME, "cs", at=T0),
        log.request("a1", "createPod", "web-x", at=T0),
        log.observe("Pod", "web-x", "u1", action="a1", at=T0 + timedelta(seconds=1)),
        log.outcome(PodActionSucceeded(action_id="a1"), at=T0 + timedelta(seconds=2)),
    ]
    without = folded(events)
    started = log.outcome(PodActionStarted(action_id="a1", executor="e"), at=T0 + timedelta(seconds=3))
    taken = folded([*events, started])
    # Folded (a round's ``through`` covers it, so replay reads the same versions) but changing nothing
    # the planner decides on: not the input, not the round's clock, not its cause.
    assert (
        taken.through()[CLONESET.actions_stream(NS, NAME)]
        == without.through()[CLONESET.actions_stream(NS, NAME)] + 1
    )
    assert encode_input(taken.plan_input()) == encode_input(without.plan_input())
    assert (taken.now, taken.last_input_id) == (without.now, without.last_input_id)
    assert taken.pending() == without.pending() == []


def _round_robin(streams: list[list[Envelope]]) -> list[Envelope]:
    out: list[Envelope] = []
    for group in itertools.zip_longest(*streams):
        out += [e for e in group if e is not None]
    return out


def test_a_pod_deleted_by_someone_else_holds_planning_until_gone_while_its_pvcs_stay() -> None:
    log = Log()
    label = {"apps.kruise.io/cloneset-instance-id": "x"}
    pod = {
        "metadata": {
            "name": "web-x",
            "uid": "u1",
            "labels": label,
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        }
    }
    pvc = {"metadata": {"name": "data-web-x", "uid": "p1", "labels": label}}
    events = [
        log.add(
            CLONESET.observed_stream(NS, NAME),
            ObjectObserved(
                kind="PersistentVolumeClaim",
                namespace=NS,
                name="data-web-x",
                uid="p1",
                resource_version="1",
                change="ADDED",
                object=pvc,
            ),
            T0,
        ),
        log.add(
            CLONESET.observed_stream(NS, NAME),
            ObjectObserved(
                kind="Pod",
                namespace=NS,
                name="web-x",
                uid="u1",
                resource_version="2",
                change="MODIFIED",
                object=pod,
            ),
            T0,
        ),
    ]
    assert list(folded(events).leaving_with_claims()) == ["web-x"]
    events.append(log.observe("Pod", "web-x", "u1", change="DELETED", at=T0))
    assert folded(events).leaving_with_claims() == {}
    stuck = events[:2] + [log.observe("CloneSet", NAME, "cs", at=T0 + EXPECTATION_TIMEOUT)]
    assert folded(stuck).leaving_with_claims() == {}  # a pod stuck terminating does not wedge the workload


# --- pending_deadline: the wake-up's expectations check, kept up to date as events fold ----------------

PODS = ("web-a", "web-b", "web-c")
PVCS = ("data-web-a", "data-web-b")


def _operations() -> Any:
    from hypothesis import strategies as st

    action = st.sampled_from(
        [
            "createPod",
            "markNotReady",
            "updateInPlace",
            "deletePod",
            "createPVC",
            "deletePVC",
            "setPodsToDelete",
        ]
    )
    request = st.tuples(st.just("request"), action, st.sampled_from(PODS), st.integers(0, 2))
    outcome = st.tuples(st.just("outcome"), st.booleans(), st.integers(0, 8), st.integers(0, 3))
    observe = st.tuples(
        st.just("observe"),
        st.sampled_from(["Pod", "PersistentVolumeClaim", "CloneSet"]),
        st.integers(0, 2),  # which object of that kind
        st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
        st.integers(-1, 8),  # which action id it carries (-1: none)
    )
    tick = st.tuples(st.just("tick"), st.sampled_from([1, 30, 61, 200, 700]))
    return st.lists(st.one_of(request, outcome, observe, tick), max_size=40)


def _events(operations: list[tuple[Any, ...]]) -> list[Envelope]:
    log, events, ids = Log(), [], []
    rounds = [uuid.UUID(int=r + 1) for r in range(3)]
    now = T0
    for operation in operations:
        if operation[0] == "request":
            _, action, pod, round_index = operation
            action_id = f"a{len(ids)}"
            ids.append(action_id)
            details: dict[str, Any] = {"uid": f"uid-{pod}", "pvc": PVCS[len(ids) % 2]}
            if action == "deletePod":
                details["pvcUids"] = {PVCS[0]: f"uid-{PVCS[0]}"}
            if action == "createPod" and round_index:  # a create with its claim (CloneSet rules 11)
                details["pvcs"] = [{"metadata": {"name": PVCS[round_index - 1]}}]
            events.append(
                log.request(action_id, action, pod, at=now, round_id=rounds[round_index], **details)
            )
        elif operation[0] == "outcome" and ids:
            _, failed, which, _ = operation
            action_id = ids[which % len(ids)]
            payload: Event = (
                PodActionFailed(action_id=action_id, reason="no")
                if failed
                else PodActionSucceeded(action_id=action_id)
            )
            events.append(log.outcome(payload, at=now))
        elif operation[0] == "observe":
            _, kind, which, change, carried = operation
            name = {"Pod": PODS, "PersistentVolumeClaim": PVCS, "CloneSet": (NAME,)}[kind]
            name_of = name[which % len(name)]
            action = ids[carried % len(ids)] if ids and carried >= 0 else None
            events.append(log.observe(kind, name_of, f"uid-{name_of}", change=change, action=action, at=now))
        elif operation[0] == "tick":
            now += timedelta(seconds=operation[1])
            events.append(log.observe("CloneSet", NAME, f"uid-{NAME}", change="MODIFIED", at=now))
    return events


def test_pending_deadline_is_the_earliest_deadline_of_the_pending_actions() -> None:
    """The wake-up's check keeps only what could have changed since its last call; after every event, in
    any interleaving of the streams, it says what a walk over every unsettled action says."""
    import random

    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(_operations(), st.integers(0, 2**32))
    def check(operations: list[tuple[Any, ...]], seed: int) -> None:
        events = _events(operations)
        # Streams keep their order; the interleaving across streams is random (the fold allows it).
        by_stream: dict[str, list[Envelope]] = {}
        for event in events:
            by_stream.setdefault(event.stream, []).append(event)
        shuffled, chooser = [], random.Random(seed)
        while any(by_stream.values()):
            stream = chooser.choice([s for s, left in by_stream.items() if left])
            shuffled.append(by_stream[stream].pop(0))
        incremental, walked = WorkloadState(NS, NAME), WorkloadState(NS, NAME)
        for event in shuffled:
            incremental.fold(event)
            walked.fold(event)
            pending = walked.pending()
            expected = min((walked.expectation_deadline(p) for p in pending), default=None)
            assert incremental.pending_deadline() == expected

    check()


def test_pending_deadline_in_a_scale_out() -> None:
    # Every create pending until its pod is seen with its id; the deadline is the earliest unreported one.
    log = Log()
    events = [log.observe("CloneSet", NAME, "cs")]
    events += [log.request(f"c{i}", "createPod", f"web-{i}", at=T0 + timedelta(seconds=i)) for i in range(3)]
    state = folded(events)
    assert state.pending_deadline() == T0 + UNREPORTED_TIMEOUT
    state.fold(log.observe("Pod", "web-0", "u0", action="c0"))
    assert state.pending_deadline() == T0 + timedelta(seconds=1) + UNREPORTED_TIMEOUT
    # c2 reported done at T0 + 5 s: 60 s from its outcome, earlier than c1's 600 s from its request.
    state.fold(log.outcome(PodActionSucceeded(action_id="c2"), at=T0 + timedelta(seconds=5)))
    assert state.pending_deadline() == T0 + timedelta(seconds=5) + EXPECTATION_TIMEOUT
    state.fold(log.observe("Pod", "web-1", "u1", action="c1"))
    assert state.pending_deadline() == T0 + timedelta(seconds=5) + EXPECTATION_TIMEOUT
    state.fold(log.observe("Pod", "web-2", "u2", action="c2"))
    assert state.pending_deadline() is None


def test_pending_deadline_sees_an_earlier_action_settled_by_a_later_request_of_its_round() -> None:
    # The pod was observed with the round's later action (updateInPlace) before that request was folded
    # (streams fold in any interleaving): once it is, the earlier markNotReady is in effect too.
    log, round_id = Log(), uuid.uuid4()
    mark = log.request("m1", "markNotReady", "web-x", round_id=round_id)
    update = log.request("u1", "updateInPlace", "web-x", round_id=round_id)
    state = folded([log.observe("CloneSet", NAME, "cs"), mark])
    assert state.pending_deadline() == T0 + UNREPORTED_TIMEOUT
    state.fold(log.observe("Pod", "web-x", "ux", action="u1"))
    assert state.pending_deadline() == T0 + UNREPORTED_TIMEOUT  # u1 is not known yet
    state.fold(update)
    assert state.pending_deadline() is None
