"""What the CloneSet and SidecarSet halves of the executor share: the failure an action reports, the
pod read that checks the targeted incarnation, and the API constants."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.model.events import PodActionRequested

MERGE_PATCH = "application/merge-patch+json"
# A patch computed from a resourceVersion someone else changed is re-read and retried this many times.
CONFLICT_RETRIES = 8


class ActionFailed(Exception):
    """The action cannot be carried out; ``retryable`` says whether trying later could help."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


async def read_target_pod(core: client.CoreV1Api, request: PodActionRequested) -> dict[str, Any]:
    """The pod an action targets, as the API returns it; ActionFailed when it is gone or was replaced
    by a new incarnation (the request's ``details.uid``)."""
    try:
        pod = await kube.read_namespaced_pod(api_of(core), request.pod, request.namespace)
    except ApiException as error:
        if error.status == 404:
            raise ActionFailed(f"pod {request.namespace}/{request.pod} not found") from None
        raise
    uid = request.details.get("uid")
    if uid and (pod.get("metadata") or {}).get("uid") != uid:
        raise ActionFailed(f"pod {request.namespace}/{request.pod} was replaced (uid {uid} is gone)")
    return pod


def api_of(core: client.CoreV1Api) -> client.ApiClient:
    """The ApiClient a generated API object sends through (the calls of ``services.infra.kube`` take it)."""
    api: client.ApiClient = core.api_client  # type: ignore[attr-defined]  # set untyped by the generated class
    return api


def has_condition(pod: dict[str, Any], condition: dict[str, Any]) -> bool:
    """The pod carries ``condition`` already (same type, status and reason): writing it again would change
    nothing but its lastTransitionTime, which must move only on a transition. So a mark action retried
    after its status write landed (its metadata write answered 429 or 500) retries only what failed."""
    wanted = {key: condition.get(key) for key in ("type", "status", "reason")}
    return any(
        {key: current.get(key) for key in wanted} == wanted
        for current in (pod.get("status") or {}).get("conditions") or []
    )
