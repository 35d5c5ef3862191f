"""What the CloneSet and SidecarSet halves of the executor share: the failure an action reports, the
pod read that checks the targeted incarnation, and the API constants."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.model.cloneset import INPLACE_STATE_ANNOTATION
from services.model.events import PodActionRequested
from services.model.streams import ACTION_ID_ANNOTATION

MERGE_PATCH = "application/merge-patch+json"
# A patch computed from a resourceVersion someone else changed is re-read and retried this many times.
CONFLICT_RETRIES = 8


class ActionFailed(Exception):
    """The action cannot be carried out; ``retryable`` says whether trying later could help."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


async def read_target_pod(
    core: client.CoreV1Api, request: PodActionRequested, uid: str | None
) -> dict[str, Any]:
    """The pod an action targets, as the API returns it; ActionFailed when it is gone or was replaced
    by a new incarnation (``uid``, the one the action names)."""
    try:
        pod = await kube.read_namespaced_pod(api_of(core), request.pod, request.namespace)
    except ApiException as error:
        if error.status == 404:
            raise ActionFailed(f"pod {request.namespace}/{request.pod} not found") from None
        raise
    if uid and (pod.get("metadata") or {}).get("uid") != uid:
        raise ActionFailed(f"pod {request.namespace}/{request.pod} was replaced (uid {uid} is gone)")
    return pod


def api_of(core: client.CoreV1Api) -> client.ApiClient:
    """The ApiClient a generated API object sends through (the calls of ``services.infra.kube`` take it)."""
    api: client.ApiClient = core.api_client  # type: ignore[attr-defined]  # set untyped by the generated class
    return api


def patch_applied(pod: dict[str, Any], action_id: str, patch: dict[str, Any]) -> bool:
    """The pod shows this patch action's effect: its id (the last action applied to the pod), or the
    in-place update state its patch writes. The state is written with the spec, in the same patch, and
    names this update alone (the round's revision and updateTimestamp, the imageIDs before it, its
    container batch record); it stays on the pod after the planner's markReady has put its own id in
    place of this one's, so a late redelivery still finds its update done and does not take the pod
    out of service again."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ACTION_ID_ANNOTATION) == action_id:
        return True
    written = ((patch.get("metadata") or {}).get("annotations") or {}).get(INPLACE_STATE_ANNOTATION)
    return isinstance(written, str) and annotations.get(INPLACE_STATE_ANNOTATION) == written
