"""New pods and PVCs (OpenKruise pkg/controller/cloneset/core/cloneset_core.go ``newVersionedPods``,
sync/cloneset_scale.go ``createPods``) and deterministic instance ids."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from typing import Any

from services.kinds.cloneset.rules.lifecycle import PREPARING_NORMAL
from services.kinds.cloneset.rules.names import (
    CLONESET_API_VERSION,
    CLONESET_KIND,
    INPLACE_READY_CONDITION,
    INSTANCE_ID_LABEL,
    KRUISE_POD_READY_CONDITION,
    LIFECYCLE_STATE_LABEL,
    LIFECYCLE_TIMESTAMP_ANNOTATION,
    POD_TEMPLATE_HASH_LABEL,
    REVISION_LABEL,
    SAFE_ALPHABET,
)
from services.kinds.cloneset.rules.revisions import Revision
from services.kinds.cloneset.rules.spec import CloneSetSpec

ID_LENGTH = 5


def owner_reference(spec: CloneSetSpec) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": CLONESET_API_VERSION, "kind": CLONESET_KIND, "name": spec.name}
    if spec.uid:
        ref["uid"] = spec.uid
    ref["controller"] = True
    ref["blockOwnerDeletion"] = True
    return ref


def pod_name(spec: CloneSetSpec, instance_id: str) -> str:
    return f"{spec.name}-{instance_id}"


def pvc_name(claim_template: dict[str, Any], spec: CloneSetSpec, instance_id: str) -> str:
    return f"{claim_template['metadata']['name']}-{spec.name}-{instance_id}"


def generated_ids(seed: bytes, taken: set[str]) -> Iterator[str]:
    """An endless, deterministic stream of fresh 5-character ids: sha256(seed, counter) over the alphabet."""
    counter = 0
    while True:
        digest = hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
        candidate = "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in digest[:ID_LENGTH])
        if candidate not in taken:
            taken.add(candidate)
            yield candidate


def id_seed(spec: CloneSetSpec, taken: set[str]) -> bytes:
    """Derived from the inputs only: the same observation always yields the same ids."""
    text = "\n".join([spec.namespace, spec.name, spec.uid, str(spec.generation), *sorted(taken)])
    return hashlib.sha256(text.encode()).digest()


def new_pod(spec: CloneSetSpec, revision: Revision, instance_id: str, now_text: str = "") -> dict[str, Any]:
    template = copy.deepcopy(revision.template)
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    labels[INSTANCE_ID_LABEL] = instance_id
    labels[REVISION_LABEL] = revision.hash
    labels[POD_TEMPLATE_HASH_LABEL] = revision.hash
    # Every new pod starts PreparingNormal; the refresh moves it to Normal once it is scheduled (or, with
    # a preNormal hook, once the hook is satisfied).
    labels[LIFECYCLE_STATE_LABEL] = PREPARING_NORMAL
    metadata: dict[str, Any] = {
        "name": pod_name(spec, instance_id),
        "generateName": f"{spec.name}-",
        "namespace": spec.namespace,
        "labels": labels,
    }
    annotations = dict(template_meta.get("annotations") or {})
    if now_text:
        annotations[LIFECYCLE_TIMESTAMP_ANNOTATION] = now_text
    if annotations:
        metadata["annotations"] = annotations
    if template_meta.get("finalizers"):
        metadata["finalizers"] = list(template_meta["finalizers"])
    metadata["ownerReferences"] = [owner_reference(spec)]
    pod_spec = template.get("spec") or {}
    gates = list(pod_spec.get("readinessGates") or [])
    if not any(g.get("conditionType") == INPLACE_READY_CONDITION for g in gates):
        gates.append({"conditionType": INPLACE_READY_CONDITION})
    if _marks_not_ready(spec) and not any(
        g.get("conditionType") == KRUISE_POD_READY_CONDITION for g in gates
    ):
        # OpenKruise's pod webhook adds this gate to every pod it owns; rollbook adds it only when a
        # lifecycle hook needs it (markPodNotReady), so pods without hooks stay as they were.
        gates.append({"conditionType": KRUISE_POD_READY_CONDITION})
    pod_spec["readinessGates"] = gates
    if spec.volume_claim_templates:
        claims = [
            {
                "name": t["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": pvc_name(t, spec, instance_id)},
            }
            for t in spec.volume_claim_templates
        ]
        claim_names = {c["name"] for c in claims}
        pod_spec["volumes"] = claims + [
            v for v in pod_spec.get("volumes") or [] if v.get("name") not in claim_names
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _marks_not_ready(spec: CloneSetSpec) -> bool:
    hooks = spec.lifecycle
    if hooks is None:
        return False
    return any(h is not None and h.mark_not_ready for h in (hooks.pre_delete, hooks.in_place_update))


def new_pvcs(spec: CloneSetSpec, instance_id: str) -> list[dict[str, Any]]:
    claims = []
    match_labels = (spec.selector or {}).get("matchLabels") or {}
    for template in spec.volume_claim_templates:
        template_meta = template.get("metadata") or {}
        labels = {**(template_meta.get("labels") or {}), **match_labels, INSTANCE_ID_LABEL: instance_id}
        metadata: dict[str, Any] = {
            "name": pvc_name(template, spec, instance_id),
            "namespace": spec.namespace,
            "labels": labels,
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        metadata["ownerReferences"] = [owner_reference(spec)]
        claims.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": metadata,
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
        )
    return claims
