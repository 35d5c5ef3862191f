"""Build CloneSets, pods and revisions as the Kubernetes API returns them, for planner tests."""

from __future__ import annotations

import copy
from typing import Any

from services.kinds.cloneset.rules import revisions
from services.kinds.cloneset.rules.construct import new_pod, new_pvcs
from services.kinds.cloneset.rules.model import PlanInput
from services.kinds.cloneset.rules.spec import resolve

NOW = "2026-11-30T12:00:00Z"
EARLIER = "2026-11-30T11:00:00Z"


def cloneset(
    name: str = "sample",
    replicas: int | None = 5,
    image: str = "nginx:alpine",
    strategy: dict[str, Any] | None = None,
    scale: dict[str, Any] | None = None,
    claims: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
    **spec_extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "sample"}},
        "template": {
            "metadata": {"labels": {"app": "sample"}},
            "spec": {"containers": [{"name": "nginx", "image": image}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    if strategy is not None:
        spec["updateStrategy"] = strategy
    if scale is not None:
        spec["scaleStrategy"] = scale
    if claims is not None:
        spec["volumeClaimTemplates"] = claims
    spec.update(spec_extra)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": "uid-1", "generation": 1}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": metadata, "spec": spec}


def with_image(cs: dict[str, Any], image: str, container: str = "nginx") -> dict[str, Any]:
    cs = copy.deepcopy(cs)
    for c in cs["spec"]["template"]["spec"]["containers"]:
        if c["name"] == container:
            c["image"] = image
    cs["metadata"]["generation"] += 1
    return cs


def revision_record(cs: dict[str, Any], number: int) -> dict[str, Any]:
    spec = resolve(cs)
    template = cs["spec"]["template"]
    rev = revisions.Revision(
        revisions.revision_name(spec.name, revisions.template_hash(template)),
        number,
        template,
        revisions.canonical_json(template),
    )
    return revisions.revision_object(spec, rev)


def revision_name(cs: dict[str, Any]) -> str:
    return str(revision_record(cs, 1)["metadata"]["name"])


def running_pod(
    cs: dict[str, Any],
    instance_id: str,
    ready: bool = True,
    ready_since: str = EARLIER,
    created: str = EARLIER,
    node: str | None = None,
    phase: str = "Running",
    inplace_ready: bool | None = True,
) -> dict[str, Any]:
    """A pod created by the planner at the CloneSet's current template, then scheduled and started."""
    record = revision_record(cs, 1)
    rev = revisions.read_revisions([record])[0]
    pod = new_pod(resolve(cs), rev, instance_id)
    pod["metadata"]["uid"] = f"pod-uid-{instance_id}"
    pod["metadata"]["creationTimestamp"] = created
    if phase != "Pending" or node:
        pod["spec"]["nodeName"] = node or f"node-{instance_id}"
        pod["metadata"]["labels"]["lifecycle.apps.kruise.io/state"] = "Normal"
    conditions = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ready_since}
    ]
    if inplace_ready is not None:
        conditions.append(
            {
                "type": "InPlaceUpdateReady",
                "status": "True" if inplace_ready else "False",
                "lastTransitionTime": created,
            }
        )
    pod["status"] = {
        "phase": phase,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": f"sha256:{c['image']}",
                "containerID": f"containerd://{instance_id}-0",
                "ready": ready,
                "restartCount": 0,
            }
            for c in pod["spec"]["containers"]
        ],
    }
    return pod


def pvcs_for(cs: dict[str, Any], instance_id: str) -> list[dict[str, Any]]:
    claims = new_pvcs(resolve(cs), instance_id)
    for claim in claims:
        claim["status"] = {"phase": "Bound"}
    return claims


def plan_input(
    cs: dict[str, Any],
    pods: list[dict[str, Any]],
    revs: list[dict[str, Any]] | None = None,
    pvcs: list[dict[str, Any]] | None = None,
    now: str = NOW,
) -> PlanInput:
    import msgspec

    raw = {"cloneSet": cs, "pods": pods, "pvcs": pvcs or [], "revisions": revs or [], "now": now}
    return msgspec.json.decode(msgspec.json.encode(raw), type=PlanInput)


IDS = ["4v6wb", "6wz8m", "k2rd6", "q7xkt", "ql7bn", "b2c4d", "f5g6h", "j7k8l", "m9n2p", "r4s5t"]
