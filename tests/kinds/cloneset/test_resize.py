"""Container resources resized in place (``pods/resize``): the classification of a template change, and
the plans it leads to (resize action, restarts, maxUnavailable, fallbacks to recreation)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from services.kinds.cloneset.rules import inplace, model, resize
from services.kinds.cloneset.rules.names import INPLACE_STATE_ANNOTATION
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import CLONESET
from services.model.events import ObjectObserved, PodActionRequested, new_event
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod

CPU_MEM = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}
GUARANTEED = {"limits": {"cpu": "1", "memory": "128Mi"}}
RESTART_MEMORY = [
    {"resourceName": "cpu", "restartPolicy": "NotRequired"},
    {"resourceName": "memory", "restartPolicy": "RestartContainer"},
]


def _template(
    resources: Any = None, image: str = "nginx:1", policy: Any = None, sidecar: Any = None, **labels: str
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": image}
    if resources is not None:
        container["resources"] = resources
    if policy is not None:
        container["resizePolicy"] = policy
    log = {"name": "log", "image": "fluentd:1", "resources": sidecar or CPU_MEM}
    return {"metadata": {"labels": {"app": "x", **labels}}, "spec": {"containers": [container, log]}}


def _with(resources: dict[str, Any], **changes: dict[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(resources)
    for part, values in changes.items():
        out.setdefault(part, {}).update(values)
    return out


@pytest.mark.parametrize(
    ("old", "new", "kind", "resized", "restarted"),
    [
        # cpu request up: resized, no restart, nothing else
        (_template(CPU_MEM), _template(_with(CPU_MEM, requests={"cpu": "200m"})), "None", ["app"], []),
        # the same quantity written differently is no change at all
        (_template(CPU_MEM), _template(_with(CPU_MEM, limits={"cpu": "1000m"})), "None", [], []),
        # image and cpu: Rebuild for the image, resized as well
        (
            _template(CPU_MEM),
            _template(_with(CPU_MEM, requests={"cpu": "200m"}), image="nginx:2"),
            "Rebuild",
            ["app"],
            [],
        ),
        # metadata and cpu: Dynamic and resized
        (
            _template(CPU_MEM),
            _template(_with(CPU_MEM, requests={"cpu": "200m"}), tier="b"),
            "Dynamic",
            ["app"],
            [],
        ),
        # memory under RestartContainer: resized, that container restarts
        (
            _template(CPU_MEM, policy=RESTART_MEMORY),
            _template(_with(CPU_MEM, limits={"memory": "64Mi"}), policy=RESTART_MEMORY),
            "None",
            ["app"],
            ["app"],
        ),
        # memory limit lowered under NotRequired: the API server refuses it, so Static
        (_template(CPU_MEM), _template(_with(CPU_MEM, limits={"memory": "96Mi"})), "Static", [], []),
        # a memory limit added under NotRequired: Static
        (
            _template({"requests": {"cpu": "100m"}}),
            _template({"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}),
            "Static",
            [],
            [],
        ),
        # a request removed: Static
        (
            _template({"requests": {"cpu": "100m", "memory": "64Mi"}}),
            _template({"requests": {"cpu": "100m"}}),
            "Static",
            [],
            [],
        ),
        # another resource than cpu and memory: Static
        (
            _template(CPU_MEM),
            _template(_with(CPU_MEM, requests={"ephemeral-storage": "1Gi"})),
            "Static",
            [],
            [],
        ),
        # Burstable -> Guaranteed: the QoS class changes, Static
        (
            _template(
                {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                sidecar=GUARANTEED,
            ),
            _template(
                {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                sidecar=GUARANTEED,
            ),
            "Static",
            [],
            [],
        ),
        # the resizePolicy itself changes: Static (a pod update cannot change it)
        (_template(CPU_MEM), _template(CPU_MEM, policy=RESTART_MEMORY), "Static", [], []),
    ],
)
def test_classification(
    old: dict[str, Any], new: dict[str, Any], kind: str, resized: list[str], restarted: list[str]
) -> None:
    change = inplace.classify(old, new, extended=False)
    assert inplace.CLASS_NAMES[change.kind] == kind
    assert sorted(change.resize) == resized
    assert change.resize_restart == restarted
    if kind != "Static":
        assert "resources" not in change.containers.get("app", {})  # never part of the pod patch


def _sized_cloneset(
    cpu: str, strategy: dict[str, Any], policy: Any = None, replicas: int = 5
) -> dict[str, Any]:
    cs = cloneset(strategy=strategy, replicas=replicas)
    container = cs["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    if policy is not None:
        container["resizePolicy"] = policy
    return cs


def _resizable_pod(cs: dict[str, Any], instance: str) -> dict[str, Any]:
    """A running pod whose kubelet reports container resources (a node that resizes pods)."""
    pod = running_pod(cs, instance)
    spec = {c["name"]: c for c in pod["spec"]["containers"]}
    for status in pod["status"]["containerStatuses"]:
        status["resources"] = spec[status["name"]].get("resources") or {}
        status["state"] = {"running": {"startedAt": "2026-11-30T11:00:00Z"}}
    return pod


def _roll(cpu: str, strategy: dict[str, Any], pods_resizable: bool = True, policy: Any = None) -> model.Plan:
    v1 = _sized_cloneset("100m", strategy, policy)
    v2 = _sized_cloneset(cpu, strategy, policy)
    v2["metadata"]["generation"] = 2
    make = _resizable_pod if pods_resizable else running_pod
    pods = [make(v1, i) for i in IDS[:5]]
    return plan(plan_input(v2, pods, [revision_record(v1, 1)]))


def test_a_cpu_change_without_restart_resizes_every_pod_at_once() -> None:
    result = _roll("200m", {"type": "InPlaceIfPossible", "maxUnavailable": 1})
    kinds = [type(a).__name__ for a in result.actions]
    # Nothing leaves service, so maxUnavailable 1 does not hold the other four back.
    assert kinds == ["UpdateInPlace", "ResizePod"] * 5
    updates = [a for a in result.actions if isinstance(a, model.UpdateInPlace)]
    assert {u.change for u in updates} == {"Resize"} and all(u.not_ready is None for u in updates)
    resizes = [a for a in result.actions if isinstance(a, model.ResizePod)]
    assert resizes[0].resources == {
        "nginx": {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    }
    assert "spec" not in updates[0].patch  # resources go through pods/resize only
    state = json.loads(updates[0].patch["metadata"]["annotations"][INPLACE_STATE_ANNOTATION])
    assert state["updateResources"] is True and state[inplace.RESIZE_STATE_KEY] == resizes[0].resources


def test_a_memory_change_under_restart_container_takes_the_pod_out_of_service_within_the_budget() -> None:
    v1 = _sized_cloneset("100m", {"type": "InPlaceIfPossible", "maxUnavailable": 1}, RESTART_MEMORY)
    v2 = copy.deepcopy(v1)
    v2["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "128Mi"
    v2["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "128Mi"
    pods = [_resizable_pod(v1, i) for i in IDS[:5]]
    result = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    assert [type(a).__name__ for a in result.actions] == ["UpdateInPlace", "ResizePod"]
    update, resized = result.actions
    assert isinstance(update, model.UpdateInPlace) and update.not_ready is not None
    assert isinstance(resized, model.ResizePod) and resized.restart_containers == ["nginx"]


def test_pods_on_a_node_without_resize_are_recreated() -> None:
    result = _roll("200m", {"type": "InPlaceIfPossible", "maxUnavailable": 1}, pods_resizable=False)
    assert [type(a).__name__ for a in result.actions] == ["RecreatePod"]
    assert "does not resize pods" in result.actions[0].reason


def test_in_place_only_refuses_pods_on_a_node_without_resize() -> None:
    result = _roll("200m", {"type": "InPlaceOnly"}, pods_resizable=False)
    assert result.rejected is not None and "does not resize pods in place" in result.rejected.reason


def _resized_pod(
    cs_old: dict[str, Any], cs_new: dict[str, Any], condition: dict[str, Any] | None
) -> dict[str, Any]:
    """A pod moved to ``cs_new``'s revision by the start patch and resized in its spec, whose kubelet has
    not actuated the resize (``condition``: its PodResizePending)."""
    v1_plan = plan(plan_input(cs_new, [_resizable_pod(cs_old, IDS[0])], [revision_record(cs_old, 1)]))
    update = next(a for a in v1_plan.actions if isinstance(a, model.UpdateInPlace))
    pod = _resizable_pod(cs_old, IDS[0])
    pod["metadata"]["labels"].update({k: v for k, v in update.patch["metadata"]["labels"].items() if v})
    pod["metadata"].setdefault("annotations", {}).update(
        {k: v for k, v in update.patch["metadata"]["annotations"].items() if v}
    )
    pod["spec"]["containers"][0]["resources"] = cs_new["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    if condition is not None:
        pod["status"]["conditions"].append(condition)
    return pod


def _pending(reason: str, since: str = "2026-11-30T11:59:00Z") -> dict[str, Any]:
    return {
        "type": resize.PENDING,
        "status": "True",
        "reason": reason,
        "message": "no room",
        "lastTransitionTime": since,
    }


@pytest.mark.parametrize(
    ("strategy", "condition", "expected"),
    [
        # Infeasible: recreated under InPlaceIfPossible ...
        ("InPlaceIfPossible", _pending("Infeasible"), "RecreatePod"),
        # ... refused (a condition and an event) under InPlaceOnly
        ("InPlaceOnly", _pending("Infeasible"), "rejected"),
        # Deferred for a minute: waited out (requeued)
        ("InPlaceIfPossible", _pending("Deferred"), "wait"),
        # Deferred beyond the bound: as Infeasible
        ("InPlaceIfPossible", _pending("Deferred", "2026-11-30T11:00:00Z"), "RecreatePod"),
        # actuated: the update completes (lifecycle moves on), nothing recreated
        ("InPlaceIfPossible", None, "done"),
    ],
)
def test_a_started_resize(strategy: str, condition: dict[str, Any] | None, expected: str) -> None:
    v1 = _sized_cloneset("100m", {"type": strategy}, replicas=1)
    v2 = _sized_cloneset("200m", {"type": strategy}, replicas=1)
    v2["metadata"]["generation"] = 2
    pod = _resized_pod(v1, v2, condition)
    if condition is None:  # the kubelet actuated it
        for status in pod["status"]["containerStatuses"]:
            status["resources"] = pod["spec"]["containers"][0]["resources"]
    result = plan(plan_input(v2, [pod], [revision_record(v1, 1), revision_record(v2, 2)]))
    kinds = [type(a).__name__ for a in result.actions]
    if expected == "rejected":
        assert result.rejected is not None and "Infeasible" in result.rejected.reason
    elif expected == "wait":
        assert "RecreatePod" not in kinds and result.requeue_after_seconds is not None
    elif expected == "done":
        assert "RecreatePod" not in kinds and result.status is not None
        assert result.status["updatedReplicas"] == 1
    else:
        assert kinds == [expected] and "resize" in result.actions[0].reason


def test_a_resize_request_is_in_effect_once_the_pods_spec_has_its_resources() -> None:
    """pods/resize writes no action id, so the planner's expectation compares the pod's spec with the
    resources the request asked for; a spec still at the old resources keeps the round waiting."""
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    state = WorkloadState("default", "sample")
    target = {"nginx": {"requests": {"cpu": "200m"}}}
    request = PodActionRequested(
        action_id="r-1",
        action="resize",
        namespace="default",
        pod="p",
        details={"action": "resize", "pod": "p", "uid": "u", "resources": target, "revision": "x"},
    )
    state.fold(
        new_event(
            request, stream=CLONESET.decisions_stream("default", "sample"), stream_version=1, occurred_at=at
        )
    )

    def observe(cpu: str, version: int) -> None:
        pod = {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
        }
        observed = ObjectObserved(
            kind="Pod", namespace="default", name="p", uid="u", resource_version=str(version),
            change="MODIFIED", object=pod,
        )  # fmt: skip
        stream = CLONESET.observed_stream("default", "sample")
        state.fold(new_event(observed, stream=stream, stream_version=version, occurred_at=at))

    observe("100m", 1)
    assert [p.event.action_id for p in state.pending()] == ["r-1"]
    observe("0.2", 2)  # the same quantity as 200m
    assert state.pending() == []
