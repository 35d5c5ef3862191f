"""In-place update marks exactly as OpenKruise writes them, in both directions.

Pods are given in each state OpenKruise leaves them in (pkg/util/inplaceupdate/inplace_update.go
``updatePodInPlace``, ``finishGracePeriod``, ``Refresh``; pkg/controller/cloneset/sync/cloneset_update.go
``refreshPodState``): rollbook continues them; and what rollbook writes is what OpenKruise would write.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.lifecycle import (
    Hook,
    Lifecycle,
    refreshed_state,
)
from services.kinds.cloneset.rules.plan import plan
from tests.planner.builders import (
    IDS,
    cloneset,
    plan_input,
    revision_name,
    revision_record,
    running_pod,
    with_image,
)
from tests.planner.simulate import Cluster

STATE = "apps.kruise.io/inplace-update-state"
GRACE = "apps.kruise.io/inplace-update-grace"
LIFECYCLE = "lifecycle.apps.kruise.io/state"
GRACE_STRATEGY = {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 3630}}


def _apply(pod: dict[str, Any], action: Any) -> dict[str, Any]:
    """The pod after the executor carried out ``action`` (metadata, containers, the condition)."""
    pod = copy.deepcopy(pod)
    patch = getattr(action, "patch", None) or {}
    metadata = patch.get("metadata") or {}
    for key in ("labels", "annotations"):
        target = pod["metadata"].setdefault(key, {})
        for name, value in (metadata.get(key) or {}).items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = value
    for entry in (patch.get("spec") or {}).get("containers") or []:
        for container in pod["spec"]["containers"]:
            if container["name"] == entry["name"]:
                container.update({k: v for k, v in entry.items() if k != "name"})
    condition = getattr(action, "condition", None)
    if condition:
        others = [c for c in pod["status"]["conditions"] if c["type"] != condition["type"]]
        pod["status"]["conditions"] = [*others, condition]
    return pod


def _openkruise_mid_grace(v1: dict[str, Any], v2: dict[str, Any], started: str) -> dict[str, Any]:
    """A pod as OpenKruise leaves it in the round that starts a graced update: long-form revision label
    at the update revision, lifecycle Updating, images still old, the grace record pending."""
    pod = running_pod(v1, IDS[0])
    update = revision_name(v2)
    labels = pod["metadata"]["labels"]
    labels["controller-revision-hash"] = update  # OpenKruise's long form <name>-<hash>
    labels["pod-template-hash"] = update.rsplit("-", 1)[1]
    labels[LIFECYCLE] = "Updating"
    pod["metadata"]["annotations"] = {
        "lifecycle.apps.kruise.io/timestamp": "2026-11-30T19:00:00+08:00",
        STATE: json.dumps(
            {
                "revision": update,
                "updateTimestamp": started,
                "lastContainerStatuses": None,
                "updateImages": True,
            },
            separators=(",", ":"),
        ),
        GRACE: json.dumps(
            {"revision": update, "containerImages": {"nginx": "nginx:mainline"}, "graceSeconds": 3630},
            separators=(",", ":"),
        ),
    }
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "InPlaceUpdateReady":
            condition.update(status="False", reason="StartInPlaceUpdate")
        if condition["type"] == "Ready":
            condition["status"] = "False"
    return pod


def test_rollbook_starts_a_graced_update_as_openkruise_writes_it() -> None:
    v1 = cloneset(strategy=GRACE_STRATEGY, replicas=1)
    v2 = with_image(v1, "nginx:mainline")
    pods = [running_pod(v1, IDS[0])]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["MarkNotReady"]
    mark = result.actions[0]
    assert isinstance(mark, model.MarkNotReady) and mark.patch is not None
    update = revision_name(v2)
    # One write: revision labels at the update revision, lifecycle Updating, state and grace record.
    assert mark.patch["metadata"]["labels"] == {
        "controller-revision-hash": update.rsplit("-", 1)[1],
        "pod-template-hash": update.rsplit("-", 1)[1],
        LIFECYCLE: "Updating",
    }
    annotations = mark.patch["metadata"]["annotations"]
    assert annotations[GRACE] == (
        f'{{"revision":"{update}","containerImages":{{"nginx":"nginx:mainline"}},"graceSeconds":3630}}'
    )
    assert annotations[STATE] == (
        f'{{"revision":"{update}","updateTimestamp":"2026-11-30T12:00:00Z",'
        '"lastContainerStatuses":null,"updateImages":true}'
    )
    assert annotations["lifecycle.apps.kruise.io/timestamp"] == "2026-11-30T12:00:00Z"
    assert "spec" not in mark.patch  # images untouched during the grace period
    assert mark.condition["type"] == "InPlaceUpdateReady" and mark.condition["status"] == "False"
    assert result.requeue_after_seconds == 3630
    # Reported: not updated, although its label already names the update revision.
    marked = _apply(pods[0], mark)
    status = plan(plan_input(v2, [marked], [revision_record(v1, 1)] + result.revisions)).status
    assert status is not None and status["updatedReplicas"] == 0 and status["updatedReadyReplicas"] == 0


def test_rollbook_update_without_grace_writes_openkruise_state() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible"}, replicas=1)
    v2 = with_image(v1, "nginx:mainline")
    pod = running_pod(v1, IDS[0])
    result = plan(plan_input(v2, [pod], [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace"]
    update_action = result.actions[0]
    assert isinstance(update_action, model.UpdateInPlace)
    annotations = update_action.patch["metadata"]["annotations"]
    update = revision_name(v2)
    assert annotations[STATE] == (
        f'{{"revision":"{update}","updateTimestamp":"2026-11-30T12:00:00Z",'
        '"lastContainerStatuses":{"nginx":{"imageID":"sha256:nginx:alpine"}},"updateImages":true,'
        '"containerBatchesRecord":[{"timestamp":"2026-11-30T12:00:00Z","containers":["nginx"]}]}'
    )
    assert annotations[GRACE] is None and annotations["inplace-update-grace"] is None
    assert annotations["inplace-update-state"] is None  # the legacy key is removed, as OpenKruise does
    assert update_action.patch["metadata"]["labels"][LIFECYCLE] == "Updating"
    assert update_action.patch["spec"]["containers"] == [{"name": "nginx", "image": "nginx:mainline"}]


@pytest.mark.parametrize(
    ("now", "expect_actions", "requeue"),
    [
        ("2026-11-30T12:00:00Z", [], 3630 - 3600),  # 3600 s into the 3630 s grace period
        ("2026-11-30T12:00:30Z", ["UpdateInPlace"], None),  # over
    ],
)
def test_openkruise_mid_grace_pod_is_continued_never_reported_updated(
    now: str, expect_actions: list[str], requeue: int | None
) -> None:
    v1 = cloneset(strategy=GRACE_STRATEGY, replicas=1)
    v2 = with_image(v1, "nginx:mainline")
    v2["status"] = {"currentRevision": revision_name(v1)}  # as OpenKruise left it
    pod = _openkruise_mid_grace(v1, v2, started="2026-11-30T11:00:00Z")
    revs = [revision_record(v1, 1), revision_record(v2, 2)]
    result = plan(plan_input(v2, [pod], revs, now=now))
    assert [type(a).__name__ for a in result.actions] == expect_actions
    assert result.requeue_after_seconds == requeue
    status = result.status
    assert status is not None
    # Its containers still run nginx:alpine: not updated, not ready, the rollout not complete.
    assert status["updatedReplicas"] == 0 and status["updatedReadyReplicas"] == 0
    assert status["currentRevision"] != status["updateRevision"]
    if not expect_actions:
        return
    action = result.actions[0]
    assert isinstance(action, model.UpdateInPlace)
    assert action.patch["spec"]["containers"] == [{"name": "nginx", "image": "nginx:mainline"}]
    annotations = action.patch["metadata"]["annotations"]
    assert annotations[GRACE] is None
    state = json.loads(annotations[STATE])
    assert state["updateTimestamp"] == "2026-11-30T11:00:00Z"  # kept from OpenKruise's first write
    assert state["lastContainerStatuses"] == {"nginx": {"imageID": "sha256:nginx:alpine"}}
    assert state["containerBatchesRecord"] == [{"timestamp": "2026-11-30T12:00:30Z", "containers": ["nginx"]}]
    # Images patched, kubelet not done yet: still not updated; once the image id changes, ready + Normal.
    patched = _apply(pod, action)
    waiting = plan(plan_input(v2, [patched], revs, now="2026-11-30T12:00:40Z"))
    assert waiting.actions == [] and waiting.status is not None and waiting.status["updatedReplicas"] == 0
    restarted = copy.deepcopy(patched)
    restarted["status"]["containerStatuses"][0].update(
        image="nginx:mainline", imageID="sha256:nginx:mainline"
    )
    done = plan(plan_input(v2, [restarted], revs, now="2026-11-30T12:00:50Z"))
    assert [type(a).__name__ for a in done.actions] == ["MarkReady"]
    ready = done.actions[0]
    assert isinstance(ready, model.MarkReady) and ready.condition["status"] == "True"
    assert ready.patch is not None and ready.patch["metadata"]["labels"] == {LIFECYCLE: "Normal"}
    assert done.status is not None and done.status["updatedReplicas"] == 1


def test_openkruise_grace_record_with_metadata_patch_is_applied_after_the_grace_period() -> None:
    v1 = cloneset(strategy=GRACE_STRATEGY, replicas=1)
    v2 = with_image(v1, "nginx:mainline")
    v2["spec"]["template"]["metadata"]["labels"]["tier"] = "web"
    pod = _openkruise_mid_grace(v1, v2, started="2026-11-30T11:00:00Z")
    grace = json.loads(pod["metadata"]["annotations"][GRACE])
    grace["metaDataPatch"] = base64.b64encode(b'{"metadata":{"labels":{"tier":"web"}}}').decode()
    pod["metadata"]["annotations"][GRACE] = json.dumps(grace)
    revs = [revision_record(v1, 1), revision_record(v2, 2)]
    result = plan(plan_input(v2, [pod], revs, now="2026-11-30T13:00:00Z"))
    action = result.actions[0]
    assert isinstance(action, model.UpdateInPlace)
    assert action.patch["metadata"]["labels"] == {"tier": "web"}


def test_rollbook_grace_record_carries_the_metadata_patch_base64_as_openkruise() -> None:
    v1 = cloneset(strategy=GRACE_STRATEGY, replicas=1)
    v2 = with_image(v1, "nginx:mainline")
    v2["spec"]["template"]["metadata"]["labels"]["tier"] = "web"
    result = plan(plan_input(v2, [running_pod(v1, IDS[0])], [revision_record(v1, 1)]))
    mark = result.actions[0]
    assert isinstance(mark, model.MarkNotReady) and mark.patch is not None
    grace = json.loads(mark.patch["metadata"]["annotations"][GRACE])
    assert list(grace) == ["revision", "containerImages", "metaDataPatch", "graceSeconds"]
    assert json.loads(base64.b64decode(grace["metaDataPatch"])) == {"metadata": {"labels": {"tier": "web"}}}
    assert "tier" not in mark.patch["metadata"]["labels"]  # applied with the images, after the grace period


def test_new_pods_start_preparing_normal_and_become_normal_once_scheduled() -> None:
    cs = cloneset(replicas=1)
    created = plan(plan_input(cs, []))
    create = [a for a in created.actions if isinstance(a, model.CreatePod)][0]
    labels = create.object["metadata"]["labels"]
    assert labels[LIFECYCLE] == "PreparingNormal"
    assert (
        create.object["metadata"]["annotations"]["lifecycle.apps.kruise.io/timestamp"]
        == "2026-11-30T12:00:00Z"
    )
    cluster = Cluster(cs)
    cluster.run()
    assert [p["metadata"]["labels"][LIFECYCLE] for p in cluster.pods.values()] == ["Normal"]
    assert cluster.cloneset["status"]["availableReplicas"] == 1


def test_preparing_normal_pod_is_not_available() -> None:
    cs = cloneset(replicas=1)
    pod = running_pod(cs, IDS[0])
    pod["metadata"]["labels"][LIFECYCLE] = "PreparingNormal"
    result = plan(plan_input(cs, [pod]))
    assert result.status is not None and result.status["availableReplicas"] == 0
    assert result.status["readyReplicas"] == 1  # readyReplicas ignores the lifecycle label
    assert [type(a).__name__ for a in result.actions] == ["PatchPod"]
    move = result.actions[0]
    assert isinstance(move, model.PatchPod) and move.patch["metadata"]["labels"] == {LIFECYCLE: "Normal"}


def test_in_place_rollout_moves_lifecycle_through_updating_back_to_normal() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible", "maxUnavailable": 1}, replicas=2)
    cluster = Cluster(v1)
    cluster.run()
    cluster.cloneset = with_image(cluster.cloneset, "nginx:mainline")
    seen = {name: [pod["metadata"]["labels"][LIFECYCLE]] for name, pod in cluster.pods.items()}
    for _ in range(60):
        result = cluster.step()
        for name, pod in cluster.pods.items():
            state = pod["metadata"]["labels"][LIFECYCLE]
            if seen[name][-1] != state:
                seen[name].append(state)
        if not result.actions and result.requeue_after_seconds is None and cluster.settled():
            break
    assert all(states == ["Normal", "Updating", "Normal"] for states in seen.values()), seen


H = Hook(labels=(("example.io/hook", "true"),), finalizers=(), mark_not_ready=False)
HOOKED = {"example.io/hook": "true"}


@pytest.mark.parametrize(
    ("state", "lifecycle", "scheduled", "at_update", "complete", "labels", "expected"),
    [
        ("PreparingNormal", None, False, True, True, {}, None),
        ("PreparingNormal", None, True, True, True, {}, "Normal"),
        ("PreparingNormal", Lifecycle(None, None, H), True, True, True, {}, None),
        ("PreparingNormal", Lifecycle(None, None, H), False, True, True, HOOKED, "Normal"),
        ("Updating", None, True, True, False, {}, None),
        ("Updating", None, True, True, True, {}, "Normal"),
        ("Updating", Lifecycle(None, H, None), True, True, True, {}, "Updated"),
        ("Updating", Lifecycle(None, H, None), True, True, True, HOOKED, "Normal"),
        ("Updating", Lifecycle(None, None, None), True, True, True, {}, "Updated"),  # nil hook: once
        ("Updated", Lifecycle(None, None, None), True, True, True, {}, "Normal"),
        ("Updated", Lifecycle(None, H, None), True, True, True, {}, None),
        ("Updated", Lifecycle(None, H, None), True, True, True, HOOKED, "Normal"),
        ("PreparingUpdate", Lifecycle(None, H, None), True, False, True, HOOKED, None),
        ("PreparingUpdate", Lifecycle(None, H, None), True, True, True, HOOKED, "Normal"),  # rolled back
        ("PreparingUpdate", Lifecycle(None, H, None), True, True, True, {}, "Updated"),
        ("Normal", None, True, True, True, {}, None),
        ("", None, True, True, True, {}, None),
        ("PreparingDelete", None, True, True, True, {}, None),
    ],
)
def test_refresh_lifecycle_transitions(
    state: str,
    lifecycle: Lifecycle | None,
    scheduled: bool,
    at_update: bool,
    complete: bool,
    labels: dict[str, str],
    expected: str | None,
) -> None:
    got = refreshed_state(
        state,
        lifecycle,
        scheduled=scheduled,
        at_update_revision=at_update,
        update_complete=complete,
        labels=labels,
        finalizers=(),
    )
    assert got == expected
