"""The executor's SidecarSet half: the in-place sidecar upgrade of one pod and the SidecarSet status write
(docs/sidecarset.md, "Upgrade in place").

- ``updateSidecarInPlace`` is a strategic merge patch of the pod: the sidecar containers' images (merged
  by container name, so app containers are untouched and only the sidecars restart), the pod's
  ``kruise.io/sidecarset-hash`` entry and ``kruise.io/sidecarset-inplace-update-state`` entry for this
  SidecarSet, and the action id in ``rollbook.io/sidecarset-action-id`` in the same call (once in effect:
  a pod already carrying the action id is reported ``already_applied``).
- The two JSON annotations hold entries of every SidecarSet on the pod. The planner computed its entry
  from the pod it observed; the executor re-reads the pod and merges that entry into the annotation as it
  is now, with the pod's resourceVersion as precondition, so another SidecarSet's concurrent upgrade is
  never lost (a 409 means re-read and merge again).
- SidecarSet status goes through the cluster-scoped status subresource (merge patch).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.domain import kube
from services.domain.events import PodActionRequested, StatusPlanned
from services.domain.sidecarset import HASH_ANNOTATION
from services.domain.sidecarset_streams import (
    INPLACE_STATE_ANNOTATION,
    SIDECARSET_ACTION_ANNOTATION,
    SIDECARSET_GROUP,
    SIDECARSET_PLURAL,
    SIDECARSET_VERSION,
)

MERGE_PATCH = "application/merge-patch+json"
_CONFLICT_RETRIES = 8
# The per-SidecarSet JSON annotations whose other entries must survive the patch.
_KEYED_ANNOTATIONS = (HASH_ANNOTATION, INPLACE_STATE_ANNOTATION)


class SidecarActionFailed(Exception):
    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


def _json_object(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def merged_patch(planned: dict[str, Any], pod: dict[str, Any], sidecarset: str) -> dict[str, Any]:
    """The planner's patch with its per-SidecarSet annotations re-based on ``pod`` as it is now: only this
    SidecarSet's entry is taken from the plan, every other entry stays as the pod has it."""
    patch = copy.deepcopy(planned)
    annotations = (patch.get("metadata") or {}).get("annotations") or {}
    current = (pod.get("metadata") or {}).get("annotations") or {}
    for key in _KEYED_ANNOTATIONS:
        if key not in annotations:
            continue
        ours = _json_object(annotations[key]).get(sidecarset)
        entries = _json_object(current.get(key))
        if ours is not None:
            entries[sidecarset] = ours
        sort = key == INPLACE_STATE_ANNOTATION
        annotations[key] = json.dumps(entries, separators=(",", ":"), sort_keys=sort)
    return patch


async def apply_sidecar_upgrade(
    core: client.CoreV1Api, request: PodActionRequested
) -> tuple[str | None, bool]:
    """Upgrade one pod's sidecars in place; returns (pod uid, whether it had already been applied)."""
    details = request.details
    sidecarset = str(details.get("sidecarSet") or "")
    for _ in range(_CONFLICT_RETRIES):
        try:
            pod = await kube.raw_json(
                await core.read_namespaced_pod(request.pod, request.namespace, _preload_content=False)
            )
        except ApiException as error:
            if error.status == 404:
                raise SidecarActionFailed(f"pod {request.namespace}/{request.pod} not found") from None
            raise
        metadata = pod.get("metadata") or {}
        uid = details.get("uid")
        if uid and metadata.get("uid") != uid:
            raise SidecarActionFailed(
                f"pod {request.namespace}/{request.pod} was replaced (uid {uid} is gone)"
            )
        if (metadata.get("annotations") or {}).get(SIDECARSET_ACTION_ANNOTATION) == request.action_id:
            return metadata.get("uid"), True
        body = merged_patch(details.get("patch") or {}, pod, sidecarset)
        body_metadata = body.setdefault("metadata", {})
        body_metadata.setdefault("annotations", {})[SIDECARSET_ACTION_ANNOTATION] = request.action_id
        body_metadata["resourceVersion"] = metadata.get("resourceVersion")
        try:
            await core.patch_namespaced_pod(request.pod, request.namespace, body)  # strategic merge
            return metadata.get("uid"), False
        except ApiException as error:
            if error.status != 409:
                raise
    raise SidecarActionFailed("kept conflicting with other writers", retryable=True)


async def write_sidecarset_status(custom: client.CustomObjectsApi, planned: StatusPlanned) -> bool:
    """Write the SidecarSet's status; False when the SidecarSet is gone."""
    try:
        await custom.patch_cluster_custom_object_status(
            SIDECARSET_GROUP,
            SIDECARSET_VERSION,
            SIDECARSET_PLURAL,
            planned.name,
            {"status": planned.status},
            _content_type=MERGE_PATCH,  # type: ignore[call-arg]
        )
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
