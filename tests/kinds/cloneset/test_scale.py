"""Scale rules: replicas, instance ids, podsToDelete, scale-in order, PVC lifecycle."""

from __future__ import annotations

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from tests.planner.builders import IDS, cloneset, plan_input, pvcs_for, revision_record, running_pod
from tests.planner.simulate import Cluster

CLAIM = {
    "metadata": {"name": "cephfs-pvc-demo"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def kinds(result: model.Plan) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.pod) for a in result.actions]


def test_first_round_creates_every_pod_with_instance_id_name_labels_and_owner() -> None:
    result = plan(plan_input(cloneset(), []))
    creates = [a for a in result.actions if isinstance(a, model.CreatePod)]
    assert len(creates) == 5 and result.step == "scale"
    for action in creates:
        pod = action.object
        assert action.pod == f"sample-{action.instance_id}" == pod["metadata"]["name"]
        assert len(action.instance_id) == 5
        labels = pod["metadata"]["labels"]
        assert labels["apps.kruise.io/cloneset-instance-id"] == action.instance_id
        assert labels["controller-revision-hash"] == action.revision.rsplit("-", 1)[1]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "CloneSet"
        assert {"conditionType": "InPlaceUpdateReady"} in pod["spec"]["readinessGates"]
    assert len({a.instance_id for a in creates}) == 5
    assert result.revisions and result.revisions[0]["revision"] == 1


def test_instance_ids_are_deterministic() -> None:
    first = plan(plan_input(cloneset(), []))
    second = plan(plan_input(cloneset(), []))
    assert [a.pod for a in first.actions] == [a.pod for a in second.actions]


def test_volume_claim_templates_create_one_pvc_per_pod_in_the_pods_create() -> None:
    # OpenKruise creates an instance's claims, then its pod, in one reconcile: one action, claims first.
    cs = cloneset(name="sample-data", namespace="ops", claims=[CLAIM])
    result = plan(plan_input(cs, []))
    assert [type(a).__name__ for a in result.actions] == ["CreatePod"] * 5
    for pod_action in result.actions:
        assert isinstance(pod_action, model.CreatePod)
        instance = pod_action.instance_id
        [claim] = pod_action.pvcs
        assert claim["metadata"]["name"] == f"cephfs-pvc-demo-sample-data-{instance}"
        assert claim["metadata"]["labels"]["apps.kruise.io/cloneset-instance-id"] == instance
        assert claim["metadata"]["ownerReferences"][0]["name"] == "sample-data"
        assert claim["metadata"]["namespace"] == "ops"
        volumes = pod_action.object["spec"]["volumes"]
        assert volumes[0] == {
            "name": "cephfs-pvc-demo",
            "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
        }


def test_a_pods_create_names_only_its_claims_that_do_not_exist() -> None:
    # A pod replaced after someone else deleted it reuses its instance id: of its claims, only those gone
    # since (here a template added to the CloneSet meanwhile) are created again.
    logs = {**CLAIM, "metadata": {**CLAIM["metadata"], "name": "logs"}}
    cs = cloneset(claims=[CLAIM, logs])
    pods = [running_pod(cs, i) for i in IDS[:4]]  # IDS[4] was evicted; its first claim stays
    pvcs = [p for i in IDS[:4] for p in pvcs_for(cs, i)] + pvcs_for(cs, IDS[4])[:1]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)], pvcs))
    assert kinds(result) == [("CreatePod", f"sample-{IDS[4]}")]
    create = result.actions[0]
    assert isinstance(create, model.CreatePod) and create.instance_id == IDS[4]
    assert [c["metadata"]["name"] for c in create.pvcs] == [f"logs-sample-{IDS[4]}"]


def test_a_reused_instance_names_its_claim_being_deleted_for_creation() -> None:
    # The instance keeps one live claim (so its id is reused) while its other claim is being deleted: the
    # pod must not mount the dying claim, so the create names it (the executor creates it once it is gone).
    logs = {**CLAIM, "metadata": {**CLAIM["metadata"], "name": "logs"}}
    cs = cloneset(claims=[CLAIM, logs])
    pods = [running_pod(cs, i) for i in IDS[:4]]  # IDS[4] was evicted
    live, dying = pvcs_for(cs, IDS[4])
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pvcs = [p for i in IDS[:4] for p in pvcs_for(cs, i)] + [live, dying]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)], pvcs))
    assert kinds(result) == [("CreatePod", f"sample-{IDS[4]}")]
    create = result.actions[0]
    assert isinstance(create, model.CreatePod) and create.instance_id == IDS[4]
    assert [c["metadata"]["name"] for c in create.pvcs] == [f"logs-sample-{IDS[4]}"]


def test_scale_in_deletes_the_pod_with_its_pvcs() -> None:
    cs = cloneset(claims=[CLAIM], replicas=4)
    pods = [running_pod(cs, i) for i in IDS[:5]]
    pvcs = [p for i in IDS[:5] for p in pvcs_for(cs, i)]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)], pvcs))
    assert len(result.actions) == 1
    action = result.actions[0]
    assert isinstance(action, model.DeletePod) and action.with_pvcs
    assert action.pvcs == [f"cephfs-pvc-demo-sample-{action.pod.rsplit('-', 1)[1]}"]


def test_pod_deleted_by_someone_else_is_replaced_with_same_id_and_pvcs() -> None:
    cs = cloneset(claims=[CLAIM])
    pods = [running_pod(cs, i) for i in IDS[:4]]  # IDS[4] was evicted; its PVC stays
    pvcs = [p for i in IDS[:5] for p in pvcs_for(cs, i)]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)], pvcs))
    assert kinds(result) == [("CreatePod", f"sample-{IDS[4]}")]
    create = result.actions[0]
    assert isinstance(create, model.CreatePod) and create.instance_id == IDS[4]
    assert create.pvcs == []  # its claim exists


def test_scale_in_order_not_ready_unscheduled_pending_first() -> None:
    cs = cloneset(replicas=2)
    pods = [
        running_pod(cs, IDS[0]),
        running_pod(cs, IDS[1], ready=False),
        running_pod(cs, IDS[2], phase="Pending", ready=False),  # unscheduled
        running_pod(cs, IDS[3], node="node-x", phase="Pending", ready=False),  # scheduled, pending
        running_pod(cs, IDS[4]),
    ]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)]))
    assert [a.pod for a in result.actions] == [f"sample-{IDS[2]}", f"sample-{IDS[3]}", f"sample-{IDS[1]}"]


def test_scale_in_prefers_pods_sharing_a_node_and_low_deletion_cost() -> None:
    cs = cloneset(replicas=3)
    pods = [
        running_pod(cs, IDS[0], node="n1"),
        running_pod(cs, IDS[1], node="n1"),
        running_pod(cs, IDS[2], node="n2"),
        running_pod(cs, IDS[3], node="n3"),
    ]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)]))
    assert [a.pod for a in result.actions][0] in {f"sample-{IDS[0]}", f"sample-{IDS[1]}"}
    pods[2]["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "-10"}
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)]))
    assert [a.pod for a in result.actions] == [f"sample-{IDS[2]}"]


def test_pods_to_delete_with_replicas_lowered_deletes_exactly_the_named_pod() -> None:
    base = cloneset()
    cs = cloneset(replicas=4, scale={"podsToDelete": [f"sample-{IDS[1]}"]})
    cluster = Cluster(cs, [running_pod(base, i) for i in IDS[:5]], [revision_record(base, 1)])
    first = cluster.step()
    assert kinds(first) == [("DeletePod", f"sample-{IDS[1]}")]
    assert first.pods_to_delete is None  # the list is read before the deletion
    second = cluster.step()
    assert second.actions == [] and second.pods_to_delete == []
    assert len(cluster.pods) == 4


def test_pods_to_delete_without_replicas_change_deletes_then_recreates() -> None:
    base = cloneset()
    cs = cloneset(scale={"podsToDelete": [f"sample-{IDS[1]}"]})
    cluster = Cluster(cs, [running_pod(base, i) for i in IDS[:5]], [revision_record(base, 1)])
    assert kinds(cluster.step()) == [("DeletePod", f"sample-{IDS[1]}")]
    second = cluster.step()
    created = [a for a in second.actions if isinstance(a, model.CreatePod)]
    assert len(created) == 1 and created[0].pod != f"sample-{IDS[1]}"
    assert second.pods_to_delete == []
    cluster.run()
    assert len(cluster.pods) == 5 and f"sample-{IDS[1]}" not in cluster.pods


def test_ready_named_pods_are_rate_limited_by_max_unavailable() -> None:
    base = cloneset()
    cs = cloneset(
        scale={"podsToDelete": [f"sample-{IDS[0]}", f"sample-{IDS[1]}"]},
        replicas=5,
        strategy={"maxUnavailable": 1},
    )
    result = plan(plan_input(cs, [running_pod(base, i) for i in IDS[:5]], [revision_record(base, 1)]))
    assert len(result.actions) == 1


def test_pods_to_delete_with_max_surge_creates_the_replacement_first() -> None:
    base = cloneset()
    cs = cloneset(scale={"podsToDelete": [f"sample-{IDS[0]}"]}, strategy={"maxSurge": 1, "maxUnavailable": 0})
    result = plan(plan_input(cs, [running_pod(base, i) for i in IDS[:5]], [revision_record(base, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["CreatePod"]


def test_scale_strategy_max_unavailable_limits_creations() -> None:
    base = cloneset(replicas=3)
    cs = cloneset(replicas=6, scale={"maxUnavailable": 2})
    pods = [running_pod(base, IDS[0], ready=False), running_pod(base, IDS[1]), running_pod(base, IDS[2])]
    result = plan(plan_input(cs, pods, [revision_record(base, 1)]))
    assert len(result.actions) == 1


def test_disable_pvc_reuse_deletes_orphan_pvcs() -> None:
    cs = cloneset(claims=[CLAIM], scale={"disablePVCReuse": True})
    pods = [running_pod(cs, i) for i in IDS[:5]]
    pvcs = [p for i in IDS[:6] for p in pvcs_for(cs, i)]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)], pvcs))
    assert [(type(a).__name__, getattr(a, "pvc", "")) for a in result.actions] == [
        ("DeletePVC", f"cephfs-pvc-demo-sample-{IDS[5]}")
    ]


def test_scale_in_with_long_min_ready_seconds_deletes_nothing() -> None:
    # OpenKruise TestScale "minReadySeconds=9999": every pod is ready but none available yet, so the
    # ready-delete budget max(1 + (5 - 3) - 5, 0) is 0.
    cs = cloneset(replicas=3, minReadySeconds=9999, strategy={"maxUnavailable": 1})
    pods = [running_pod(cs, i, ready_since="2026-11-30T11:59:00Z") for i in IDS[:5]]
    result = plan(plan_input(cs, pods, [revision_record(cs, 1)]))
    assert result.actions == []
    assert result.requeue_after_seconds is not None and result.requeue_after_seconds > 9000


def test_scale_in_takes_old_revision_pods_first() -> None:
    v1 = cloneset()
    v2 = cloneset(replicas=3, image="nginx:2", strategy={"partition": 5})
    pods = [running_pod(v1, i) for i in IDS[:2]] + [running_pod(v2, i, ready=False) for i in IDS[2:5]]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1), revision_record(v2, 2)]))
    # partition 5 clamps to 3 kept old pods, but only 2 exist: new pods are the surplus here.
    assert len(result.actions) == 2
    # Without a partition the old pods go first, even though they are ready and the new ones are not --
    # but deleting ready pods must wait while 3 pods are unavailable (budget 1 + 2 - 3 = 0).
    v2["spec"]["updateStrategy"]["partition"] = 0
    result = plan(plan_input(v2, pods, [revision_record(v1, 1), revision_record(v2, 2)]))
    assert result.actions == []
    pods = [running_pod(v1, i) for i in IDS[:2]] + [running_pod(v2, i) for i in IDS[2:5]]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1), revision_record(v2, 2)]))
    assert sorted(a.pod for a in result.actions) == sorted(f"sample-{i}" for i in IDS[:2])
