"""The executor's spec patch as a JSON patch computed from the pod (services/model/pod_writes.py): applied
as kube-apiserver applies a JSON patch (simcluster's, which follows it), it gives what the strategic
merge gives; a status write since does not stand in its way; anything that changed a field it writes
(the action applied already, another writer's change) refuses it whole."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.model.pod_writes import Written, json_patch_from, mark_from_written
from services.model.strategic_merge import strategic_merge_patch
from services.simcluster.errors import ApiError
from services.simcluster.patch import json_patch

ACTION = "rollbook.io/action-id"
POD: dict[str, Any] = {
    "metadata": {
        "uid": "u-1",
        "labels": {"app": "web", "revision": "web-1", "old": "x"},
        "annotations": {ACTION: "earlier"},
    },
    "spec": {
        "containers": [
            {"name": "sidecar", "image": "envoy:1"},
            {"name": "app", "image": "nginx:alpine", "env": [{"name": "A", "value": "1"}, {"name": "B"}]},
        ]
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}
IMAGE = {
    "metadata": {"labels": {"revision": "web-2", "old": None}, "annotations": {ACTION: "this"}},
    "spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]},
}
ENV = {  # an env entry changed, one removed: the list is written whole
    "metadata": {"annotations": {ACTION: "this"}},
    "spec": {
        "containers": [
            {"name": "app", "env": [{"name": "A", "value": "2"}, {"name": "B", "$patch": "delete"}]}
        ]
    },
}
PROBE = {  # a $patch: replace map is one value
    "metadata": {"annotations": {ACTION: "this"}},
    "spec": {
        "containers": [
            {"name": "app", "readinessProbe": {"exec": {"command": ["true"]}, "$patch": "replace"}}
        ]
    },
}
NO_ANNOTATIONS = {"metadata": {"annotations": {ACTION: "this"}, "labels": {"new": "y"}}}


def without(pod: dict[str, Any], path: str) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    *parents, last = path.split(".")
    target = result
    for part in parents:
        target = target[part]
    del target[last]
    return result


@pytest.mark.parametrize("patch", [IMAGE, ENV, PROBE, NO_ANNOTATIONS])
@pytest.mark.parametrize("pod", [POD, without(POD, "metadata.annotations")])
def test_it_makes_what_the_strategic_merge_makes(pod: dict[str, Any], patch: dict[str, Any]) -> None:
    assert json_patch(pod, json_patch_from(pod, patch)) == strategic_merge_patch(pod, patch)


def test_each_changed_value_is_tested_as_it_was_and_the_container_by_its_name() -> None:
    operations = json_patch_from(POD, IMAGE)
    assert operations == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "test", "path": "/metadata/labels/revision", "value": "web-1"},
        {"op": "add", "path": "/metadata/labels/revision", "value": "web-2"},
        {"op": "test", "path": "/metadata/labels/old", "value": "x"},
        {"op": "remove", "path": "/metadata/labels/old"},
        {"op": "test", "path": "/metadata/annotations/rollbook.io~1action-id", "value": "earlier"},
        {"op": "add", "path": "/metadata/annotations/rollbook.io~1action-id", "value": "this"},
        {"op": "test", "path": "/spec/containers/1/name", "value": "app"},
        {"op": "test", "path": "/spec/containers/1/image", "value": "nginx:alpine"},
        {"op": "add", "path": "/spec/containers/1/image", "value": "nginx:mainline"},
    ]


def status_written(pod: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    result["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    result["metadata"]["resourceVersion"] = "99"
    return result


def relabelled(pod: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    result["metadata"]["labels"]["unrelated"] = "z"
    return result


@pytest.mark.parametrize("since", [status_written, relabelled], ids=["status write", "unrelated label"])
def test_a_change_to_nothing_it_writes_does_not_refuse_it(since: Any) -> None:
    operations = json_patch_from(POD, IMAGE)
    result = json_patch(since(POD), operations)
    assert result["spec"]["containers"][1]["image"] == "nginx:mainline"
    assert result["status"] == since(POD)["status"]


def applied(pod: dict[str, Any]) -> dict[str, Any]:
    return strategic_merge_patch(pod, IMAGE)


def replaced(pod: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(pod), "metadata": {**pod["metadata"], "uid": "u-2"}}


def another_image(pod: dict[str, Any]) -> dict[str, Any]:
    return strategic_merge_patch(pod, {"spec": {"containers": [{"name": "app", "image": "nginx:perl"}]}})


def reordered(pod: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    result["spec"]["containers"].reverse()
    return result


def other_action(pod: dict[str, Any]) -> dict[str, Any]:
    return strategic_merge_patch(pod, {"metadata": {"annotations": {ACTION: "later"}}})


@pytest.mark.parametrize(
    "since",
    [applied, replaced, another_image, reordered, other_action],
    ids=["applied already", "pod replaced", "image changed", "containers reordered", "a later action"],
)
def test_a_change_to_what_it_was_computed_from_refuses_it_whole(since: Any) -> None:
    with pytest.raises(ApiError) as refused:
        json_patch(since(POD), json_patch_from(POD, IMAGE))
    assert refused.value.code == 422


def test_annotations_added_since_a_pod_without_any_refuse_it() -> None:
    bare = without(POD, "metadata.annotations")
    operations = json_patch_from(bare, NO_ANNOTATIONS)
    with pytest.raises(ApiError):
        json_patch(strategic_merge_patch(bare, NO_ANNOTATIONS), operations)


READY = {"type": "InPlaceUpdateReady", "status": "True", "reason": "", "lastTransitionTime": "t"}
UPDATED: dict[str, Any] = {
    "metadata": {"uid": "u-1", "annotations": {ACTION: "update"}},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "InPlaceUpdateReady", "status": "False"},
        ]
    },
}


@pytest.mark.parametrize(
    ("uid", "written", "condition", "expected"),
    [
        ("u-1", UPDATED, READY, "written"),
        ("u-2", UPDATED, READY, None),  # another incarnation
        ("u-1", UPDATED, {**READY, "type": "KruisePodReady"}, None),  # a condition it lacks
        ("u-1", UPDATED, None, None),
        ("u-1", {**UPDATED, "metadata": {"uid": "u-1"}}, READY, None),  # no action id to test
    ],
)
def test_a_mark_from_the_pod_this_executor_wrote(
    uid: str, written: dict[str, Any], condition: dict[str, Any] | None, expected: str | None
) -> None:
    operations = mark_from_written(Written(written), uid, condition, "mark")
    if expected is None:
        assert operations is None
        return
    assert operations is not None
    # The kubelet's status write since (Ready True, another condition) does not refuse it ...
    since = copy.deepcopy(written)
    since["status"]["conditions"][0]["status"] = "True"
    since["status"]["conditions"].append({"type": "Other", "status": "True"})
    marked = json_patch(since, operations)
    assert marked["status"]["conditions"][1] == READY
    assert marked["metadata"]["annotations"][ACTION] == "mark"
    # ... and once marked (or after any other action) it is refused.
    with pytest.raises(ApiError):
        json_patch(marked, operations)


CREATED: dict[str, Any] = {
    "metadata": {"uid": "u-1", "annotations": {ACTION: "create"}},
    "status": {"phase": "Pending"},
}


def test_a_pod_this_executor_created_gets_the_condition_appended_once() -> None:
    operations = mark_from_written(Written(CREATED, created=True), "u-1", READY, "mark")
    assert operations is not None
    started = copy.deepcopy(CREATED)  # the kubelet's conditions since the create
    started["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    marked = json_patch(started, operations)
    assert marked["status"]["conditions"] == [{"type": "Ready", "status": "False"}, READY]
    with pytest.raises(ApiError):  # delivered again: applied already
        json_patch(marked, operations)
    with pytest.raises(ApiError):  # no conditions yet: refused, the mark goes the way without this
        json_patch(CREATED, operations)
    # Not created here (an update's answer) and the type absent: not this way.
    assert mark_from_written(Written(CREATED), "u-1", READY, "mark") is None


LIFECYCLE = "lifecycle.apps.kruise.io/state"
STAMP = "lifecycle.apps.kruise.io/timestamp"
UPDATING: dict[str, Any] = {
    "metadata": {
        "uid": "u-1",
        "labels": {"app": "web", LIFECYCLE: "Updating"},
        "annotations": {ACTION: "update", STAMP: "t1"},
    },
    "status": UPDATED["status"],
}
# The markReady that ends an in-place update: the condition and the lifecycle state it moves to.
MOVE = {"metadata": {"labels": {LIFECYCLE: "Normal"}, "annotations": {STAMP: "t2"}}}


def test_a_mark_with_a_lifecycle_move_goes_from_the_pod_this_executor_wrote() -> None:
    """The kubelet's status writes since the spec patch (containers restarted, Ready) do not refuse it;
    it lands once (a redelivery is refused), and a change since to a label it writes refuses it, as the
    planner's resourceVersion would."""
    operations = mark_from_written(Written(UPDATING), "u-1", READY, "mark", MOVE)
    assert operations is not None
    since = copy.deepcopy(UPDATING)
    since["status"]["conditions"][0]["status"] = "True"
    marked = json_patch(since, operations)
    assert marked["metadata"]["labels"] == {"app": "web", LIFECYCLE: "Normal"}
    assert marked["metadata"]["annotations"] == {ACTION: "mark", STAMP: "t2"}
    assert marked["status"]["conditions"][1] == READY
    with pytest.raises(ApiError):  # delivered again: applied already
        json_patch(marked, operations)
    relabelled = copy.deepcopy(since)
    relabelled["metadata"]["labels"][LIFECYCLE] = "PreparingDelete"
    with pytest.raises(ApiError):
        json_patch(relabelled, operations)


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"finalizers": ["x"]}},  # not a map of strings
        {"spec": {"activeDeadlineSeconds": 1}},
        {"metadata": {"annotations": {ACTION: "other"}}},
    ],
)
def test_a_mark_writing_more_than_labels_and_annotations_is_not_from_the_written_pod(
    patch: dict[str, Any],
) -> None:
    assert mark_from_written(Written(UPDATING), "u-1", READY, "mark", patch) is None
