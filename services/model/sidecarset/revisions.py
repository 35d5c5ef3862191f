"""Reading back what a pod got: the per-SidecarSet revisions recorded on it and the injected list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.model.sidecarset.core import (
    HASH_ANNOTATION,
    HASH_WITHOUT_IMAGE_ANNOTATION,
    INJECTED_LIST_ANNOTATION,
    PodSidecarRevision,
    json_object,
)


def pod_sidecar_revisions(pod: Mapping[str, Any]) -> dict[str, PodSidecarRevision]:
    """Per SidecarSet name, the revision recorded on the pod at injection (or by a later upgrade).

    Reads the JSON form and OpenKruise's older flat ``{"name": "hash"}`` form.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    hashes = json_object(annotations.get(HASH_ANNOTATION))
    without = json_object(annotations.get(HASH_WITHOUT_IMAGE_ANNOTATION))
    result: dict[str, PodSidecarRevision] = {}
    for name, entry in hashes.items():
        other = without.get(name)
        other_hash = other.get("hash", "") if isinstance(other, dict) else str(other or "")
        if isinstance(entry, dict):
            result[name] = PodSidecarRevision(
                sidecarset=name,
                hash=str(entry.get("hash", "")),
                hash_without_image=other_hash,
                sidecars=list(entry.get("sidecarList") or []),
                controller_revision=str(entry.get("controllerRevision", "")),
                update_timestamp=str(entry.get("updateTimestamp", "")),
            )
        else:
            result[name] = PodSidecarRevision(sidecarset=name, hash=str(entry), hash_without_image=other_hash)
    return result


def injected_sidecarsets(pod: Mapping[str, Any]) -> list[str]:
    """Names in ``kruise.io/sidecarset-injected-list``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return [n for n in annotations.get(INJECTED_LIST_ANNOTATION, "").split(",") if n]
