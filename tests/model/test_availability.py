"""services/model/availability.py: a pod is available as OpenKruise's IsPodAvailable has it (lifecycle state
empty or Normal, Running, Ready, InPlaceUpdateReady absent or True, Ready for longer than minReadySeconds),
and not terminating; a workload's unavailable pods are replicas minus its available ones; along a trail a
pod waiting out minReadySeconds becomes available at the first observation past it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.model.availability import (
    AvailabilityCount,
    condition_time,
    min_ready_seconds,
    pod_available,
    unavailable,
)

LIFECYCLE = "lifecycle.apps.kruise.io/state"
SINCE = "2026-11-30T12:00:00Z"
T = 1796040000.0  # SINCE in epoch seconds


def pod(
    *,
    state: str | None = "Normal",
    phase: str | None = "Running",
    ready: str | None = "True",
    in_place: str | None = None,
    since: str | None = SINCE,
    terminating: bool = False,
) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = []
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready, "lastTransitionTime": since})
    if in_place is not None:
        conditions.append({"type": "InPlaceUpdateReady", "status": in_place})
    metadata: dict[str, Any] = {"name": "web-a", "labels": {} if state is None else {LIFECYCLE: state}}
    if terminating:
        metadata["deletionTimestamp"] = SINCE
    status: dict[str, Any] = {"conditions": conditions}
    if phase is not None:
        status["phase"] = phase
    return {"metadata": metadata, "status": status}


@pytest.mark.parametrize(
    ("shape", "available"),
    [
        (pod(), True),
        (pod(state=None), True),  # a pod no CloneSet made (a Deployment's): no lifecycle label
        (pod(state=""), True),
        (pod(state="PreparingNormal"), False),  # created, not yet Normal: already unavailable when Ready
        (pod(state="PreparingUpdate"), False),
        (pod(state="Updating"), False),
        (pod(state="Updated"), False),
        (pod(state="PreparingDelete"), False),
        (pod(phase="Pending"), False),
        (pod(phase="Succeeded"), False),
        (pod(phase=None), False),
        (pod(ready="False"), False),
        (pod(ready="Unknown"), False),
        (pod(ready=None), False),  # no Ready condition yet: starting
        (pod(in_place="True"), True),
        (pod(in_place="False"), False),  # marked not ready for an in-place update, kubelet not caught up
        (pod(in_place="Unknown"), False),  # OpenKruise: absent or True
        (pod(terminating=True), False),
        (pod(since=None), True),  # minReadySeconds 0 needs no Ready time
    ],
    ids=[
        "normal", "no-lifecycle-label", "lifecycle-empty", "preparing-normal", "preparing-update",
        "updating", "updated", "preparing-delete", "pending", "succeeded", "no-phase", "not-ready",
        "ready-unknown", "no-ready-condition", "inplace-true", "inplace-false", "inplace-unknown",
        "terminating", "no-ready-time",
    ],
)  # fmt: skip
def test_what_available_means(shape: dict[str, Any], available: bool) -> None:
    assert pod_available(shape) is available


def resizing(state: str = "Updating", in_place: str = "True", annotation: Any = None) -> dict[str, Any]:
    shape = pod(state=state, in_place=in_place)
    value = (
        json.dumps({"revision": "web-2", "rollbookResize": {"app": {}}}) if annotation is None else annotation
    )
    shape["metadata"]["annotations"] = {"apps.kruise.io/inplace-update-state": value}
    return shape


@pytest.mark.parametrize(
    ("shape", "available"),
    [
        (resizing(), True),  # restarts nothing: Ready and in its Services while Updating
        (resizing(in_place="False"), False),  # a resize that restarts a container is marked not ready
        (resizing(annotation=json.dumps({"revision": "web-2"})), False),  # an in-place update, no resize
        (resizing(annotation={"rollbookResize": {}}), False),  # the state is a JSON string or nothing
        (resizing(state="Updated"), False),  # a hook holds it after the update
        (resizing(state="PreparingUpdate"), False),
    ],
    ids=["resize", "resize-restarting", "update-not-resize", "state-not-a-string", "updated", "preparing"],
)
def test_a_resize_that_restarts_nothing_keeps_its_pod_available(
    shape: dict[str, Any], available: bool
) -> None:
    assert pod_available(shape) is available


@pytest.mark.parametrize(
    ("shape", "min_ready", "now", "available"),
    [
        (pod(), 10, T + 11, True),
        (pod(), 10, T + 10, False),  # strictly longer than minReadySeconds
        (pod(), 10, T + 5, False),
        (pod(since=None), 10, T + 3600, False),  # no Ready time: never long enough
        (pod(since="2026-11-30T12:00:00"), 10, T + 3600, False),  # no zone: not RFC 3339
        (pod(since="2026-11-30T13:00:00+01:00"), 10, T + 11, True),
        (pod(since="2026-11-30T12:00:00.5Z"), 10, T + 10.4, False),
        (pod(state="PreparingNormal"), 10, T + 3600, False),
    ],
    ids=["passed", "exactly", "not-yet", "no-time", "naive-time", "offset", "fraction", "not-normal"],
)
def test_min_ready_seconds(shape: dict[str, Any], min_ready: int, now: float, available: bool) -> None:
    assert pod_available(shape, min_ready, now) is available


def test_min_ready_seconds_needs_a_time() -> None:
    with pytest.raises(ValueError, match="needs the time"):
        pod_available(pod(), 10)


@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        (SINCE, T),
        ("2026-11-30T12:00:00.250Z", T + 0.25),
        ("2026-11-30T10:00:00-02:00", T),
        ("2026-02-30T12:00:00Z", None),
        ("2026-11-30 12:00:00Z", None),
        ("2026-11-30T12:00:00Z\n", None),
        (None, None),
        (1796040000, None),
    ],
)
def test_condition_times_are_rfc3339(value: Any, epoch: float | None) -> None:
    assert condition_time(value) == epoch


@pytest.mark.parametrize(
    ("spec", "seconds"),
    [({}, 0), ({"minReadySeconds": 30}, 30), ({"minReadySeconds": "30"}, 0), ({"minReadySeconds": True}, 0)],
)
def test_min_ready_seconds_of_a_workload(spec: dict[str, Any], seconds: int) -> None:
    assert min_ready_seconds({"spec": spec}) == seconds
    assert min_ready_seconds(None) == 0


@pytest.mark.parametrize(
    ("replicas", "pods", "expected"),
    [
        (3, [pod(), pod(), pod()], 0),
        (3, [pod(), pod()], 1),  # a missing pod is unavailable
        (
            3,
            [pod(), pod(), pod(terminating=True), pod(ready="False")],
            1,
        ),  # recreate: old going, new starting
        (3, [pod(), pod(), pod(), pod(ready="False")], 0),  # a surge pod starting takes nothing away
        (3, [pod(), pod(), pod(), pod(state="PreparingNormal")], 0),
        (4, [pod(), pod(), pod(), pod(state="PreparingNormal")], 1),  # Ready, not Normal: not available
        (2, [pod(in_place="False"), pod(ready="False")], 2),
        (0, [pod(ready="False")], 0),
    ],
)
def test_unavailable_counts_against_replicas(
    replicas: int, pods: list[dict[str, Any]], expected: int
) -> None:
    assert unavailable(replicas, pods) == expected


def test_unavailable_holds_pods_to_min_ready_seconds() -> None:
    assert unavailable(2, [pod(), pod(since="2026-11-30T12:00:05Z")], 10, T + 12) == 1
    assert unavailable(2, [pod(), pod(since="2026-11-30T12:00:05Z")], 10, T + 16) == 0


def test_a_trail_counts_a_pod_available_once_min_ready_seconds_passed() -> None:
    count = AvailabilityCount()
    assert count.observe("a", pod(), 5, T + 100) == []
    assert count.available == 1 and count.is_available("a")
    count.observe("b", pod(since="2026-11-30T12:01:50Z"), 5, T + 110)  # Ready at +110: available after +115
    assert count.available == 1 and not count.is_available("b") and count.unavailable(2) == 1
    count.observe("a", pod(), 5, T + 115)  # +115 is not after +115
    assert count.available == 1
    assert count.observe("a", pod(ready="False"), 5, T + 116) == [("b", T + 115)]  # b's time passed
    assert count.available == 1 and count.is_available("b") and not count.is_available("a")


def test_a_pod_observed_again_before_its_time_is_held_to_the_new_observation() -> None:
    count = AvailabilityCount()
    count.observe("a", pod(since="2026-11-30T12:00:10Z"), 5, T + 10)  # available after +15
    count.observe("a", pod(ready="False"), 5, T + 12)  # left service before
    count.observe("a", pod(since="2026-11-30T12:00:13Z"), 5, T + 13)  # available after +18
    assert count.advance(T + 16) == [] and count.available == 0
    assert count.advance(T + 19) == [("a", T + 18)] and count.available == 1
    assert count.advance(T + 30) == [] and count.available == 1  # counted once
    count.observe("a", None, 5, T + 31)  # gone
    assert count.available == 0 and count.held() == []


def test_the_clock_never_goes_back_and_min_ready_seconds_is_the_observations() -> None:
    count = AvailabilityCount()
    count.observe("a", pod(since="2026-11-30T12:00:10Z"), 0, T + 10)  # minReadySeconds 0: at once
    count.observe("b", pod(since="2026-11-30T12:00:10Z"), 30, T + 20)  # after +40
    count.observe("c", pod(state="Updating"), 0, T + 15)  # an observation stamped earlier: the clock stays
    assert count.clock == T + 20 and count.available == 1
    assert count.advance(T + 41) == [("b", T + 40)] and count.available == 2
