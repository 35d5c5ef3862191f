"""Defaulting the API server applies before validation, on create and update (so a client's PUT without
the defaulted fields is not mistaken for a spec change)."""

from __future__ import annotations

from typing import Any

from .resources import PODS, PVCS, ResourceType


def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _qos_class(spec: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(k)
        and (r.get("requests") or {}).get(k, (r.get("limits") or {}).get(k)) == (r.get("limits") or {}).get(k)
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def apply_defaults(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    if rt is PODS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        for field in ("initContainers", "containers"):
            containers = spec.get(field)
            if not isinstance(containers, list):
                continue
            spec[field] = [_container_defaults(c) if isinstance(c, dict) else c for c in containers]
        if old is None:
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
            status.setdefault("qosClass", _qos_class(spec))
    elif rt is PVCS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        if old is None:
            obj.setdefault("status", {}).setdefault("phase", "Pending")


def _container_defaults(container: dict[str, Any]) -> dict[str, Any]:
    out = dict(container)
    out.setdefault("terminationMessagePath", "/dev/termination-log")
    out.setdefault("terminationMessagePolicy", "File")
    out.setdefault("resources", {})
    if isinstance(out.get("image"), str):
        out.setdefault("imagePullPolicy", _pull_policy(out["image"]))
    return out
