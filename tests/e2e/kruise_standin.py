"""A test-side stand-in for OpenKruise's CloneSet controller, driving a CloneSet on simcluster through the
Kubernetes API the way kruise-manager does, so the shadow mode has someone else's rollout to record.

It writes what OpenKruise writes: pods named ``<cloneset>-<instance id>`` with the
``apps.kruise.io/cloneset-instance-id`` and ``controller-revision-hash`` labels (the full revision name,
hashed differently from rollbook, as OpenKruise's Go JSON hash is), the lifecycle label, the
``InPlaceUpdateReady`` readiness gate and condition, the controller owner reference; the CloneSet status
through its status subresource; an in-place update as OpenKruise's three writes (condition False, then
revision label + ``apps.kruise.io/inplace-update-state`` + images, then condition True once the kubelet
restarted the containers on the new images).

Like kruise-manager, which acts on its informer cache, it waits after each write until the watcher has
recorded it (the write's resourceVersion in the event store), so the observed order is the order acted.
It keeps no limit of its own: the test chooses the batches, so it can exceed maxUnavailable on purpose.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import asyncpg
from kubernetes_asyncio import client

from services.infra.database import asyncpg_url
from tests.e2e.cluster import GROUP, PLURAL, VERSION
from tests.plugins.stack import wait_for

GATE = "InPlaceUpdateReady"
REVISION_LABEL = "controller-revision-hash"
INSTANCE_LABEL = "apps.kruise.io/cloneset-instance-id"
LIFECYCLE_LABEL = "lifecycle.apps.kruise.io/state"
STATE_ANNOTATION = "apps.kruise.io/inplace-update-state"


def kruise_revision(name: str, template: dict[str, Any]) -> str:
    """A revision name as OpenKruise's would look (``<name>-<10 characters>``), from another hash than
    rollbook's, as OpenKruise's differ in practice (Go's JSON field order)."""
    return f"{name}-{hashlib.sha256(json.dumps(template).encode()).hexdigest()[:10]}"


def _descending(timestamp: str) -> tuple[int, ...]:
    """A sort key putting later RFC 3339 timestamps first."""
    return tuple(-ord(ch) for ch in timestamp)


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


class KruiseStandIn:
    def __init__(
        self, api: client.ApiClient, database_url: str, name: str, namespace: str = "default"
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.database_url = database_url
        self.name, self.namespace = name, namespace
        self.cloneset: dict[str, Any] = {}
        self.revisions: list[str] = []  # revision names in order of creation

    # --- waiting on the watcher ----------------------------------------------------------------------

    async def observed(self, obj: dict[str, Any]) -> None:
        """Wait until the watcher recorded this version of the object or a later one (as kruise-manager
        waits for its informer to see its own writes): a state superseded within one append is stored
        as its successor (simcluster's resourceVersions are numbers, so "later" can be compared)."""
        uid, version = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]

        async def recorded() -> bool:
            connection = await asyncpg.connect(asyncpg_url(self.database_url))
            try:
                return bool(
                    await connection.fetchval(
                        "SELECT count(*) FROM events WHERE type = 'ObjectObserved'"
                        " AND payload->>'uid' = $1"
                        " AND (payload->>'resource_version')::bigint >= $2",
                        uid,
                        int(version),
                    )
                )
            finally:
                await connection.close()

        await wait_for(recorded, within=60, what=f"the watcher to record {obj['metadata']['name']}@{version}")

    # --- the CloneSet --------------------------------------------------------------------------------

    @property
    def update_revision(self) -> str:
        return kruise_revision(self.name, self.cloneset["spec"]["template"])

    async def create(self, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = self.namespace
        self.cloneset = await self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, obj
        )
        await self.observed(self.cloneset)

    async def set_image(self, image: str) -> None:
        containers = copy.deepcopy(self.cloneset["spec"]["template"]["spec"]["containers"])
        containers[0]["image"] = image
        self.cloneset = await self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name,
            {"spec": {"template": {"spec": {"containers": containers}}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )  # fmt: skip
        await self.observed(self.cloneset)

    async def pods(self) -> dict[str, dict[str, Any]]:
        response: Any = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"app={self.name}", _preload_content=False
        )
        items = json.loads(await response.read()).get("items") or []
        return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}

    async def write_status(self) -> None:
        """The status OpenKruise reports: counts by revision, update and current revision (current moves
        to the update revision once every pod is on it)."""
        update = self.update_revision
        if update not in self.revisions:
            self.revisions.append(update)
        pods = list((await self.pods()).values())
        updated = [p for p in pods if p["metadata"]["labels"].get(REVISION_LABEL) == update]
        ready = [p for p in updated if _condition(p, "Ready") == "True"]
        replicas = int(self.cloneset["spec"]["replicas"])
        previous = (self.cloneset.get("status") or {}).get("currentRevision")
        current = update if len(updated) == len(pods) == replicas or previous is None else previous
        status = {
            "observedGeneration": self.cloneset["metadata"]["generation"],
            "replicas": len(pods),
            "readyReplicas": sum(1 for p in pods if _condition(p, "Ready") == "True"),
            "availableReplicas": sum(1 for p in pods if _condition(p, "Ready") == "True"),
            "updatedReplicas": len(updated),
            "updatedReadyReplicas": len(ready),
            "updateRevision": update,
            "currentRevision": current,
            "expectedUpdatedReplicas": replicas,
        }
        self.cloneset = await self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURAL, self.name, {"status": status},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )  # fmt: skip
        await self.observed(self.cloneset)

    # --- pods ----------------------------------------------------------------------------------------

    async def update_candidates(self) -> list[str]:
        """Pods not at the update revision, in OpenKruise's order for ready pods (Kubernetes' ActivePods
        ranking): the one that became Ready most recently first, then more restarts, then the newest;
        the name breaks full ties, as rollbook does (OpenKruise leaves them unordered)."""
        update = self.update_revision
        old = [
            p for p in (await self.pods()).values() if p["metadata"]["labels"].get(REVISION_LABEL) != update
        ]

        def rank(pod: dict[str, Any]) -> tuple[Any, ...]:
            ready_since = next(
                (
                    c.get("lastTransitionTime") or ""
                    for c in pod["status"].get("conditions") or []
                    if c["type"] == "Ready"
                ),
                "",
            )
            restarts = max(
                (s.get("restartCount") or 0 for s in pod["status"].get("containerStatuses") or []), default=0
            )
            return (
                _descending(ready_since),
                -restarts,
                _descending(pod["metadata"]["creationTimestamp"]),
                pod["metadata"]["name"],
            )

        return [p["metadata"]["name"] for p in sorted(old, key=rank)]

    async def create_pod(self, instance: str) -> str:
        """A pod at the update revision, as OpenKruise builds it; in service once the kubelet runs it and
        the controller has set its readiness gate."""
        template = self.cloneset["spec"]["template"]
        name = f"{self.name}-{instance}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {
                    **template["metadata"]["labels"],
                    REVISION_LABEL: self.update_revision,
                    "pod-template-hash": self.update_revision.rsplit("-", 1)[-1],
                    INSTANCE_LABEL: instance,
                    LIFECYCLE_LABEL: "Normal",
                },
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "CloneSet",
                        "name": self.name,
                        "uid": self.cloneset["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {**copy.deepcopy(template["spec"]), "readinessGates": [{"conditionType": GATE}]},
        }
        response: Any = await self.core.create_namespaced_pod(self.namespace, pod, _preload_content=False)
        await self.observed(json.loads(await response.read()))
        await self._set_gate(name, True)
        return name

    async def _set_gate(self, pod: str, ready: bool) -> dict[str, Any]:
        """Write the InPlaceUpdateReady condition (status subresource), waiting for the kubelet first when
        it goes True: the containers must run the pod's images."""
        if ready:
            await wait_for(
                lambda: self._running_spec_images(pod), within=30, what=f"{pod} running its images"
            )
        current = (await self.pods())[pod]
        conditions = [c for c in current["status"].get("conditions") or [] if c.get("type") != GATE]
        conditions.append(
            {"type": GATE, "status": str(ready), "reason": "" if ready else "StartInPlaceUpdate"}
        )
        response: Any = await self.core.patch_namespaced_pod_status(
            pod, self.namespace, {"status": {"conditions": conditions}}, _preload_content=False
        )
        patched: dict[str, Any] = json.loads(await response.read())
        await self.observed(patched)
        if ready:  # the kubelet folds the gate into Ready
            await wait_for(lambda: self._ready(pod), within=30, what=f"{pod} Ready")
        return patched

    async def _running_spec_images(self, pod: str) -> bool:
        current = (await self.pods()).get(pod) or {}
        wanted = {c["name"]: c["image"] for c in current.get("spec", {}).get("containers") or []}
        statuses = {c["name"]: c for c in (current.get("status") or {}).get("containerStatuses") or []}
        return bool(wanted) and all(
            statuses.get(n, {}).get("image") == image and statuses.get(n, {}).get("ready")
            for n, image in wanted.items()
        )

    async def _ready(self, pod: str) -> dict[str, Any] | None:
        current = (await self.pods()).get(pod)
        if current is not None and _condition(current, "Ready") == "True":
            await self.observed(current)
            return current
        return None

    async def start_in_place(self, pod: str) -> None:
        """OpenKruise's first write: InPlaceUpdateReady=False, so the pod leaves service."""
        await self._set_gate(pod, False)

    async def patch_in_place(self, pod: str) -> None:
        """The pod update: revision labels, the in-place state annotation, the template's images."""
        current = (await self.pods())[pod]
        images = {c["name"]: c["image"] for c in self.cloneset["spec"]["template"]["spec"]["containers"]}
        state = {
            "revision": self.update_revision,
            "updateTimestamp": self.cloneset["metadata"].get("creationTimestamp"),
            "lastContainerStatuses": {
                s["name"]: {"imageID": s.get("imageID", "")}
                for s in current["status"].get("containerStatuses") or []
            },
            "updateImages": True,
        }
        patch = {
            "metadata": {
                "labels": {
                    REVISION_LABEL: self.update_revision,
                    "pod-template-hash": self.update_revision.rsplit("-", 1)[-1],
                    LIFECYCLE_LABEL: "Updating",
                },
                "annotations": {STATE_ANNOTATION: json.dumps(state)},
            },
            "spec": {"containers": [{"name": n, "image": i} for n, i in images.items()]},
        }
        response: Any = await self.core.patch_namespaced_pod(
            pod, self.namespace, patch, _preload_content=False
        )
        await self.observed(json.loads(await response.read()))

    async def finish_in_place(self, pod: str) -> None:
        """Once the kubelet runs the new images: InPlaceUpdateReady=True, lifecycle Normal."""
        await self._set_gate(pod, True)
        response: Any = await self.core.patch_namespaced_pod(
            pod, self.namespace, {"metadata": {"labels": {LIFECYCLE_LABEL: "Normal"}}}, _preload_content=False
        )
        await self.observed(json.loads(await response.read()))

    async def update_in_place(self, *batch: str) -> None:
        """One batch: every pod of it leaves service, is patched, and comes back."""
        for pod in batch:
            await self.start_in_place(pod)
        for pod in batch:
            await self.patch_in_place(pod)
        for pod in batch:
            await self.finish_in_place(pod)
        await self.write_status()
