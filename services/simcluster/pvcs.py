"""The simulated PVC binder and protection: new PVCs get the ``kubernetes.io/pvc-protection`` finalizer
(StorageObjectInUseProtection admission), go Pending -> Bound (``spec.volumeName = pvc-<uid>``,
``status.capacity`` = requested) after ``Timing.pvc_bind``, and a deleted PVC goes once no pod uses it
(the pvc-protection controller)."""

from __future__ import annotations

import asyncio
import contextlib

from .errors import ApiError
from .nodes import Clock, Tasks
from .resources import PODS, PVCS, ResourceType
from .store import Key, Obj, Store, WatchEvent, key_of

PVC_PROTECTION = "kubernetes.io/pvc-protection"


class PvcBinder:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.tasks = Tasks()
        store.create_hooks.append(self._protect)
        store.listeners.append(self._on_event)

    @staticmethod
    def _protect(rt: ResourceType, obj: Obj) -> None:
        if rt is PVCS:
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if PVC_PROTECTION not in finalizers:
                finalizers.append(PVC_PROTECTION)

    def _on_event(self, event: WatchEvent) -> None:
        if self.tasks.closed:
            return
        if event.resource is PVCS and event.type == "ADDED":
            self.tasks.spawn(self._bind(key_of(event.obj), event.obj["metadata"]["uid"]))
        elif (
            event.resource is PVCS
            and event.type == "MODIFIED"
            and event.obj["metadata"].get("deletionTimestamp")
        ):
            self.tasks.spawn(self._release(*key_of(event.obj)))
        elif event.resource is PODS and event.type == "DELETED":
            for claim in claims(event.obj):
                self.tasks.spawn(self._release(key_of(event.obj)[0], claim))

    async def _release(self, namespace: str, name: str) -> None:
        await asyncio.sleep(0)
        pvc = self.store.objects[PVCS].get((namespace, name))
        if pvc is None or not pvc["metadata"].get("deletionTimestamp"):
            return
        if PVC_PROTECTION not in (pvc["metadata"].get("finalizers") or []):
            return
        for (pod_namespace, _), pod in self.store.objects[PODS].items():
            if pod_namespace == namespace and name in claims(pod):
                return  # still in use; checked again when that pod is deleted
        released = dict(pvc)
        released["metadata"] = dict(
            pvc["metadata"], finalizers=[f for f in pvc["metadata"]["finalizers"] if f != PVC_PROTECTION]
        )
        with contextlib.suppress(ApiError):
            self.store.update(PVCS, namespace, name, released, validate=False)

    async def _bind(self, key: Key, uid: str) -> None:
        await self.clock.sleep(self.clock.timing.pvc_bind)
        pvc = self.store.objects[PVCS].get(key)
        if pvc is None or pvc["metadata"]["uid"] != uid or pvc["metadata"].get("deletionTimestamp"):
            return
        spec = dict(pvc.get("spec") or {})
        spec.setdefault("volumeName", f"pvc-{uid}")
        status = {
            "phase": "Bound",
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "capacity": dict((spec.get("resources") or {}).get("requests") or {"storage": "1Gi"}),
        }
        self.store.commit_internal(PVCS, dict(pvc, spec=spec, status=status))

    async def close(self) -> None:
        await self.tasks.close()


def claims(pod: Obj) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(v, dict) and (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]
