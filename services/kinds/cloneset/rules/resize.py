"""In-place pod resize (``pods/resize``, Kubernetes 1.33+, GA in 1.35): which template resource changes can
be resized in place, which containers such a resize restarts, whether a pod's node resizes pods at all, and
whether a resize is actuated, deferred or infeasible, as the pod shows it. Pure functions over plain dicts.

The API server's rules (``ValidatePodResize``) decide what is resizable: only cpu and memory requests and
limits change, none is removed, a memory limit is neither lowered nor added unless the container's memory
``resizePolicy`` is ``RestartContainer``, and the pod's QoS class stays. Anything else in ``resources`` is a
Static change (the pod is recreated), as before Kubernetes could resize.
"""

from __future__ import annotations

from typing import Any

from services.model.pod_resize import RESIZABLE, body, defaulted, same, spec_matches
from services.model.pod_resize import quantity as _quantity

__all__ = ["RESIZABLE", "body", "defaulted", "same", "spec_matches"]

PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
DEFERRED = "Deferred"
INFEASIBLE = "Infeasible"
# How long a Deferred resize is waited out (the node may free capacity) before it is treated as Infeasible:
# recreated under InPlaceIfPossible (the scheduler finds a node with room), refused under InPlaceOnly.
DEFERRED_BOUND_SECONDS = 120
CLASS_NAME = "Resize"


def restart_policy(container: dict[str, Any], resource: str) -> str:
    for policy in container.get("resizePolicy") or []:
        if isinstance(policy, dict) and policy.get("resourceName") == resource:
            return str(policy.get("restartPolicy") or "NotRequired")
    return "NotRequired"


def _changed(before: dict[str, Any], after: dict[str, Any], resource: str) -> bool:
    return any(
        _quantity((before.get(p) or {}).get(resource)) != _quantity((after.get(p) or {}).get(resource))
        for p in ("requests", "limits")
    )


def resizable(before: Any, after: Any, container: dict[str, Any]) -> str | None:
    """None when ``before`` -> ``after`` (a container's resources) can be resized in place; otherwise why
    not, in the API server's words."""
    old, new = defaulted(before), defaulted(after)
    for part in ("requests", "limits"):
        if set(old.get(part) or {}) - set(new.get(part) or {}):
            return f"resource {part} cannot be removed"
        was, wants = old.get(part) or {}, new.get(part) or {}
        for resource in (set(was) | set(wants)) - set(RESIZABLE):
            if _quantity(was.get(resource)) != _quantity(wants.get(resource)):
                return "only cpu and memory resources are mutable"
    if restart_policy(container, "memory") == "NotRequired":
        old_limit = _quantity((old.get("limits") or {}).get("memory"))
        new_limit = _quantity((new.get("limits") or {}).get("memory"))
        if new_limit is not None and old_limit is None:
            return "memory limits cannot be added unless resizePolicy is RestartContainer"
        if (
            new_limit is not None
            and not isinstance(new_limit, tuple)
            and not isinstance(old_limit, tuple)
            and new_limit < old_limit
        ):
            return "memory limits cannot be decreased unless resizePolicy is RestartContainer"
    return None


def restarts(before: Any, after: Any, container: dict[str, Any]) -> bool:
    """Whether resizing ``before`` -> ``after`` restarts ``container``: a changed cpu or memory whose
    ``resizePolicy`` is RestartContainer."""
    old, new = defaulted(before), defaulted(after)
    return any(
        _changed(old, new, r) and restart_policy(container, r) == "RestartContainer" for r in RESIZABLE
    )


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class from its containers' resources (``GetPodQOS``, cpu and memory)."""
    resources = [
        defaulted(c.get("resources"))
        for field in ("initContainers", "containers")
        for c in spec.get(field) or []
        if isinstance(c, dict)
    ]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        for resource in RESIZABLE:
            limit = _quantity((r.get("limits") or {}).get(resource))
            if limit is None or _quantity((r.get("requests") or {}).get(resource)) != limit:
                return "Burstable"
    return "Guaranteed"


# --- what the pod shows ---------------------------------------------------------------------------------


def supported(pod: dict[str, Any]) -> bool:
    """Whether the pod's node resizes pods in place: its kubelet reports container resources in status
    (``status.containerStatuses[].resources``), which kubelets before in-place resize do not, and which the
    API server itself requires of a running pod before it accepts a resize."""
    return any(
        isinstance(s, dict) and s.get("resources") is not None
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition if condition.get("status") == "True" else None
    return None


def pending(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's ``PodResizePending`` condition (reason Deferred or Infeasible), when it has one."""
    return _condition(pod, PENDING)


def actuated(pod: dict[str, Any], targets: dict[str, Any]) -> bool:
    """Every container in ``targets`` (name -> resources) has them in its spec and, as the kubelet reports,
    in its status; and no resize is pending or in progress."""
    if pending(pod) is not None or _condition(pod, IN_PROGRESS) is not None:
        return False
    specs = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    for name, target in targets.items():
        spec, status = specs.get(name), statuses.get(name)
        if spec is None or status is None or status.get("resources") is None:
            return False
        if not same(spec.get("resources"), target) or not same(status.get("resources"), target):
            return False
    return True
