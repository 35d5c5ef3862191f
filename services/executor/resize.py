"""The executor's ``resize`` action: container resources written through ``pods/resize`` (Kubernetes 1.33+).

- The subresource is discovered, not assumed: the core API's resource list must name ``pods/resize``
  (``GET /api/v1``); a cluster that does not serve it fails the action with that reason, not retried (the
  planner then recreates the pod once the resize is overdue, services/kinds/cloneset/rules/update.py).
- Idempotent: a pod whose spec has the target resources already reports the action ``already_applied``.
- The write names the pod's uid as precondition (a replaced pod is refused, 422) and carries only the
  containers' resources: pods/resize keeps nothing else of a write (no action id annotation, so the
  planner's expectation looks at the resources themselves).
"""

from __future__ import annotations

import time

from kubernetes_asyncio import client

from services.executor.pods import ActionFailed, read_target_pod
from services.kinds.cloneset.actions import ResizePod, uid_of
from services.model import pod_resize
from services.model.events import PodActionRequested

RESIZE_SUBRESOURCE = "pods/resize"
# A negative discovery answer is asked again after this long (the cluster may be upgraded meanwhile).
_REDISCOVER_SECONDS = 60.0


class ResizeDiscovery:
    """Whether the cluster serves pods/resize, asked once (a yes is kept; a no is asked again later)."""

    def __init__(self) -> None:
        self._served = False
        self._asked_at: float | None = None

    async def served(self, core: client.CoreV1Api) -> bool:
        now = time.monotonic()
        if self._served or (self._asked_at is not None and now - self._asked_at < _REDISCOVER_SECONDS):
            return self._served
        resources = await core.get_api_resources()
        self._served = any(r.name == RESIZE_SUBRESOURCE for r in resources.resources or [])
        self._asked_at = now
        return self._served


async def apply_resize(
    core: client.CoreV1Api, discovery: ResizeDiscovery, request: PodActionRequested, action: ResizePod
) -> tuple[str | None, bool]:
    """Resize the pod's containers to ``action.resources``; (uid, already applied)."""
    targets = action.resources
    if not targets:
        raise ActionFailed("resize: no container resources in the request")
    if not await discovery.served(core):
        raise ActionFailed("the cluster does not serve pods/resize (in-place pod resize, Kubernetes 1.33+)")
    pod = await read_target_pod(core, request, uid_of(action))
    uid = (pod.get("metadata") or {}).get("uid")
    if pod_resize.spec_matches(pod, targets):
        return uid, True
    body = {"metadata": {"uid": uid}, **pod_resize.body(targets)}
    await core.patch_namespaced_pod_resize(request.pod, request.namespace, body)
    return uid, False
