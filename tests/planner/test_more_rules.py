"""Further rules: priority order, minReadySeconds, superseded grace periods, recreate and PVCs, progress."""

from __future__ import annotations

import copy

from services.kinds.cloneset.rules import model, revisions
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.progress import rollout_progress
from services.kinds.cloneset.rules.spec import resolve
from tests.kinds.cloneset.test_scale import CLAIM
from tests.planner.builders import (
    IDS,
    cloneset,
    plan_input,
    pvcs_for,
    revision_record,
    running_pod,
    with_image,
)
from tests.planner.simulate import Cluster


def _names(result: model.Plan) -> list[str]:
    return [a.pod for a in result.actions]


def test_weight_priority_updates_heavier_pods_first() -> None:
    strategy = {
        "maxUnavailable": 1,
        "priorityStrategy": {
            "weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"tier": "canary"}}}]
        },
    }
    v1 = cloneset(strategy=strategy)
    pods = [running_pod(v1, i) for i in IDS[:5]]
    pods[3]["metadata"]["labels"]["tier"] = "canary"
    result = plan(plan_input(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)]))
    assert _names(result) == [f"sample-{IDS[3]}"]


def test_order_priority_larger_trailing_number_first() -> None:
    strategy = {"maxUnavailable": 1, "priorityStrategy": {"orderPriority": [{"orderedKey": "order"}]}}
    v1 = cloneset(strategy=strategy, replicas=3)
    pods = [running_pod(v1, i) for i in IDS[:3]]
    for pod, value in zip(pods, ["o-10", "o-20", "o-3"], strict=True):
        pod["metadata"]["labels"]["order"] = value
    result = plan(plan_input(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)]))
    assert _names(result) == [f"sample-{IDS[1]}"]


def test_update_order_not_ready_first_then_newest() -> None:
    v1 = cloneset(strategy={"maxUnavailable": 2})
    pods = [running_pod(v1, i, created=f"2026-11-30T10:0{n}:00Z") for n, i in enumerate(IDS[:5])]
    pods[0]["status"]["conditions"][0]["status"] = "False"
    result = plan(plan_input(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)]))
    # The not-ready pod goes first (it costs no availability), then the newest available pod.
    assert _names(result) == [f"sample-{IDS[0]}", f"sample-{IDS[4]}"]
    # With a budget of 1, the not-ready pod fills it: once updated it is an unavailable pod at the target.
    v1["spec"]["updateStrategy"]["maxUnavailable"] = 1
    result = plan(plan_input(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)]))
    assert _names(result) == [f"sample-{IDS[0]}"]


def test_min_ready_seconds_delays_availability_and_asks_to_be_requeued() -> None:
    v1 = cloneset(minReadySeconds=30, strategy={"maxUnavailable": 1})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    pods[0]["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-30T11:59:50Z"  # ready 10 s ago
    result = plan(plan_input(v1, pods, [revision_record(v1, 1)]))
    assert result.status is not None
    assert result.status["availableReplicas"] == 4 and result.status["readyReplicas"] == 5
    assert result.requeue_after_seconds == 21
    # While one pod is unavailable, a maxUnavailable 1 update waits.
    updated = plan(plan_input(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)]))
    assert _names(updated) == [f"sample-{IDS[0]}"]  # only the unavailable one, for free


def test_template_change_during_grace_period_finishes_the_pending_update_first() -> None:
    # OpenKruise (finishGracePeriod): the grace record is dropped only when the pod's revision label no
    # longer matches it; a newer template leaves it alone, the pod finishes the update it started and is
    # then updated again to the newer revision.
    strategy = {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 30}}
    v1 = cloneset(strategy=strategy)
    cluster = Cluster(v1)
    cluster.run()
    cluster.cloneset = with_image(cluster.cloneset, "nginx:2")
    first = cluster.step()
    assert [type(a).__name__ for a in first.actions] == ["MarkNotReady"]
    marked = first.actions[0].pod
    cluster.cloneset = with_image(cluster.cloneset, "nginx:3")
    second = cluster.step()
    assert all(a.pod != marked for a in second.actions)
    assert "apps.kruise.io/inplace-update-grace" in cluster.pods[marked]["metadata"]["annotations"]
    images_of_marked = []
    for _ in range(200):
        result = cluster.step()
        images_of_marked.append(cluster.pods[marked]["spec"]["containers"][0]["image"])
        if not result.actions and result.requeue_after_seconds is None and cluster.settled():
            break
    assert "nginx:2" in images_of_marked  # the started update was carried out
    images = {p["spec"]["containers"][0]["image"] for p in cluster.pods.values()}
    assert images == {"nginx:3"}


def test_grace_record_dropped_when_the_pod_revision_no_longer_matches_it() -> None:
    strategy = {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 30}}
    v1 = cloneset(strategy=strategy, replicas=1)
    cluster = Cluster(v1)
    cluster.run()
    cluster.cloneset = with_image(cluster.cloneset, "nginx:2")
    first = cluster.step()
    marked = first.actions[0].pod
    # Someone else moved the pod's revision label away from the grace record.
    cluster.pods[marked]["metadata"]["labels"]["controller-revision-hash"] = "someother"
    second = cluster.step()
    assert [(type(a).__name__, a.pod) for a in second.actions] == [("PatchPod", marked)]
    assert "apps.kruise.io/inplace-update-grace" not in cluster.pods[marked]["metadata"]["annotations"]


def test_recreate_update_replaces_pod_and_its_pvcs_with_a_new_id() -> None:
    v1 = cloneset(claims=[CLAIM], strategy={"maxUnavailable": 1})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    pvcs = [p for i in IDS[:5] for p in pvcs_for(v1, i)]
    cluster = Cluster(with_image(v1, "nginx:2"), pods, [revision_record(v1, 1)], pvcs)
    cluster.run()
    deletes = [a for h in cluster.history for a in h.actions if isinstance(a, model.DeletePod)]
    assert len(deletes) == 5 and all(d.with_pvcs and len(d.pvcs) == 1 for d in deletes)
    assert not set(cluster.pods) & {p["metadata"]["name"] for p in pods}  # every pod has a new name
    assert sorted(cluster.pvcs) == sorted(f"cephfs-pvc-demo-{name}" for name in cluster.pods)


def test_revision_name_collision_bumps_collision_count() -> None:
    v1 = cloneset()
    v2 = with_image(v1, "nginx:2")
    clash = revision_record(v1, 1)
    clash["metadata"]["name"] = revisions.revision_name(
        "sample", revisions.template_hash(v2["spec"]["template"])
    )
    result = plan(plan_input(v2, [], [clash]))
    assert result.status is not None and result.status["collisionCount"] == 1
    assert result.update_revision != clash["metadata"]["name"]
    assert result.update_revision == revisions.revision_name(
        "sample", revisions.template_hash(v2["spec"]["template"], 1)
    )
    assert resolve(v2).name == "sample"


def test_rollout_progress_reports_started_partition_and_completion() -> None:
    v1 = cloneset(strategy={"partition": 3})
    cluster = Cluster(v1)
    cluster.run()
    assert rollout_progress(cluster.cloneset, cluster.cloneset["status"]).complete
    cluster.cloneset = with_image(cluster.cloneset, "nginx:2")
    first = cluster.step()
    progress = rollout_progress(cluster.cloneset, first.status)
    assert progress.in_progress and not progress.complete
    cluster.run()
    progress = rollout_progress(cluster.cloneset, cluster.cloneset["status"])
    assert progress.partition_reached and not progress.complete and not progress.in_progress
    spec = copy.deepcopy(cluster.cloneset)
    spec["spec"]["updateStrategy"]["partition"] = 0
    cluster.cloneset = spec
    cluster.run()
    assert rollout_progress(cluster.cloneset, cluster.cloneset["status"]).complete


def test_cloneset_being_deleted_gets_no_actions() -> None:
    cs = cloneset()
    cs["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    result = plan(plan_input(cs, []))
    assert result.actions == [] and result.step == "none" and result.status is not None


def test_current_revision_moves_when_every_pod_is_updated() -> None:
    v1 = cloneset()
    v2 = with_image(v1, "nginx:2")
    v2["status"] = {"currentRevision": revision_record(v1, 1)["metadata"]["name"]}
    pods = [running_pod(v2, i) for i in IDS[:5]]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1), revision_record(v2, 2)]))
    assert result.current_revision == result.update_revision == revision_record(v2, 2)["metadata"]["name"]
    assert result.status is not None and result.status["currentRevision"] == result.current_revision


def test_resources_change_recreates_even_in_extended_mode_and_volumes_rebuild_there() -> None:
    extended = {"rollbook.io/inplace-mode": "extended"}
    v1 = cloneset(strategy={"type": "InPlaceIfPossible"}, annotations=extended)
    v1["spec"]["template"]["spec"]["volumes"] = [{"name": "conf", "configMap": {"name": "a"}}]
    container = v1["spec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "conf", "mountPath": "/etc/c"}]
    pods = [running_pod(v1, i) for i in IDS[:5]]
    resources = copy.deepcopy(v1)
    resources["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    result = plan(plan_input(resources, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]
    volumes = copy.deepcopy(v1)
    volumes["spec"]["template"]["spec"]["volumes"] = [{"name": "conf", "configMap": {"name": "b"}}]
    result = plan(plan_input(volumes, pods, [revision_record(v1, 1)]))
    update = result.actions[-1]
    assert isinstance(update, model.UpdateInPlace) and update.change == "Rebuild"
    assert update.patch["spec"]["volumes"] == [{"name": "conf", "configMap": {"name": "b"}}]
    assert update.restart_containers == ["nginx"]
    # Without the switch the same volume change recreates the pod.
    del volumes["metadata"]["annotations"]
    result = plan(plan_input(volumes, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]
