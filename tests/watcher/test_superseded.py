"""Which observations of one append the watcher stores (services/watcher/objects.py): a MODIFIED that a
later observation of the same object in the same append supersedes is dropped; ADDED, DELETED and the
last state of every object are kept, in watch order. And what counts as a real change."""

from __future__ import annotations

from typing import Any

import pytest

from services.model.events import Envelope, ObjectObserved
from services.watcher.objects import comparable, latest_per_object, observation

STREAM = "CloneSet/default/web/observed"


def pod(name: str, version: int, *, uid: str | None = None, **status: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(version),
        },
        "status": status,
    }


def observed(spec: str) -> Envelope:
    """``"a2M"``: pod a at resourceVersion 2, MODIFIED (A ADDED, D DELETED); ``"a'3A"``: another pod
    named a (a new uid)."""
    name, rest = spec[0], spec[1:]
    uid = f"uid-{name}"
    if rest.startswith("'"):
        uid, rest = f"uid-{name}-new", rest[1:]
    change = {"A": "ADDED", "M": "MODIFIED", "D": "DELETED"}[rest[-1]]
    return observation("Pod", pod(name, int(rest[:-1]), uid=uid), change, stream=STREAM, correlation_id=None)


def kept(specs: str) -> list[str]:
    events = {observed(s).event_id: s for s in specs.split()}
    return [events[e.event_id] for e in latest_per_object([observed(s) for s in specs.split()])]


@pytest.mark.parametrize(
    ("batch", "stored"),
    [
        ("a2M", "a2M"),  # alone: stored
        ("a2M a3M a4M", "a4M"),  # a kubelet burst: the last state only
        ("a2M b2M a3M", "b2M a3M"),  # other objects keep their order; a's last state where it came
        ("a2M b2M a3M b3M", "a3M b3M"),
        ("a1A a2M a3M", "a1A a3M"),  # the object's appearance is kept
        ("a2M a3M a4D", "a4D"),  # its deletion carries its last state
        ("a1A a2D", "a1A a2D"),  # appeared and went: both kept
        ("a2D a'3A a'4M", "a2D a'3A a'4M"),  # a new pod under the same name is another object
        ("a2M a'3A", "a2M a'3A"),
        ("a2M a'3A a5M a'4M", "a'3A a5M a'4M"),
    ],
)
def test_a_modified_observation_superseded_in_the_same_append_is_not_stored(batch: str, stored: str) -> None:
    assert kept(batch) == stored.split()


def test_superseding_keeps_the_latest_object() -> None:
    events = [
        observation("Pod", pod("a", 2, ready="False"), "MODIFIED", stream=STREAM, correlation_id=None),
        observation("Pod", pod("a", 3, ready="True"), "MODIFIED", stream=STREAM, correlation_id=None),
    ]
    (survivor,) = latest_per_object(events)
    assert isinstance(survivor.payload, ObjectObserved)
    assert survivor.payload.object["status"] == {"ready": "True"}
    assert survivor.event_id == events[1].event_id  # its own id: re-emitting it stores nothing new


def ready_pod(version: int, ready: str, **annotations: str) -> Envelope:
    obj = pod("a", version, phase="Running", conditions=[{"type": "Ready", "status": ready}])
    obj["metadata"]["annotations"] = annotations
    return observation("Pod", obj, "MODIFIED", stream=STREAM, correlation_id=None)


def test_a_moment_a_pod_was_unavailable_is_stored_though_superseded() -> None:
    """The audit trail counts unavailable pods at every stored state: a not-ready blip inside one append
    (a kubelet restart) must reach the store, or a real maxUnavailable breach could not be seen."""
    events = [ready_pod(2, "True"), ready_pod(3, "False"), ready_pod(4, "False"), ready_pod(5, "True")]
    assert [e.event_id for e in latest_per_object(events)] == [
        events[0].event_id,
        events[2].event_id,  # the last not-ready state before it became ready again
        events[3].event_id,
    ]


def test_an_action_id_is_stored_though_a_later_state_carries_another() -> None:
    """Several SidecarSets share a pod's action-id annotation: SidecarSet X's id overwritten by Y's within
    one append must still be stored, or X waits for it until its expectation times out."""
    sidecar = "rollbook.io/sidecarset-action-id"
    events = [
        ready_pod(2, "True", **{sidecar: "x1"}),
        ready_pod(3, "True", **{sidecar: "y1"}),
        ready_pod(4, "True", **{sidecar: "y1"}),
    ]
    assert [e.event_id for e in latest_per_object(events)] == [events[0].event_id, events[2].event_id]


def cloneset_status(version: int, ready: int, *, annotation: str = "") -> Envelope:
    obj = {
        "kind": "CloneSet",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "uid-web",
            "resourceVersion": str(version),
        },
        "status": {"replicas": 2, "readyReplicas": ready},
    }
    if annotation:
        obj["metadata"]["annotations"] = {"note": annotation}
    return observation("CloneSet", obj, "MODIFIED", stream=STREAM, correlation_id=None)


def test_every_observation_of_a_workload_is_kept() -> None:
    """A status written under rollbook's name that no plan carried is stored as a change: a forged status,
    whether set back or followed by any other write of the CloneSet within one append, must still reach
    that check, not be folded into the write after it."""
    events = [
        cloneset_status(2, 2),
        cloneset_status(3, 0),  # forged: nobody is ready
        cloneset_status(4, 0, annotation="x"),  # an annotation: the same status, a state of its own
        cloneset_status(5, 2),  # set back
    ]
    assert latest_per_object(events, every_state={"CloneSet"}) == events
    # Not among them (a kind rollbook only records), the burst is its last state.
    assert latest_per_object(events) == events[-1:]


@pytest.mark.parametrize(
    ("before", "after", "real_change"),
    [
        ({"resourceVersion": "1"}, {"resourceVersion": "2"}, False),
        (
            {"resourceVersion": "1", "managedFields": [{"manager": "a"}]},
            {"managedFields": [{"manager": "b"}]},
            False,
        ),
        (
            {"resourceVersion": "1", "labels": {"x": "1"}},
            {"resourceVersion": "2", "labels": {"x": "2"}},
            True,
        ),
        (
            {"annotations": {"rollbook.io/action-id": "a"}},
            {"annotations": {"rollbook.io/action-id": "b"}},
            True,
        ),
    ],
)
def test_a_real_change_ignores_resource_version_and_managed_fields(
    before: dict[str, Any], after: dict[str, Any], real_change: bool
) -> None:
    old = {"kind": "Pod", "metadata": {"name": "a", **before}, "status": {"phase": "Running"}}
    new = {"kind": "Pod", "metadata": {"name": "a", **after}, "status": {"phase": "Running"}}
    assert (comparable(old) != comparable(new)) is real_change


def test_the_comparable_view_leaves_the_object_as_it_was() -> None:
    obj = {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "7", "managedFields": []}, "spec": {}}
    view = comparable(obj)
    assert "resourceVersion" not in view["metadata"]
    assert obj["metadata"] == {"name": "a", "resourceVersion": "7", "managedFields": []}  # the id needs it
