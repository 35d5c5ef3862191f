"""Deployment (apps/v1): recorded, not driven (docs/kinds.md). Streams ``Deployment/<ns>/<name>/observed``
(the watcher: the Deployment, its ReplicaSets and their pods) and ``/recorded`` (the recorder's trail,
``rules.py``)."""

from __future__ import annotations

from typing import Any

from services.kinds.base import Kind, Watched, Workload, own_name, owned_by
from services.kinds.deployment.rules import HASH_LABEL, REVISION_KIND, DeploymentTrail
from services.kinds.deployment.rules import KIND as NAME


def route(kind: str, obj: dict[str, Any]) -> Workload | None:
    """The Deployment, the ReplicaSets it controls, and their pods: a ReplicaSet of a Deployment is named
    ``<deployment>-<pod-template-hash>``, so a pod's Deployment is read from its owner's name and its
    hash label without looking the ReplicaSet up."""
    if kind == NAME:
        return own_name(obj)
    namespace = own_name(obj)[0]
    if kind == REVISION_KIND:
        owner = owned_by(obj, NAME, "apps")
        return (namespace, owner) if owner is not None else None
    if kind != "Pod":
        return None
    replicaset = owned_by(obj, REVISION_KIND, "apps")
    hash_ = ((obj.get("metadata") or {}).get("labels") or {}).get(HASH_LABEL)
    if replicaset is None or not hash_ or not replicaset.endswith(f"-{hash_}"):
        return None
    return namespace, replicaset[: -len(hash_) - 1]


KIND = Kind(
    name=NAME,
    driven=False,
    watches=(
        Watched(NAME, "apps", "list_deployment_for_all_namespaces"),
        Watched(REVISION_KIND, "apps", "list_replica_set_for_all_namespaces"),
    ),
    route=route,
    revision_label=HASH_LABEL,
    suffixes=("observed", "recorded"),
    trail=DeploymentTrail,
)
