"""The workload controllers' decisions, table-tested with the cases of upstream's tests
(pkg/controller/deployment/util/deployment_util_test.go, rolling_test.go; the statefulset, job and
disruption controllers' rules), as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.simcluster.controllers import deployment as dep
from services.simcluster.controllers.base import scaled_value
from services.simcluster.controllers.disruption import budget, evict, pdb_status
from services.simcluster.controllers.job import decide
from services.simcluster.controllers.replicaset import pods_to_delete
from services.simcluster.controllers.statefulset import REVISION_LABEL, plan
from services.simcluster.errors import ApiError

Obj = dict[str, Any]
NOW = datetime(2016, 1, 1, 0, 1, 20, tzinfo=UTC)


def deployment(
    replicas: int = 1,
    max_surge: int | str | None = None,
    max_unavailable: int | str | None = None,
    strategy: str = "RollingUpdate",
    **status: Any,
) -> Obj:
    rolling = {}
    if max_surge is not None:
        rolling["maxSurge"] = max_surge
    if max_unavailable is not None:
        rolling["maxUnavailable"] = max_unavailable
    spec: Obj = {"replicas": replicas, "strategy": {"type": strategy}}
    if strategy == "RollingUpdate":
        spec["strategy"]["rollingUpdate"] = rolling
    return {"metadata": {"name": "foo", "generation": 1}, "spec": spec, "status": status}


def rs(
    name: str, replicas: int, available: int = 0, created: str = "2016-05-20T01:00:00Z", **extra: Any
) -> Obj:
    return {
        "metadata": {"name": name, "creationTimestamp": created, **extra},
        "spec": {"replicas": replicas},
        "status": {"availableReplicas": available},
    }


# ---- ResolveFenceposts, MaxUnavailable, MinAvailable -----------------------------------------------


@pytest.mark.parametrize(
    ("surge", "unavailable", "desired", "expected"),
    [
        ("0%", "0%", 0, (0, 1)),
        ("39%", "39%", 10, (4, 3)),
        (None, "39%", 10, (0, 3)),
        ("39%", None, 10, (4, 0)),
        (None, None, 10, (0, 1)),
    ],
)
def test_resolve_fenceposts(
    surge: str | None, unavailable: str | None, desired: int, expected: tuple[int, int]
) -> None:
    assert dep.resolve_fenceposts(surge, unavailable, desired) == expected


@pytest.mark.parametrize(("surge", "unavailable"), [("oops", "39%"), ("55%", "urg")])
def test_resolve_fenceposts_refuses_malformed_values(surge: str, unavailable: str) -> None:
    with pytest.raises(ValueError, match="invalid value for IntOrString"):
        dep.resolve_fenceposts(surge, unavailable, 10)


@pytest.mark.parametrize(
    ("name", "d", "expected"),
    [
        ("maxUnavailable less than replicas", deployment(10, 1, 5), 5),
        ("maxUnavailable equal replicas", deployment(10, 1, 10), 10),
        ("maxUnavailable greater than replicas", deployment(5, 1, 10), 5),
        ("maxUnavailable with replicas is 0", deployment(0, 1, 10), 0),
        ("maxUnavailable with Recreate deployment strategy", deployment(10, strategy="Recreate"), 0),
        ("maxUnavailable less than replicas with percents", deployment(10, 1, "50%"), 5),
        ("maxUnavailable equal replicas with percents", deployment(10, 1, "100%"), 10),
        ("maxUnavailable greater than replicas with percents", deployment(5, 1, "100%"), 5),
    ],
)
def test_max_unavailable(name: str, d: Obj, expected: int) -> None:
    assert dep.max_unavailable(d) == expected, name


@pytest.mark.parametrize(
    ("name", "d", "expected"),
    [
        ("replicas greater than maxUnavailable", deployment(10, 1, 5), 5),
        ("replicas equal maxUnavailable", deployment(10, 1, 10), 0),
        ("replicas less than maxUnavailable", deployment(5, 1, 10), 0),
        ("replicas is 0", deployment(0, 1, 10), 0),
        ("minAvailable with Recreate deployment strategy", deployment(10, strategy="Recreate"), 0),
        ("replicas greater than maxUnavailable with percents", deployment(10, 1, "60%"), 4),
        ("replicas equal maxUnavailable with percents", deployment(10, 1, "100%"), 0),
        ("replicas less than maxUnavailable with percents", deployment(5, 1, "100%"), 0),
    ],
)
def test_min_available(name: str, d: Obj, expected: int) -> None:
    assert dep.min_available(d) == expected, name


# ---- NewRSNewReplicas and reconcileNewReplicaSet ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "strategy", "dep_replicas", "new_rs_replicas", "max_surge", "expected"),
    [
        ("can not scale up - to newRSReplicas", "RollingUpdate", 1, 5, 1, 5),
        ("scale up - to depReplicas", "RollingUpdate", 6, 2, 10, 6),
        ("recreate - to depReplicas", "Recreate", 3, 1, 1, 3),
    ],
)
def test_new_rs_new_replicas(
    name: str, strategy: str, dep_replicas: int, new_rs_replicas: int, max_surge: int, expected: int
) -> None:
    d = deployment(dep_replicas, max_surge, 1, strategy=strategy)
    if strategy == "Recreate":
        d["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": max_surge, "maxUnavailable": 1}
    other = rs("rs5", 5)
    assert dep.new_rs_new_replicas(d, [other], rs("new", new_rs_replicas)) == expected, name


@pytest.mark.parametrize(
    ("dep_replicas", "max_surge", "old", "new", "expected"),
    [
        (10, 0, 10, 0, None),  # should not scale up
        (10, 2, 10, 0, 2),
        (10, 2, 5, 0, 7),
        (10, 2, 10, 2, None),
    ],
)
def test_reconcile_new_replica_set(
    dep_replicas: int, max_surge: int, old: int, new: int, expected: int | None
) -> None:
    d = deployment(dep_replicas, max_surge, 0)
    new_rs, old_rs = rs("foo-v2", new), rs("foo-v1", old)
    target = dep.new_rs_new_replicas(d, [new_rs, old_rs], new_rs)
    assert (None if target == new else target) == expected


# ---- reconcileOldReplicaSets, cleanupUnhealthyReplicas, scaleDownOldReplicaSetsForRollingUpdate -----


@pytest.mark.parametrize(
    ("dep_replicas", "max_unavailable", "old", "new", "ready_old", "ready_new", "expected_old"),
    [
        (10, 0, 10, 0, 10, 0, 9),
        (10, 2, 10, 0, 10, 0, 8),
        (10, 2, 10, 0, 8, 0, 8),  # unhealthy old replicas are cleaned up
        (10, 2, 10, 0, 9, 0, 8),  # one unhealthy cleaned up and one ready scaled down
        (10, 2, 8, 2, 8, 0, None),  # the new RS's unavailable pods do not make room
    ],
)
def test_reconcile_old_replica_sets(
    dep_replicas: int,
    max_unavailable: int,
    old: int,
    new: int,
    ready_old: int,
    ready_new: int,
    expected_old: int | None,
) -> None:
    d = deployment(dep_replicas, 0, max_unavailable)
    new_rs, old_rs = rs("foo-new", new, ready_new), rs("foo-old", old, ready_old)
    changes = dep.reconcile_old_replica_sets(d, [old_rs, new_rs], [old_rs], new_rs)
    assert changes.get("foo-old") == expected_old


@pytest.mark.parametrize(
    ("old", "ready", "max_cleanup", "cleaned"),
    [(10, 8, 1, 1), (10, 8, 3, 2), (10, 8, 0, 0), (10, 10, 3, 0)],
)
def test_cleanup_unhealthy_replicas(old: int, ready: int, max_cleanup: int, cleaned: int) -> None:
    changes = dep.cleanup_unhealthy([rs("foo-v2", old, ready)], max_cleanup)
    assert old - changes.get("foo-v2", old) == cleaned


@pytest.mark.parametrize(
    ("dep_replicas", "max_unavailable", "ready", "old", "expected_old"),
    [
        (10, 0, 10, 10, 9),
        (10, 2, 10, 10, 8),
        (10, 2, 8, 10, None),
        (10, 2, 10, 0, None),
        (10, 2, 1, 10, None),
    ],
)
def test_scale_down_old_replica_sets_for_rolling_update(
    dep_replicas: int, max_unavailable: int, ready: int, old: int, expected_old: int | None
) -> None:
    d = deployment(dep_replicas, 0, max_unavailable)
    old_rs = rs("foo-v2", old, ready)
    assert dep.scale_down_old(d, [old_rs], [old_rs]).get("foo-v2") == expected_old


# ---- DeploymentComplete, DeploymentProgressing, DeploymentTimedOut -----------------------------------


def counts(current: int, updated: int, available: int, ready: int = 0) -> dict[str, int]:
    return {
        "replicas": current,
        "updatedReplicas": updated,
        "availableReplicas": available,
        "readyReplicas": ready,
        "observedGeneration": 1,
    }


@pytest.mark.parametrize(
    ("name", "desired", "current", "updated", "available", "max_unavailable", "max_surge", "expected"),
    [
        ("not complete: min but not all pods become available", 5, 5, 5, 4, 1, 0, False),
        ("not complete: min availability is not honored", 5, 5, 5, 3, 1, 0, False),
        ("complete", 5, 5, 5, 5, 0, 0, True),
        ("not complete: all pods are available but not updated", 5, 5, 4, 5, 0, 0, False),
        ("not complete: still running old pods", 1, 2, 1, 1, 0, 1, False),
        ("not complete: one replica deployment never comes up", 1, 1, 1, 0, 1, 1, False),
    ],
)
def test_deployment_complete(
    name: str,
    desired: int,
    current: int,
    updated: int,
    available: int,
    max_unavailable: int,
    max_surge: int,
    expected: bool,
) -> None:
    d = deployment(desired, max_surge, max_unavailable)
    assert dep.deployment_complete(d, counts(current, updated, available)) is expected, name


@pytest.mark.parametrize(
    ("name", "before", "after", "expected"),
    [
        ("progressing: updated pods", (10, 4, 4, 4), (10, 6, 4, 4), True),
        ("not progressing", (10, 4, 4, 4), (10, 4, 4, 4), False),
        ("progressing: old pods removed", (10, 4, 6, 6), (8, 4, 6, 6), True),
        ("not progressing: less new pods", (10, 7, 3, 3), (10, 6, 3, 3), False),
        ("progressing: less overall but more new pods", (10, 4, 7, 7), (8, 8, 5, 5), True),
        ("progressing: more ready pods", (10, 10, 9, 8), (10, 10, 10, 8), True),
        ("progressing: more available pods", (10, 10, 10, 9), (10, 10, 10, 10), True),
    ],
)
def test_deployment_progressing(
    name: str, before: tuple[int, int, int, int], after: tuple[int, int, int, int], expected: bool
) -> None:
    def status(current: int, updated: int, ready: int, available: int) -> dict[str, int]:
        return {
            "replicas": current,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
        }

    d = deployment(10)
    d["status"] = status(*before)
    assert dep.deployment_progressing(d, status(*after)) is expected, name


def at(minute: int, second: int) -> datetime:
    return datetime(2016, 1, 1, 0, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "deadline", "reason", "since", "expected"),
    [
        ("nil progressDeadlineSeconds specified - no timeout", None, "", at(1, 9), False),
        ("infinite progressDeadlineSeconds specified - no timeout", 2**31 - 1, "", at(1, 9), False),
        ("progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:09 => 11s", 10, "", at(1, 9), True),
        (
            "progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:11 => 9s",
            10,
            "",
            at(1, 11),
            False,
        ),
        ("previous status was a complete deployment", None, dep.NEW_RS_AVAILABLE, None, False),
    ],
)
def test_deployment_timed_out(
    name: str, deadline: int | None, reason: str, since: datetime | None, expected: bool
) -> None:
    d = deployment(1)
    d["spec"]["progressDeadlineSeconds"] = deadline
    condition = {"type": "Progressing", "status": "True", "reason": reason}
    if since is not None:
        condition["lastUpdateTime"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert dep.deployment_timed_out(d, {"conditions": [condition]}, at(1, 20)) is expected, name


def test_a_timed_out_rollout_reports_progress_deadline_exceeded() -> None:
    d = deployment(1, 1, 0)
    d["spec"]["progressDeadlineSeconds"] = 10
    d["status"] = {
        "replicas": 1,
        "updatedReplicas": 1,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": dep.RS_UPDATED,
                "lastUpdateTime": "2016-01-01T00:01:00Z",
                "lastTransitionTime": "2016-01-01T00:01:00Z",
            }
        ],
    }
    new_rs = rs("foo-abc", 1, 0)
    new_rs["status"]["replicas"] = 1
    status, _ = dep.rollout_status(d, [new_rs], new_rs, at(1, 20))
    (progressing,) = [c for c in status["conditions"] if c["type"] == "Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert progressing["message"] == 'ReplicaSet "foo-abc" has timed out progressing.'


# ---- EqualIgnoreHash, FindNewReplicaSet, revisions ---------------------------------------------------


def template(name: str, node: str, annotations: dict[str, str], labels: dict[str, str]) -> Obj:
    return {
        "metadata": {"name": name, "annotations": annotations, "labels": labels},
        "spec": {"nodeName": node},
    }


H = dep.HASH_LABEL


@pytest.mark.parametrize(
    ("name", "a", "b", "expected"),
    [
        (
            "Same spec, same labels",
            template("foo", "foo-node", {}, {H: "value-1", "something": "else"}),
            template("foo", "foo-node", {}, {H: "value-1", "something": "else"}),
            True,
        ),
        (
            "Same spec, only pod-template-hash label value is different",
            template("foo", "foo-node", {}, {H: "value-1", "something": "else"}),
            template("foo", "foo-node", {}, {H: "value-2", "something": "else"}),
            True,
        ),
        (
            "Same spec, the former doesn't have pod-template-hash label",
            template("foo", "foo-node", {}, {"something": "else"}),
            template("foo", "foo-node", {}, {H: "value-2", "something": "else"}),
            True,
        ),
        (
            "Same spec, the label is different, the former doesn't have pod-template-hash label, "
            "same number of labels",
            template("foo", "foo-node", {}, {"something": "else"}),
            template("foo", "foo-node", {}, {H: "value-2"}),
            False,
        ),
        (
            "Same spec, the label is different, the latter doesn't have pod-template-hash label, "
            "same number of labels",
            template("foo", "foo-node", {}, {H: "value-1"}),
            template("foo", "foo-node", {}, {"something": "else"}),
            False,
        ),
        (
            "Same spec, the label is different, and the pod-template-hash label value is the same",
            template("foo", "foo-node", {}, {H: "value-1"}),
            template("foo", "foo-node", {}, {H: "value-1", "something": "else"}),
            False,
        ),
        (
            "Different spec, same labels",
            template("foo", "foo-node", {"former": "value"}, {H: "value-1", "something": "else"}),
            template("foo", "foo-node", {"latter": "value"}, {H: "value-1", "something": "else"}),
            False,
        ),
        (
            "Different spec, different pod-template-hash label value",
            template("foo-1", "foo-node", {}, {H: "value-1", "something": "else"}),
            template("foo-2", "foo-node", {}, {H: "value-2", "something": "else"}),
            False,
        ),
        (
            "Different spec, the former doesn't have pod-template-hash label",
            template("foo-1", "foo-node-1", {}, {"something": "else"}),
            template("foo-2", "foo-node-2", {}, {H: "value-2", "something": "else"}),
            False,
        ),
        (
            "Different spec, different labels",
            template("foo", "foo-node-1", {}, {"something": "else"}),
            template("foo", "foo-node-2", {}, {"nothing": "else"}),
            False,
        ),
    ],
)
def test_equal_ignore_hash(name: str, a: Obj, b: Obj, expected: bool) -> None:
    assert dep.equal_ignore_hash(a, b) is expected, name
    assert dep.equal_ignore_hash(b, a) is expected, f"{name} (reverse order)"


def test_find_new_replica_set_prefers_the_oldest_with_the_template() -> None:
    tmpl = template("nginx", "", {}, {"name": "nginx"})
    d = {"metadata": {"name": "nginx"}, "spec": {"template": tmpl}}

    def with_hash(name: str, digest: str, created: str, t: Obj = tmpl) -> Obj:
        labelled = dict(t, metadata=dict(t["metadata"], labels={**t["metadata"]["labels"], H: digest}))
        return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"template": labelled}}

    new = with_hash("new", "hash", "2016-05-20T02:00:00Z")
    dup = with_hash("dup", "different-hash", "2016-05-20T01:00:00Z")
    old = with_hash("old", "x", "2016-05-20T00:00:00Z", template("nginx-old-1", "", {}, {"name": "nginx"}))
    assert dep.find_new_replica_set(d, [new, old]) is new
    assert dep.find_new_replica_set(d, [new, old, dup]) is dup
    assert dep.find_new_replica_set(d, [old]) is None


def test_new_replica_set_annotations_carry_the_next_revision() -> None:
    d = deployment(10, 1, 1)
    d["metadata"]["annotations"] = {
        "team": "a",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        dep.REVISION: "1",
    }
    for revision in range(11, 21):
        annotations = dep.replica_set_annotations(d, {dep.REVISION: str(revision - 1)}, revision)
        assert annotations[dep.REVISION] == str(revision)
    annotations = dep.replica_set_annotations(d, {dep.REVISION: "30"}, 21)
    assert annotations == {
        "team": "a",
        dep.REVISION: "30",
        dep.DESIRED_REPLICAS: "10",
        dep.MAX_REPLICAS: "11",
    }


def test_revision_history_limit_deletes_the_oldest_idle_replica_sets() -> None:
    d = deployment(1)
    d["spec"]["revisionHistoryLimit"] = 1
    idle = [rs(f"r{i}", 0, annotations={dep.REVISION: str(i)}, generation=1) for i in (3, 1, 2)]
    for r in idle:
        r["status"].update(replicas=0, observedGeneration=1)
    busy = rs("r0", 0, annotations={dep.REVISION: "0"}, generation=1)
    busy["status"].update(replicas=1, observedGeneration=1)  # still has a pod
    assert [r["metadata"]["name"] for r in dep.cleanup_candidates(d, [*idle, busy])] == ["r1", "r2"]


# ---- ReplicaSet: which pods go first (controller.ActivePods) -----------------------------------------


def pod(
    name: str,
    node: str = "n",
    phase: str = "Running",
    ready: bool = True,
    restarts: int = 0,
    created: str = "2016-01-01T00:00:00Z",
    ready_at: str = "2016-01-01T00:00:00Z",
) -> Obj:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "labels": {"app": "x"}},
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ready_at}
            ],
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def test_pods_deleted_first_are_unscheduled_pending_unready_young_restarting_new() -> None:
    pods = [
        pod("old-ready"),
        pod("unscheduled", node=""),
        pod("pending", phase="Pending", ready=False),
        pod("unready", ready=False),
        pod("ready-later", ready_at="2016-01-01T00:05:00Z"),
        pod("restarting", restarts=3),
        pod("newer", created="2016-01-01T00:09:00Z"),
    ]
    order = [p["metadata"]["name"] for p in pods_to_delete(pods, len(pods))]
    assert order == ["unscheduled", "pending", "unready", "ready-later", "restarting", "newer", "old-ready"]
    assert [p["metadata"]["name"] for p in pods_to_delete(pods, 2)] == ["unscheduled", "pending"]


# ---- StatefulSet -----------------------------------------------------------------------------------


def sts(replicas: int, policy: str = "OrderedReady", strategy: Obj | None = None) -> Obj:
    return {
        "metadata": {"name": "web", "generation": 1},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": policy,
            "updateStrategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
        },
        "status": {},
    }


def member(
    ordinal: int, revision: str = "r1", healthy: bool = True, deleting: bool = False, phase: str = "Running"
) -> Obj:
    p = pod(f"web-{ordinal}", phase=phase, ready=healthy)
    p["metadata"]["labels"][REVISION_LABEL] = revision
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2016-01-01T00:00:00Z"
    return p


@pytest.mark.parametrize(
    ("name", "policy", "pods", "replicas", "create", "delete"),
    [
        ("OrderedReady creates the first missing ordinal only", "OrderedReady", {}, 3, ((0, "r1"),), ()),
        ("OrderedReady waits for an unready pod", "OrderedReady", {0: member(0, healthy=False)}, 3, (), ()),
        (
            "OrderedReady creates the next once the previous is ready",
            "OrderedReady",
            {0: member(0)},
            3,
            ((1, "r1"),),
            (),
        ),
        ("Parallel creates every missing ordinal", "Parallel", {}, 3, ((0, "r1"), (1, "r1"), (2, "r1")), ()),
        (
            "a failed pod is deleted to be re-created",
            "OrderedReady",
            {0: member(0, phase="Failed")},
            1,
            (),
            ("web-0",),
        ),
        (
            "scale-down removes the highest ordinal first",
            "OrderedReady",
            {i: member(i) for i in range(3)},
            1,
            (),
            ("web-2",),
        ),
        (
            "OrderedReady scale-down waits for unhealthy pods",
            "OrderedReady",
            {0: member(0), 1: member(1, healthy=False), 2: member(2)},
            2,
            (),
            (),
        ),
        (
            "Parallel scale-down removes every condemned pod",
            "Parallel",
            {i: member(i) for i in range(3)},
            1,
            (),
            ("web-2", "web-1"),
        ),
    ],
)
def test_statefulset_pod_management(
    name: str,
    policy: str,
    pods: dict[int, Obj],
    replicas: int,
    create: tuple[Any, ...],
    delete: tuple[str, ...],
) -> None:
    step = plan(sts(replicas, policy), pods, "r1", "r1", NOW)
    assert (step.create, step.delete) == (create, delete), name


@pytest.mark.parametrize(
    ("name", "strategy", "pods", "delete"),
    [
        (
            "rolling update deletes the highest ordinal not at the update revision",
            {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            {i: member(i) for i in range(3)},
            ("web-2",),
        ),
        (
            "then the next one down, once the updated one is healthy",
            {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            {0: member(0), 1: member(1), 2: member(2, "r2")},
            ("web-1",),
        ),
        (
            "it waits for an updated pod to become healthy",
            {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            {0: member(0), 1: member(1), 2: member(2, "r2", healthy=False)},
            (),
        ),
        (
            "ordinals below the partition keep their revision",
            {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            {0: member(0), 1: member(1), 2: member(2, "r2")},
            (),
        ),
        ("OnDelete deletes nothing", {"type": "OnDelete"}, {i: member(i) for i in range(3)}, ()),
    ],
)
def test_statefulset_updates(name: str, strategy: Obj, pods: dict[int, Obj], delete: tuple[str, ...]) -> None:
    step = plan(sts(3, strategy=strategy), pods, "r1", "r2", NOW)
    assert (step.create, step.delete) == ((), delete), name


def test_a_pod_below_the_partition_is_recreated_at_the_current_revision() -> None:
    s = sts(3, strategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})
    assert plan(s, {1: member(1), 2: member(2, "r2")}, "r1", "r2", NOW).create == ((0, "r1"),)
    on_delete = sts(3, strategy={"type": "OnDelete"})
    assert plan(on_delete, {1: member(1), 2: member(2)}, "r1", "r2", NOW).create == ((0, "r2"),)


# ---- Job -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "active", "succeeded", "failed", "expected"),
    [
        ("starts parallelism pods", {"completions": 5, "parallelism": 2}, 0, 0, 0, (2, 0, None)),
        ("never more than the completions left", {"completions": 5, "parallelism": 3}, 0, 4, 0, (1, 0, None)),
        ("lowered parallelism removes pods", {"completions": 5, "parallelism": 1}, 3, 0, 0, (0, 2, None)),
        (
            "complete when completions succeeded",
            {"completions": 2, "parallelism": 2},
            0,
            2,
            0,
            (0, 0, "Complete"),
        ),
        ("failed past the backoff limit", {"completions": 2, "backoffLimit": 1}, 1, 0, 2, (0, 1, "Failed")),
        (
            "at the backoff limit it keeps trying",
            {"completions": 2, "backoffLimit": 2},
            0,
            0,
            2,
            (1, 0, None),
        ),
        (
            "a work queue (no completions) stops starting pods after a success",
            {"parallelism": 3},
            2,
            1,
            0,
            (0, 2, None),
        ),
        (
            "a work queue completes once a pod succeeded and none runs",
            {"parallelism": 3},
            0,
            1,
            0,
            (0, 0, "Complete"),
        ),
        (
            "suspended: no pods, the active ones go",
            {"completions": 3, "suspend": True},
            2,
            0,
            0,
            (0, 2, None),
        ),
    ],
)
def test_job_decisions(
    name: str, spec: Obj, active: int, succeeded: int, failed: int, expected: tuple[int, int, str | None]
) -> None:
    decision = decide({"backoffLimit": 6, "parallelism": 1, **spec}, active, succeeded, failed, NOW, NOW)
    assert (decision.create, decision.delete, decision.finished) == expected, name


def test_job_active_deadline() -> None:
    spec = {"completions": 1, "activeDeadlineSeconds": 10}
    assert decide(spec, 1, 0, 0, NOW - timedelta(seconds=9), NOW).finished is None
    late = decide(spec, 1, 0, 0, NOW - timedelta(seconds=10), NOW)
    assert (late.finished, late.reason, late.delete) == ("Failed", "DeadlineExceeded", 1)


# ---- PodDisruptionBudget ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "pods", "scale", "expected"),
    [
        ({"minAvailable": 2}, 3, 5, (3, 2)),
        ({"minAvailable": "50%"}, 3, 5, (5, 3)),  # rounded up, of the controllers' scale
        ({"maxUnavailable": 1}, 3, 4, (4, 3)),
        ({"maxUnavailable": "30%"}, 3, 4, (4, 2)),  # 1.2 unavailable rounds up to 2
        ({"maxUnavailable": 5}, 3, 4, (4, 0)),
    ],
)
def test_pdb_budget(spec: Obj, pods: int, scale: int, expected: tuple[int, int]) -> None:
    b = budget(spec, pods, lambda: scale)
    assert (b.expected, b.desired_healthy) == expected


def budget_obj(min_available: int, **status: Any) -> Obj:
    return {
        "metadata": {"name": "b", "generation": 1},
        "spec": {"minAvailable": min_available, "selector": {}},
        "status": {"observedGeneration": 1, **status},
    }


def test_pdb_status_counts_healthy_pods_and_disrupted_ones() -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False)]
    status, _ = pdb_status(budget_obj(1), pods, lambda: 3, NOW)
    assert (
        status["currentHealthy"],
        status["desiredHealthy"],
        status["disruptionsAllowed"],
        status["expectedPods"],
    ) == (2, 1, 1, 3)
    recent = (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, recheck = pdb_status(budget_obj(1, disruptedPods={"a": recent}), pods, lambda: 3, NOW)
    assert status["currentHealthy"] == 1 and status["disruptionsAllowed"] == 0 and recheck == 90
    old = (NOW - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, _ = pdb_status(budget_obj(1, disruptedPods={"a": old}), pods, lambda: 3, NOW)
    assert "disruptedPods" not in status and status["disruptionsAllowed"] == 1


def test_eviction_decrements_the_budget_and_records_the_pod() -> None:
    status = evict(pod("a"), [budget_obj(1, disruptionsAllowed=2, currentHealthy=3, desiredHealthy=1)], NOW)
    assert (
        status is not None
        and status["disruptionsAllowed"] == 1
        and status["disruptedPods"] == {"a": "2016-01-01T00:01:20Z"}
    )


@pytest.mark.parametrize(
    ("name", "target", "budgets", "code"),
    [
        (
            "no budget left",
            pod("a"),
            [budget_obj(2, disruptionsAllowed=0, currentHealthy=2, desiredHealthy=2)],
            429,
        ),
        (
            "budget not yet observed",
            pod("a"),
            [dict(budget_obj(1, disruptionsAllowed=1), metadata={"name": "b", "generation": 2})],
            429,
        ),
        (
            "two budgets",
            pod("a"),
            [budget_obj(1, disruptionsAllowed=1), budget_obj(1, disruptionsAllowed=1)],
            500,
        ),
        ("negative", pod("a"), [budget_obj(1, disruptionsAllowed=-1)], 403),
    ],
)
def test_eviction_refusals(name: str, target: Obj, budgets: list[Obj], code: int) -> None:
    with pytest.raises(ApiError) as refused:
        evict(target, budgets, NOW)
    assert refused.value.code == code, name


@pytest.mark.parametrize(
    ("name", "target", "status"),
    [
        ("no budget", pod("a"), None),
        ("a pending pod", pod("a", phase="Pending", ready=False), {"disruptionsAllowed": 0}),
        ("a finished pod", pod("a", phase="Succeeded", ready=False), {"disruptionsAllowed": 0}),
        (
            "an unready pod while the budget is healthy",
            pod("a", ready=False),
            {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2},
        ),
    ],
)
def test_evictions_that_bypass_the_budget(name: str, target: Obj, status: Obj | None) -> None:
    budgets = [] if status is None else [budget_obj(2, **status)]
    assert evict(target, budgets, NOW) is None, name


def test_scaled_value_rounds_as_intstr() -> None:
    assert [scaled_value("25%", 10, True), scaled_value("25%", 10, False), scaled_value(3, 10, True)] == [
        3,
        2,
        3,
    ]
    with pytest.raises(ValueError, match="not a percentage"):
        scaled_value("3", 10, True)


@pytest.mark.parametrize(
    ("name", "before", "after", "new", "old", "expected_new", "expected_old"),
    [
        ("proportional scaling: 5 -> 10", 5, 10, 3, 2, 6, 4),
        ("proportional scaling: 5 -> 3", 5, 3, 3, 2, 2, 1),
        ("proportional scaling: 9 -> 4", 9, 4, 8, 1, 4, 0),
        ("proportional scaling: 7 -> 11, each share rounded", 7, 11, 3, 4, 5, 6),
    ],
)
def test_proportional_scaling(
    name: str, before: int, after: int, new: int, old: int, expected_new: int, expected_old: int
) -> None:
    """The first two are upstream's TestScale cases (sync_test.go), the others its rounding (half away from
    zero) and bounds: maxSurge and maxUnavailable 0, each ReplicaSet annotated with the Deployment's
    replicas before the change."""
    d = deployment(after, 0, 0)
    d["status"] = {"replicas": before}
    annotations = {dep.MAX_REPLICAS: str(before), dep.DESIRED_REPLICAS: str(before)}
    new_rs = rs("new", new, created="2016-05-20T02:00:00Z", annotations=annotations)
    old_rs = rs("old", old, created="2016-05-20T01:00:00Z", annotations=annotations)
    changes = dep.proportional_scale(d, [new_rs, old_rs], new_rs)
    got = (changes.get("new", new), changes.get("old", old))
    assert got == (expected_new, expected_old), name
