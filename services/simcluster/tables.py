"""`meta.k8s.io/v1` Table responses, the server-side printing `kubectl get` asks for
(`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`). Columns follow kubectl's for pods and the
OpenKruise CRDs' additionalPrinterColumns for CloneSets and SidecarSets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import ApiError
from .resources import (
    CLONESETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    PVCS,
    REPLICASETS,
    SIDECARSETS,
    STATEFULSETS,
    ResourceType,
)

Obj = dict[str, Any]


def _age(obj: Obj) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int(
        (
            datetime.now(UTC) - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        ).total_seconds()
    )
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600 * 3:
        return f"{seconds // 60}m"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def pod_status_reason(pod: Obj) -> str:
    """The STATUS column, computed as kubectl's printer does."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for container in status.get("initContainerStatuses") or []:
        state = container.get("state") or {}
        if container.get("name") in _native_sidecar_names(pod) and container.get("started"):
            continue  # a started native sidecar does not hold initialization (kubectl's printPod)
        if "terminated" in state and state["terminated"].get("exitCode", 0) == 0:
            continue
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
            break
    has_running = False
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif "running" in state and container.get("ready"):
            has_running = True
    if reason == "Completed" and has_running:
        reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return str(reason)


def _native_sidecar_names(pod: Obj) -> set[str]:
    return {
        str(c.get("name"))
        for c in (pod.get("spec") or {}).get("initContainers") or []
        if c.get("restartPolicy") == "Always"
    }


def _pod_row(pod: Obj) -> list[Any]:
    status = pod.get("status") or {}
    native = _native_sidecar_names(pod)
    # Native sidecars count in READY and RESTARTS beside the containers, as kubectl's printPod counts them.
    sidecars = [c for c in status.get("initContainerStatuses") or [] if c.get("name") in native]
    statuses = [*sidecars, *(status.get("containerStatuses") or [])]
    total = len((pod.get("spec") or {}).get("containers") or []) + len(native)
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    gates_text = (
        f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"
        if gates
        else "<none>"
    )
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_reason(pod),
        restarts,
        _age(pod),
        (pod.get("status") or {}).get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        gates_text,
    ]


def _status(obj: Obj, field: str) -> Any:
    value = (obj.get("status") or {}).get(field)
    return 0 if value is None else value


Column = tuple[str, str, str, int]  # name, type, description, priority
_COLUMNS: dict[ResourceType, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    PODS: (
        [
            ("Name", "string", "Name must be unique within a namespace.", 0),
            ("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
            ("Status", "string", "The aggregate status of the containers in this pod.", 0),
            ("Restarts", "integer", "The number of times the containers in this pod have been restarted.", 0),
            ("Age", "string", "CreationTimestamp", 0),
            ("IP", "string", "IP address allocated to the pod.", 1),
            ("Node", "string", "Name of the node this pod is bound to.", 1),
            ("Nominated Node", "string", "Nominated node name.", 1),
            ("Readiness Gates", "string", "Readiness gates that are True.", 1),
        ],
        _pod_row,
    ),
    CLONESETS: (
        [
            ("Name", "string", "Name", 0),
            ("Desired", "integer", "The desired number of pods.", 0),
            ("Updated", "integer", "The number of pods updated.", 0),
            ("Updated_Ready", "integer", "The number of pods updated and ready.", 0),
            ("Ready", "integer", "The number of pods ready.", 0),
            ("Total", "integer", "The number of currently all pods.", 0),
            ("Age", "date", "CreationTimestamp", 0),
        ],
        lambda o: [
            o["metadata"]["name"],
            (o.get("spec") or {}).get("replicas", 1),
            _status(o, "updatedReplicas"),
            _status(o, "updatedReadyReplicas"),
            _status(o, "readyReplicas"),
            _status(o, "replicas"),
            _age(o),
        ],
    ),
    SIDECARSETS: (
        [
            ("Name", "string", "Name", 0),
            ("Matched", "integer", "The number of pods matched.", 0),
            ("Updated", "integer", "The number of pods matched and updated.", 0),
            ("Ready", "integer", "The number of pods matched and ready.", 0),
            ("Age", "date", "CreationTimestamp", 0),
        ],
        lambda o: [
            o["metadata"]["name"],
            _status(o, "matchedPods"),
            _status(o, "updatedPods"),
            _status(o, "readyPods"),
            _age(o),
        ],
    ),
    PVCS: (
        [
            ("Name", "string", "Name", 0),
            ("Status", "string", "Phase", 0),
            ("Volume", "string", "Volume", 0),
            ("Capacity", "string", "Capacity", 0),
            ("Access Modes", "string", "Access modes", 0),
            ("StorageClass", "string", "Storage class", 0),
            ("Age", "string", "CreationTimestamp", 0),
        ],
        lambda o: [
            o["metadata"]["name"],
            _status(o, "phase") or "Pending",
            (o.get("spec") or {}).get("volumeName", ""),
            ((o.get("status") or {}).get("capacity") or {}).get("storage", ""),
            ",".join(
                {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX"}.get(m, m)
                for m in (o.get("status") or {}).get("accessModes") or []
            ),
            (o.get("spec") or {}).get("storageClassName", ""),
            _age(o),
        ],
    ),
}


def _images(o: Obj) -> tuple[str, str]:
    containers = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _selector(o: Obj) -> str:
    selector = (o.get("spec") or {}).get("selector") or {}
    return ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())


_WIDE = [
    ("Containers", "string", "Names of each container in the template.", 1),
    ("Images", "string", "Images referenced by each container in the template.", 1),
    ("Selector", "string", "Label selector for pods.", 1),
]
# The columns kube-apiserver's printers give the workload kinds (kubectl get deploy/rs/sts/job).
_COLUMNS[DEPLOYMENTS] = (
    [
        ("Name", "string", "Name", 0),
        ("Ready", "string", "Number of the pod with ready state", 0),
        (
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this deployment that have the desired "
            "template spec.",
            0,
        ),
        (
            "Available",
            "string",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this "
            "deployment.",
            0,
        ),
        ("Age", "string", "CreationTimestamp", 0),
        *_WIDE,
    ],
    lambda o: [
        o["metadata"]["name"],
        f"{_status(o, 'readyReplicas')}/{(o.get('spec') or {}).get('replicas', 1)}",
        _status(o, "updatedReplicas"),
        _status(o, "availableReplicas"),
        _age(o),
        *_images(o),
        _selector(o),
    ],
)
_COLUMNS[REPLICASETS] = (
    [
        ("Name", "string", "Name", 0),
        ("Desired", "integer", "Number of desired pods.", 0),
        ("Current", "integer", "Number of actual replicas.", 0),
        ("Ready", "integer", "Number of ready replicas.", 0),
        ("Age", "string", "CreationTimestamp", 0),
        *_WIDE,
    ],
    lambda o: [
        o["metadata"]["name"],
        (o.get("spec") or {}).get("replicas", 1),
        _status(o, "replicas"),
        _status(o, "readyReplicas"),
        _age(o),
        *_images(o),
        _selector(o),
    ],
)
_COLUMNS[STATEFULSETS] = (
    [
        ("Name", "string", "Name", 0),
        ("Ready", "string", "Number of the pod with ready state", 0),
        ("Age", "string", "CreationTimestamp", 0),
        ("Containers", "string", "Names of each container in the template.", 1),
        ("Images", "string", "Images referenced by each container in the template.", 1),
    ],
    lambda o: [
        o["metadata"]["name"],
        f"{_status(o, 'readyReplicas')}/{(o.get('spec') or {}).get('replicas', 1)}",
        _age(o),
        *_images(o),
    ],
)


def _job_row(o: Obj) -> list[Any]:
    completions = (o.get("spec") or {}).get("completions")
    return [
        o["metadata"]["name"],
        f"{_status(o, 'succeeded')}/{completions if completions is not None else 1}",
        _job_duration(o),
        _age(o),
        *_images(o),
        _selector(o),
    ]


def _job_duration(o: Obj) -> str:
    status = o.get("status") or {}
    start, end = status.get("startTime"), status.get("completionTime")
    if not start:
        return ""

    def parse(text: str) -> datetime:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

    seconds = int(((parse(end) if end else datetime.now(UTC)) - parse(start)).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


_COLUMNS[JOBS] = (
    [
        ("Name", "string", "Name", 0),
        ("Completions", "string", "The completion status of the job.", 0),
        ("Duration", "string", "Time required to complete the job.", 0),
        ("Age", "string", "CreationTimestamp", 0),
        *_WIDE,
    ],
    _job_row,
)
_COLUMNS[NAMESPACES] = (
    [
        ("Name", "string", "Name", 0),
        ("Status", "string", "The status of the namespace", 0),
        ("Age", "string", "CreationTimestamp", 0),
    ],
    lambda o: [o["metadata"]["name"], _status(o, "phase") or "Active", _age(o)],
)
_COLUMNS[NODES] = (
    [
        ("Name", "string", "Name", 0),
        ("Status", "string", "The status of the node", 0),
        ("Roles", "string", "The roles of the node", 0),
        ("Age", "string", "CreationTimestamp", 0),
        ("Version", "string", "Kubelet Version", 0),
    ],
    lambda o: [
        o["metadata"]["name"],
        "Ready"
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (o.get("status") or {}).get("conditions") or []
        )
        else "NotReady",
        "<none>",
        _age(o),
        ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
    ],
)


def _involved(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


_COLUMNS[EVENTS] = (
    [
        ("Last Seen", "string", "Time since the event was last seen", 0),
        ("Type", "string", "Normal or Warning", 0),
        ("Reason", "string", "Why the event happened", 0),
        ("Object", "string", "The object the event is about", 0),
        ("Message", "string", "What happened", 0),
    ],
    lambda o: [
        _age(
            {
                "metadata": {
                    "creationTimestamp": o.get("lastTimestamp") or o["metadata"].get("creationTimestamp")
                }
            }
        ),
        o.get("type", ""),
        o.get("reason", ""),
        _involved(o),
        o.get("message", ""),
    ],
)
_DEFAULT: tuple[list[Column], Callable[[Obj], list[Any]]] = (
    [
        ("Name", "string", "Name must be unique within a namespace.", 0),
        ("Age", "string", "CreationTimestamp", 0),
    ],
    lambda o: [o["metadata"]["name"], _age(o)],
)


@dataclass(frozen=True)
class Rendering:
    """How a response is shaped, negotiated from the Accept header: the plain object(s), a
    ``meta.k8s.io`` Table (``include`` = the includeObject query: None, Metadata or Object), or
    PartialObjectMetadata(List)."""

    kind: str = "object"  # object | table | partial
    version: str = "v1"  # meta.k8s.io version of a Table / PartialObjectMetadata
    include: str = "Metadata"


PLAIN = Rendering()
_META_VERSIONS = ("v1", "v1beta1")


def negotiate(accept: str, include_object: str | None = None) -> Rendering:
    """The first alternative of ``accept`` this server can produce (JSON only), as kube-apiserver's
    content negotiation picks it; none at all is 406 NotAcceptable."""
    if not accept.strip():
        return PLAIN
    include = include_object or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise ApiError(
            400, f"includeObject: Unsupported value: {include!r}: supported values: None, Metadata, Object"
        )
    for alternative in accept.split(","):
        media, *raw_params = (p.strip() for p in alternative.split(";"))
        if media not in ("application/json", "application/*", "*/*"):
            continue
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        wanted = params.get("as")
        if wanted is None:
            return PLAIN
        if params.get("g") != "meta.k8s.io" or params.get("v") not in _META_VERSIONS:
            continue
        if wanted == "Table":
            return Rendering("table", params["v"], include)
        if wanted in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return Rendering("partial", params["v"])
    raise ApiError(
        406,
        "only the following media types are accepted: application/json, "
        "application/json;as=Table;g=meta.k8s.io;v=v1, "
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        "NotAcceptable",
    )


def partial(obj: Obj, version: str = "v1") -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj["metadata"],
    }


def partial_list(items: list[Obj], list_meta: dict[str, Any], version: str = "v1") -> Obj:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_meta,
        "items": [partial(o, version) for o in items],
    }


def to_table(
    rt: ResourceType, items: list[Obj], list_meta: dict[str, Any], rendering: Rendering = Rendering("table")
) -> dict[str, Any]:
    columns, row_of = _COLUMNS.get(rt, _DEFAULT)

    def row(obj: Obj) -> Obj:
        out: Obj = {"cells": row_of(obj)}
        if rendering.include == "Object":
            out["object"] = obj
        elif rendering.include == "Metadata":
            out["object"] = partial(obj, rendering.version)
        return out

    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{rendering.version}",
        "metadata": list_meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": typ,
                "format": "name" if name == "Name" else "",
                "description": desc,
                "priority": priority,
            }
            for name, typ, desc, priority in columns
        ],
        "rows": [row(obj) for obj in items],
    }
