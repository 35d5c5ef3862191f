"""The flight recorder's rules (services/kinds): who is recorded, where each object goes, what changed in a
template, who changed the spec, and the events a Deployment's or a StatefulSet's observations mean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from services.kinds import registry
from services.kinds.deployment.rules import DeploymentTrail, surge_and_unavailable
from services.kinds.recorded.rules import (
    EVICT_POD,
    SPEC_MANAGERS,
    PodView,
    RecordScope,
    changes,
    existed_before,
    spec_managers,
    template_diff,
)
from services.kinds.statefulset.rules import StatefulSetTrail
from services.model.events import Envelope, ObjectObserved, PodActionObserved
from services.model.streams import workload_stream
from services.watcher.objects import observation

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("setting", "namespace", "labels", "recorded"),
    [
        ("off", "ops", {"rollbook.io/record": "true"}, False),
        ("", "ops", None, False),
        ("all", "ops", {}, True),
        ("all", "ops", None, True),
        ("label", "ops", {"rollbook.io/record": "true"}, True),
        ("label", "ops", {"rollbook.io/record": "false"}, False),
        ("label", "ops", None, None),  # a pod whose workload was not seen yet: its label decides
        ("ops,web", "web", {}, True),
        ("ops,web", "db", {}, False),
        ("ops,web", "db", {"rollbook.io/record": "true"}, True),
    ],
)
def test_who_is_recorded(
    setting: str, namespace: str, labels: dict[str, str] | None, recorded: bool | None
) -> None:
    assert RecordScope.parse(setting).records(namespace, labels) is recorded


def owned(kind: str, name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ops",
            "name": "x",
            "labels": labels,
            "ownerReferences": [{"controller": True, "kind": kind, "apiVersion": "apps/v1", "name": name}],
        }
    }


@pytest.mark.parametrize(
    ("kind", "obj", "routed"),
    [
        ("Deployment", {"metadata": {"namespace": "ops", "name": "web"}}, ("Deployment", "web")),
        ("ReplicaSet", owned("Deployment", "web"), ("Deployment", "web")),
        ("Pod", owned("ReplicaSet", "web-7f9c", **{"pod-template-hash": "7f9c"}), ("Deployment", "web")),
        ("Pod", owned("ReplicaSet", "web-7f9c"), None),  # no hash label: a ReplicaSet of its own
        ("ReplicaSet", owned("Other", "web"), None),
        ("StatefulSet", {"metadata": {"namespace": "ops", "name": "db"}}, ("StatefulSet", "db")),
        ("ControllerRevision", owned("StatefulSet", "db"), ("StatefulSet", "db")),
        ("Pod", owned("StatefulSet", "db"), ("StatefulSet", "db")),
        ("Pod", {**owned("CloneSet", "cs"), "metadata": {**owned("CloneSet", "cs")["metadata"],
            "ownerReferences": [{"controller": True, "kind": "CloneSet",
                                 "apiVersion": "apps.kruise.io/v1alpha1", "name": "cs"}]}},
         ("CloneSet", "cs")),
        ("Pod", {"metadata": {"namespace": "ops", "name": "lonely"}}, None),
    ],
)  # fmt: skip
def test_each_object_goes_to_its_workload(
    kind: str, obj: dict[str, Any], routed: tuple[str, str] | None
) -> None:
    found = registry.route(kind, obj)
    assert (None if found is None else (found[0].name, found[1][1])) == routed


@pytest.mark.parametrize(
    "stream",
    [
        "CloneSet/ops/web",
        "CloneSet/ops/web/observed",
        "SidecarSet//s/decisions",
        "Deployment/ops/web/recorded",
    ],
)
def test_every_stream_of_a_workload_shares_its_partition(stream: str) -> None:
    assert registry.partition_key(stream) == workload_stream(stream) == "/".join(stream.split("/")[:3])


def test_a_template_diff_names_each_changed_leaf() -> None:
    before = {
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}, {"name": "log", "image": "f:1"}]}
    }
    after = {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}], "nodeName": "n1"}}
    assert template_diff(before, after) == [
        {"path": "spec.containers[app].image", "from": "nginx:1.25", "to": "nginx:1.26"},
        {"path": "spec.containers[log]", "from": {"name": "log", "image": "f:1"}, "to": None},
        {"path": "spec.nodeName", "from": None, "to": "n1"},
    ]
    assert template_diff(after, after) == []


def test_the_spec_manager_is_the_latest_writer_of_the_spec() -> None:
    managed = [
        {"manager": "kubectl-create", "operation": "Update", "time": "2026-12-06T10:00:00Z",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-12-06T12:00:00Z",
         "subresource": "status", "fieldsV1": {"f:status": {}}},
        {"manager": "kubectl-set", "operation": "Update", "time": "2026-12-06T11:00:00Z",
         "fieldsV1": {"f:spec": {"f:template": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-12-06T12:00:00Z",
         "fieldsV1": {"f:metadata": {"f:annotations": {}}}},
    ]  # fmt: skip
    assert spec_managers({"metadata": {"managedFields": managed}}) == [
        {"manager": "kubectl-set", "operation": "Update", "time": "2026-12-06T11:00:00Z"},
        {"manager": "kubectl-create", "operation": "Update", "time": "2026-12-06T10:00:00Z"},
    ]


def view(uid: str = "u1", *, terminating: bool = False, evicted: bool = False, ready: bool = True) -> PodView:
    return PodView(uid, "r1", (("app", "nginx"),), ready, ready and not terminating, terminating, evicted)


@pytest.mark.parametrize(
    ("before", "after", "actions"),
    [
        (None, view(), ["createPod", "becameReady"]),
        (view(), view(terminating=True), ["deletePod"]),
        (view(), view(terminating=True, evicted=True), [EVICT_POD]),
        (view(evicted=True), None, [EVICT_POD]),
        (view(terminating=True), None, []),
        (view(), view("u2", ready=False), ["deletePod", "recreatePod"]),
        (view(ready=False), view(), ["becameReady"]),
    ],
)
def test_pod_actions_observed(before: PodView | None, after: PodView | None, actions: list[str]) -> None:
    assert [c.action for c in changes(before, after)] == actions


# --- a Deployment's trail ----------------------------------------------------------------------------


def template(image: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": image}]}}


def replicaset(hash_: str, number: int, replicas: int, image: str) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "metadata": {
            "namespace": "ops",
            "name": f"web-{hash_}",
            "uid": f"rs-{hash_}",
            "resourceVersion": f"{number}{replicas}",
            "labels": {"pod-template-hash": hash_},
            "annotations": {"deployment.kubernetes.io/revision": str(number)},
        },
        "spec": {"replicas": replicas, "template": template(image)},
        "status": {"replicas": replicas},
    }


def deployment(
    number: int,
    generation: int,
    *,
    updated: int,
    available: int,
    total: int = 3,
    manager: str = "kubectl-set",
    **spec: Any,
) -> dict[str, Any]:
    conditions = spec.pop("conditions", [])
    return {
        "kind": "Deployment",
        "metadata": {
            "namespace": "ops",
            "name": "web",
            "uid": "d",
            "resourceVersion": f"d{generation}{updated}{available}{total}{len(conditions)}",
            "generation": generation,
            "annotations": {"deployment.kubernetes.io/revision": str(number)},
        },
        "spec": {"replicas": 3, "strategy": {"type": "RollingUpdate"}, **spec},
        "status": {
            "observedGeneration": generation,
            "replicas": total,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "conditions": conditions,
        },
        SPEC_MANAGERS: [
            {"manager": manager, "operation": "Update", "time": f"2026-12-06T12:00:{generation:02}Z"}
        ],
    }


def fold(trail: DeploymentTrail | StatefulSetTrail, objects: list[dict[str, Any]]) -> list[Envelope]:
    out: list[Envelope] = []
    for index, obj in enumerate(objects, start=1):
        event = observation(obj["kind"], obj, "MODIFIED", stream=trail.observed, correlation_id=None)
        event = msgspec.structs.replace(
            event, stream_version=index, occurred_at=T0 + timedelta(seconds=index)
        )
        out += trail.fold(event)
    return out


def summary(events: list[Envelope]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for e in events:
        p: Any = e.payload
        match e.type:
            case "RevisionCreated":
                rows.append((e.type, p.name, p.revision, [d["path"] for d in p.diff]))
            case "RolloutStarted":
                rows.append((e.type, p.rollout_id, p.from_revision, p.changed_by["manager"]))
            case "RolloutCompleted":
                rows.append((e.type, p.rollout_id, p.outcome))
            case "PartitionStepPlanned":
                rows.append((e.type, p.partition, p.expected_updated, p.max_unavailable, p.max_surge))
            case _:
                rows.append((e.type, p.rollout_id))
    return rows


def test_a_deployment_rolled_then_undone_before_it_finished() -> None:
    events = fold(
        DeploymentTrail("ops", "web"),
        [
            replicaset("a", 1, 3, "nginx:1"),
            deployment(1, 1, updated=3, available=3),  # complete when first seen: no rollout
            replicaset("b", 2, 1, "nginx:2"),
            deployment(2, 2, updated=1, available=3, total=4),
            replicaset("b", 2, 2, "nginx:2"),  # a scale step
            deployment(2, 3, updated=2, available=2, total=4, paused=True),
            # kubectl rollout undo re-numbers the first ReplicaSet, seen before the Deployment's own change
            replicaset("a", 3, 3, "nginx:1"),
            deployment(3, 4, updated=3, available=2, total=5, manager="kubectl-rollout"),
            deployment(3, 4, updated=3, available=3, manager="kubectl-rollout"),
        ],
    )
    first, undo = "ops/web@web-b#1", "ops/web@web-a#2"
    assert summary(events) == [
        ("RevisionCreated", "web-a", 1, []),
        ("RevisionCreated", "web-b", 2, ["spec.containers[app].image"]),
        ("RolloutStarted", first, "web-a", "kubectl-set"),
        ("PartitionStepPlanned", 2, 1, 0, 1),
        ("PartitionStepPlanned", 1, 2, 0, 1),
        ("RolloutPaused", first),
        ("RevisionCreated", "web-a", 3, ["spec.containers[app].image"]),
        ("RolloutCompleted", first, "rolled back"),
        ("RolloutStarted", undo, "web-b", "kubectl-rollout"),
        ("RolloutResumed", undo),
        ("PartitionStepPlanned", 0, 3, 0, 1),
        ("RolloutCompleted", undo, "succeeded"),
    ]
    assert {e.stream for e in events} == {"Deployment/ops/web/recorded"}
    assert [e.stream_version for e in events] == list(range(1, len(events) + 1))


def test_a_deployment_past_its_progress_deadline() -> None:
    stuck = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    events = fold(
        DeploymentTrail("ops", "web"),
        [
            replicaset("a", 1, 3, "nginx:1"),
            deployment(1, 1, updated=3, available=3),
            replicaset("b", 2, 1, "nginx:2"),
            deployment(2, 2, updated=1, available=2, total=4, progressDeadlineSeconds=30),
            deployment(2, 2, updated=1, available=2, total=4, progressDeadlineSeconds=30, conditions=[stuck]),
        ],
    )
    (deadline,) = [e.payload for e in events if e.type == "RolloutProgressDeadlineExceeded"]
    assert deadline.progress_deadline_seconds == 30 and deadline.rollout_id == "ops/web@web-b#1"  # type: ignore[union-attr]
    assert not [e for e in events if e.type == "RolloutCompleted"]


@pytest.mark.parametrize(
    ("strategy", "replicas", "resolved"),
    [
        ({"type": "RollingUpdate"}, 3, (1, 0)),  # 25% of 3: surge rounds up, unavailable down
        ({"type": "RollingUpdate"}, 10, (3, 2)),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, 4, (0, 1)),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 2}}, 3, (2, 2)),
        ({"type": "Recreate"}, 5, (0, 5)),
    ],
)
def test_a_deployments_surge_and_unavailable(
    strategy: dict[str, Any], replicas: int, resolved: tuple[int, int]
) -> None:
    assert surge_and_unavailable(strategy, replicas) == resolved


# --- a StatefulSet's trail ---------------------------------------------------------------------------


def statefulset(generation: int, update: str, current: str, partition: int, updated: int) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "metadata": {
            "namespace": "ops",
            "name": "db",
            "uid": "s",
            "resourceVersion": f"s{generation}{partition}{updated}{current}",
            "generation": generation,
        },
        "spec": {
            "replicas": 3,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
        },
        "status": {
            "observedGeneration": generation,
            "updateRevision": update,
            "currentRevision": current,
            "updatedReplicas": updated,
            "readyReplicas": 3,
        },
    }


def test_a_statefulset_rolled_by_partition_steps() -> None:
    events = fold(
        StatefulSetTrail("ops", "db"),
        [
            statefulset(1, "db-1", "db-1", 2, 3),
            statefulset(2, "db-2", "db-1", 2, 1),
            statefulset(3, "db-2", "db-1", 1, 2),
            statefulset(4, "db-2", "db-1", 0, 3),
            statefulset(4, "db-2", "db-2", 0, 3),
        ],
    )
    assert [(e.type, getattr(e.payload, "partition", None)) for e in events] == [
        ("RolloutStarted", None),
        ("PartitionStepPlanned", 2),
        ("PartitionStepPlanned", 1),
        ("PartitionStepPlanned", 0),
        ("RolloutCompleted", None),
    ]


def pod(name: str, hash_: str, version: int, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": "ops",
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": f"p{version}",
        "labels": {"pod-template-hash": hash_},
        "creationTimestamp": "2026-12-06T12:00:30Z",
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-06T12:00:40Z"
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"kind": "Pod", "metadata": metadata, "status": {"conditions": [condition]}}


def test_a_rollbacks_pods_seen_before_the_rollback_itself_are_its_actions() -> None:
    events = fold(
        DeploymentTrail("ops", "web"),
        [
            replicaset("a", 1, 3, "nginx:1"),
            deployment(1, 1, updated=3, available=3),
            replicaset("b", 2, 3, "nginx:2"),
            deployment(2, 2, updated=3, available=3),  # rolled out and complete
            pod("web-b-1", "b", 0),
            # kubectl rollout undo: the pod watch is ahead of the ReplicaSet and Deployment watches
            pod("web-a-1", "a", 1, ready=False),
            pod("web-b-1", "b", 2, deleting=True),
            deployment(3, 3, updated=3, available=3, manager="kubectl-rollout") | {"status": {}},
            replicaset("a", 3, 1, "nginx:1"),
            deployment(3, 4, updated=1, available=3, total=4, manager="kubectl-rollout"),
        ],
    )
    actions = [
        (e.payload.action, e.payload.pod, e.payload.rollout_id)
        for e in events
        if e.type == "PodActionObserved"
    ]  # type: ignore[union-attr]
    assert [(str(a), p, r) for a, p, r in actions] == [
        ("createPod", "web-b-1", "ops/web@web-b#1"),
        ("becameReady", "web-b-1", "ops/web@web-b#1"),
        ("createPod", "web-a-1", "ops/web@web-a#2"),  # waited for the rollback to show
        ("deletePod", "web-b-1", "ops/web@web-a#2"),
    ]


# --- pods there before the trail started --------------------------------------------------------------------

FIRST_SEEN = datetime(2026, 12, 6, 12, 0, 31, 50_000, tzinfo=UTC)  # the trail's first observation


def sts_pod(name: str, created: str | None, *, ready: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": "ops",
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": f"{name}-{ready}",
        "labels": {"controller-revision-hash": "db-1"},
    }
    if created is not None:
        metadata["creationTimestamp"] = created
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"kind": "Pod", "metadata": metadata, "status": {"conditions": [condition]}}


@pytest.mark.parametrize(
    ("created", "born", "workload_born", "existed"),
    [
        # created late in one second, first seen early in the next, as the trail's first observation:
        ("2026-12-06T12:00:30Z", True, None, False),  # the watch announced it: created while recorded
        ("2026-12-06T12:00:30Z", False, None, True),  # listed, or stored before `born`: the timestamps decide
        (
            "2026-12-06T12:00:31Z",
            False,
            None,
            False,
        ),  # in the first observation's own second: not surely before
        (
            "2026-12-06T12:05:00Z",
            False,
            None,
            False,
        ),  # after the trail started (a relist after the watch lapsed)
        ("2026-12-06T11:00:00Z", False, None, True),  # there an hour before
        (None, False, None, False),  # no creation time: not known to be older
        # held until its workload showed its opt-in; the workload's own observation was born
        ("2026-12-06T12:00:30Z", False, "2026-12-06T12:00:29Z", False),
        ("2026-12-06T12:00:30Z", False, "2026-12-06T12:00:30Z", False),
        ("2026-12-06T12:00:28Z", False, "2026-12-06T12:00:29Z", True),  # older than its workload: adopted
    ],
)
def test_a_pod_existed_before_the_trail_only_when_nothing_says_it_was_created_under_watch(
    created: str | None, born: bool, workload_born: str | None, existed: bool
) -> None:
    observed = observation(
        "Pod", sts_pod("db-0", created), "ADDED", stream="s", correlation_id=None, born=born
    )
    assert isinstance(observed.payload, ObjectObserved)
    workload = datetime.fromisoformat(workload_born) if workload_born else None
    assert existed_before(observed.payload, FIRST_SEEN, workload) is existed
    assert existed_before(observed.payload, None, workload) is False  # nothing observed yet: it is the first


def fold_at(trail: StatefulSetTrail, seen: list[tuple[dict[str, Any], bool, float]]) -> list[Any]:
    """The pod actions of observations ((object, born, seconds after FIRST_SEEN)) as the trail folds them."""
    out: list[Envelope] = []
    for index, (obj, born, after) in enumerate(seen, start=1):
        change = "ADDED" if born else "MODIFIED"
        event = observation(obj["kind"], obj, change, stream=trail.observed, correlation_id=None, born=born)
        out += trail.fold(
            msgspec.structs.replace(
                event, stream_version=index, occurred_at=FIRST_SEEN + timedelta(seconds=after)
            )
        )
    return [e.payload for e in out if isinstance(e.payload, PodActionObserved)]


def test_a_pod_announced_first_and_created_the_second_before_is_recorded_created() -> None:
    """The pod's ADDED came before its StatefulSet's, in the second after the pod was created."""
    sts = statefulset(1, "db-1", "db-1", 0, 1)
    actions = fold_at(
        StatefulSetTrail("ops", "db"),
        [
            (sts_pod("db-0", "2026-12-06T12:00:30Z"), True, 0),  # the trail's first observation
            (sts, True, 0.1),
            (sts_pod("db-0", "2026-12-06T12:00:30Z", ready=True), False, 0.5),
        ],
    )
    assert [(a.action, a.pod) for a in actions] == [("createPod", "db-0"), ("becameReady", "db-0")]
    assert actions[1].completes == actions[0].action_id


def test_a_listed_pod_from_the_second_before_the_trail_started_existed_before_it() -> None:
    """The rule of trails recorded before `born`, kept for what is listed: its readiness is all it did."""
    actions = fold_at(
        StatefulSetTrail("ops", "db"),
        [
            (sts_pod("db-0", "2026-12-06T12:00:30Z"), False, 0),
            (sts_pod("db-0", "2026-12-06T12:00:30Z", ready=True), False, 0.5),
        ],
    )
    assert [(a.action, a.pod) for a in actions] == [("becameReady", "db-0")]


def test_pods_held_for_a_workload_seen_born_are_recorded_created() -> None:
    """ROLLBOOK_RECORD=label: the pod's ADDED waited for its StatefulSet's, which showed the label a second
    after the pod was created; the watcher then stores the pod as listed."""
    sts = statefulset(1, "db-1", "db-1", 0, 1)
    sts["metadata"]["creationTimestamp"] = "2026-12-06T12:00:30Z"
    actions = fold_at(
        StatefulSetTrail("ops", "db"),
        [(sts, True, 0), (sts_pod("db-0", "2026-12-06T12:00:30Z"), False, 0)],
    )
    assert [(a.action, a.pod) for a in actions] == [("createPod", "db-0")]
