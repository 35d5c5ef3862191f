"""The executor's SidecarSet half: the in-place sidecar upgrade of one pod and the SidecarSet status write
(docs/sidecarset.md, "Upgrade in place").

- ``updateSidecarInPlace`` is a strategic merge patch of the pod: the sidecar containers' images (merged
  by container name, so app containers are untouched and only the sidecars restart; native sidecars'
  under ``spec.initContainers``, merged the same way), the pod's
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

from services.executor.pods import CONFLICT_RETRIES, MERGE_PATCH, ActionFailed, api_of, read_target_pod
from services.infra import kube
from services.kinds.sidecarset.actions import UpdateSidecarInPlace
from services.model.events import PodActionRequested, StatusPlanned
from services.model.sidecarset import HASH_ANNOTATION, json_object
from services.model.sidecarset_streams import (
    SIDECARSET_ACTION_ANNOTATION,
    SIDECARSET_GROUP,
    SIDECARSET_INPLACE_STATE_ANNOTATION,
    SIDECARSET_PLURAL,
    SIDECARSET_VERSION,
)
from services.model.streams import STATUS_FIELD_MANAGER

# The per-SidecarSet JSON annotations whose other entries must survive the patch.
_KEYED_ANNOTATIONS = (HASH_ANNOTATION, SIDECARSET_INPLACE_STATE_ANNOTATION)


def merged_patch(planned: dict[str, Any], pod: dict[str, Any], sidecarset: str) -> dict[str, Any]:
    """The planner's patch with its per-SidecarSet annotations re-based on ``pod`` as it is now: only this
    SidecarSet's entry is taken from the plan, every other entry stays as the pod has it."""
    patch = copy.deepcopy(planned)
    annotations = (patch.get("metadata") or {}).get("annotations") or {}
    current = (pod.get("metadata") or {}).get("annotations") or {}
    for key in _KEYED_ANNOTATIONS:
        if key not in annotations:
            continue
        ours = json_object(annotations[key]).get(sidecarset)
        entries = json_object(current.get(key))
        if ours is not None:
            entries[sidecarset] = ours
        sort = key == SIDECARSET_INPLACE_STATE_ANNOTATION
        annotations[key] = json.dumps(entries, separators=(",", ":"), sort_keys=sort)
    return patch


async def apply_sidecar_upgrade(
    core: client.CoreV1Api, request: PodActionRequested, action: UpdateSidecarInPlace
) -> tuple[str | None, bool]:
    """Upgrade one pod's sidecars in place; returns (pod uid, whether it had already been applied)."""
    sidecarset = action.sidecar_set
    uid = action.uid if isinstance(action.uid, str) else None
    for _ in range(CONFLICT_RETRIES):
        pod = await read_target_pod(core, request, uid)
        metadata = pod.get("metadata") or {}
        if (metadata.get("annotations") or {}).get(SIDECARSET_ACTION_ANNOTATION) == request.action_id:
            return metadata.get("uid"), True
        body = merged_patch(action.patch, pod, sidecarset)
        body_metadata = body.setdefault("metadata", {})
        body_metadata.setdefault("annotations", {})[SIDECARSET_ACTION_ANNOTATION] = request.action_id
        body_metadata["resourceVersion"] = metadata.get("resourceVersion")
        try:
            # strategic merge; the answer is not deserialised into the client's model (unused, costly)
            await kube.patch_namespaced_pod(api_of(core), request.pod, request.namespace, body)
            return metadata.get("uid"), False
        except ApiException as error:
            if error.status != 409:
                raise
    raise ActionFailed("kept conflicting with other writers", retryable=True)


async def write_sidecarset_status(custom: client.CustomObjectsApi, planned: StatusPlanned) -> bool:
    """Write the SidecarSet's status; False when the SidecarSet is gone."""
    try:
        await custom.patch_cluster_custom_object_status(
            SIDECARSET_GROUP,
            SIDECARSET_VERSION,
            SIDECARSET_PLURAL,
            planned.name,
            {"status": planned.status},
            field_manager=STATUS_FIELD_MANAGER,
            _content_type=MERGE_PATCH,  # type: ignore[call-arg]
        )
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
