"""``pods/resize`` (in-place pod resize, KEP-1287, GA in Kubernetes 1.35): what the API server keeps of a
write to it and how it validates one, and the kubelet's feasibility check against node allocatable.

The API server (pkg/registry/core/pod/strategy.go ``podResizeStrategy``, pkg/apis/core/validation
``ValidatePodResize``):
- keeps only ``spec.containers[*].resources`` / ``resizePolicy`` (and the same of init containers) from the
  write; every other spec change, the status, and labels, annotations, finalizers and owner references are
  taken from the stored pod (``ResetObjectMetaForStatus``). Containers added, removed, renamed or reordered
  are kept as written, so validation refuses them;
- refuses: pods with pod-level resources, static (mirror) pods, Windows pods; a resize that would change the
  pod's QoS class; a pod whose running containers report no ``status.containerStatuses[].resources`` (its
  node does not support resize); removing a request or a limit; lowering or adding a memory limit when the
  container's memory ``resizePolicy`` is ``NotRequired`` (or unset); changing any resource but cpu and memory;
  changing the resources of a non-sidecar init container.

The kubelet (pkg/kubelet allocation manager): a resize whose requests exceed the node's allocatable is
``Infeasible``; one that does not fit beside the other pods' requests now is ``Deferred`` (retried when
capacity frees up); otherwise it is allocated (``allocatedResources``) and actuated, the containers whose
changed resource has ``restartPolicy: RestartContainer`` restarted.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from .defaults import qos_class
from .validation import Cause, parse_quantity, pod_spec_causes

Obj = dict[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
DEFERRED = "Deferred"
INFEASIBLE = "Infeasible"
RESIZABLE = ("cpu", "memory")


def _restartable(container: Obj) -> bool:
    return container.get("restartPolicy") == "Always"


def prepare(old: Obj, new: Obj) -> Obj:
    """The pod a pods/resize write stores before validation (``dropNonResizeUpdates``)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    merged = copy.deepcopy(old)
    spec = merged.setdefault("spec", {})
    for field in ("containers", "initContainers"):
        before, after = old_spec.get(field) or [], new_spec.get(field) or []
        if not isinstance(after, list) or [_name(c) for c in before] != [_name(c) for c in after]:
            spec[field] = copy.deepcopy(after)  # left as written: validation refuses it
            continue
        kept = []
        for was, wants in zip(before, after, strict=True):
            container = dict(was)
            for key in ("resources", "resizePolicy"):
                if key in wants:
                    container[key] = copy.deepcopy(wants[key])
                else:
                    container.pop(key, None)
            kept.append(container)
        if kept or field in old_spec:
            spec[field] = kept
    return merged


def _name(container: Any) -> Any:
    return container.get("name") if isinstance(container, dict) else None


def restart_policy(container: Obj, resource: str) -> str:
    """The container's ``resizePolicy`` for ``resource``; NotRequired when it names none."""
    for policy in container.get("resizePolicy") or []:
        if isinstance(policy, dict) and policy.get("resourceName") == resource:
            return str(policy.get("restartPolicy") or "NotRequired")
    return "NotRequired"


def _forbidden(where: str, message: str) -> Cause:
    return (where, "FieldValueForbidden", f"Forbidden: {message}")


def causes(old: Obj, new: Obj) -> list[Cause]:
    """Why ``ValidatePodResize`` refuses the resize from ``old`` to ``new`` (as ``prepare`` left it)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if (old_spec.get("resources") or new_spec.get("resources")) and any(
        (s.get("resources") or {}).get(k) for s in (old_spec, new_spec) for k in ("requests", "limits")
    ):
        return [_forbidden("", "pods with pod-level resources cannot be resized")]
    if MIRROR_ANNOTATION in ((old.get("metadata") or {}).get("annotations") or {}):
        return [_forbidden("", "static pods cannot be resized")]
    if ((old_spec.get("os") or {}).get("name")) == "windows":
        return [_forbidden("", "windows pods cannot be resized")]
    out: list[Cause] = pod_spec_causes(new_spec)
    for field in ("containers", "initContainers"):
        if [_name(c) for c in old_spec.get(field) or []] != [_name(c) for c in new_spec.get(field) or []]:
            return [_forbidden("spec", "only cpu and memory resources are mutable")]
    old_qos = (old.get("status") or {}).get("qosClass") or qos_class(old_spec)
    new_qos = qos_class(new_spec)
    if old_qos != new_qos:
        out.append(("spec", "FieldValueInvalid", f'Invalid value: "{new_qos}": {_QOS_MESSAGE}'))
    if not _node_supports_resize(old):
        out.append(_forbidden("spec", "Pod running on node without support for resize"))
    for field in ("initContainers", "containers"):
        for index, (before, after) in enumerate(
            zip(old_spec.get(field) or [], new_spec.get(field) or [], strict=True)
        ):
            where = f"spec.{field}[{index}].resources"
            sidecar = field == "containers" or _restartable(before)
            if sidecar:
                out += _container_causes(before, after, where)
            if _without_cpu_memory(after, before) != _normalised(before):
                if field == "containers":
                    message = "only cpu and memory resources are mutable"
                elif sidecar:
                    message = "only cpu and memory resources for sidecar containers are mutable"
                else:
                    message = "resources for non-sidecar init containers are immutable"
                out.append(_forbidden("spec", message))
    return out


_QOS_MESSAGE = "Pod QOS Class may not change as a result of resizing"


def _node_supports_resize(pod: Obj) -> bool:
    """``isPodResizeRequestSupported``: the first running container reports its resources."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in (status.get("state") or {}):
            return status.get("resources") is not None
    return True


def _container_causes(before: Obj, after: Obj, where: str) -> list[Cause]:
    old_res, new_res = before.get("resources") or {}, after.get("resources") or {}
    out: list[Cause] = []
    for part in ("requests", "limits"):
        if set(old_res.get(part) or {}) - set(new_res.get(part) or {}):
            out.append(_forbidden(f"{where}.{part}", f"resource {part} cannot be removed"))
    if restart_policy(after, "memory") == "NotRequired":
        old_limit = parse_quantity((old_res.get("limits") or {}).get("memory"))
        new_limit = parse_quantity((new_res.get("limits") or {}).get("memory"))
        if old_limit is not None and new_limit is not None and new_limit < old_limit:
            out.append(
                _forbidden(
                    f"{where}.limits[memory]",
                    "memory limits cannot be decreased unless resizePolicy is RestartContainer",
                )
            )
        elif new_limit is not None and old_limit is None:
            out.append(
                _forbidden(
                    f"{where}.limits[memory]",
                    "memory limits cannot be added unless resizePolicy is RestartContainer",
                )
            )
    return out


def _without_cpu_memory(container: Obj, old: Obj) -> Obj:
    """``dropCPUMemoryResourcesFromContainer``: ``container`` with the cpu and memory of ``old`` (a part
    ``old`` lacks is dropped), empty maps as absent (the API's semantic equality)."""
    old_res, new_res = old.get("resources") or {}, container.get("resources") or {}
    res: Obj = {}
    for part in ("requests", "limits"):
        if not old_res.get(part):
            continue
        values = {k: v for k, v in (new_res.get(part) or {}).items() if k not in RESIZABLE}
        values.update({k: v for k, v in old_res[part].items() if k in RESIZABLE})
        res[part] = values
    return _normalised({**container, "resources": res})


def _normalised(container: Obj) -> Obj:
    out = dict(container)
    res = {k: v for k, v in (out.pop("resources", None) or {}).items() if v}
    if res:
        out["resources"] = res
    if not out.get("resizePolicy"):
        out.pop("resizePolicy", None)
    return out


# --- the kubelet's side ---------------------------------------------------------------------------------


def quantity(value: Any) -> Fraction:
    parsed = parse_quantity(value)
    return parsed if parsed is not None else Fraction(0)


def requests_of(resources: Obj) -> dict[str, Fraction]:
    """A container's cpu and memory requests (a limit without a request requests the limit)."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return {k: quantity(requests.get(k, limits.get(k))) for k in RESIZABLE}


def pod_requests(resources_by_container: dict[str, Obj]) -> dict[str, Fraction]:
    total = {k: Fraction(0) for k in RESIZABLE}
    for resources in resources_by_container.values():
        for key, value in requests_of(resources).items():
            total[key] += value
    return total


def _show(resource: str, value: Fraction) -> str:
    if resource == "cpu":
        return f"{int(value * 1000)}m"
    return str(int(value))


def feasibility(
    wanted: dict[str, Fraction], allocated: dict[str, Fraction], used: dict[str, Fraction], capacity: Obj
) -> tuple[str, str] | None:
    """(Infeasible | Deferred, message) when a pod whose requests are ``allocated`` may not grow to
    ``wanted`` on a node whose pods request ``used`` (this pod's ``allocated`` among them) of ``capacity``;
    None when it fits now."""
    for resource in RESIZABLE:
        cap = quantity(capacity.get(resource))
        if wanted[resource] > cap:
            return (
                INFEASIBLE,
                f"Node didn't have enough capacity: {resource}, requested: "
                f"{_show(resource, wanted[resource])}, capacity: {_show(resource, cap)}",
            )
    for resource in RESIZABLE:
        cap = quantity(capacity.get(resource))
        others = used[resource] - allocated[resource]
        if others + wanted[resource] > cap:
            return (
                DEFERRED,
                f"Node didn't have enough resource: {resource}, requested: "
                f"{_show(resource, wanted[resource])}, used: {_show(resource, others)}, "
                f"capacity: {_show(resource, cap)}",
            )
    return None


def restarts(before: Obj, after: Obj, container: Obj) -> bool:
    """Whether actuating ``before`` -> ``after`` restarts ``container``: a changed cpu or memory (request
    or limit) whose ``resizePolicy`` is RestartContainer."""
    for resource in RESIZABLE:
        changed = any(
            quantity((before.get(p) or {}).get(resource)) != quantity((after.get(p) or {}).get(resource))
            for p in ("requests", "limits")
        )
        if changed and restart_policy(container, resource) == "RestartContainer":
            return True
    return False


def same(a: Obj, b: Obj) -> bool:
    """Two resource requirements equal in their cpu and memory quantities."""
    return all(
        quantity((a.get(part) or {}).get(r)) == quantity((b.get(part) or {}).get(r))
        and (r in (a.get(part) or {})) == (r in (b.get(part) or {}))
        for part in ("requests", "limits")
        for r in RESIZABLE
    )
