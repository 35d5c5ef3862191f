"""Garbage collector: dependents (by ownerReferences) follow their owner's deletion.

A dependent whose owner does not exist (no object with that uid in the dependent's namespace, or
cluster-scoped) is dangling, as kube-controller-manager's garbage collector finds it: with no other
living owner it is deleted (Background), otherwise the dangling reference is removed.

Background (the default): once the owner is gone, each dependent whose owners are all gone is deleted;
a dependent that still has a living owner only loses the dead reference. Foreground: the owner carries
the `foregroundDeletion` finalizer until its dependents are gone. Orphan is handled by the store at delete.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .errors import ApiError
from .resources import ResourceType
from .store import Store, WatchEvent

FOREGROUND = "foregroundDeletion"


class GarbageCollector:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._tasks: set[asyncio.Task[None]] = set()
        store.listeners.append(self._on_event)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.type == "DELETED":
            if self.store.dependents(meta["uid"]):
                self._spawn(self._collect(meta["uid"]))
            for ref in meta.get("ownerReferences") or []:
                owner = self.store.by_uid(ref.get("uid", ""))
                if owner is not None and FOREGROUND in (owner["metadata"].get("finalizers") or []):
                    self._spawn(self._finish_foreground(owner["metadata"]["uid"]))
        else:
            refs = meta.get("ownerReferences")
            if refs and refs != ((event.prev or {}).get("metadata") or {}).get("ownerReferences"):
                dangling = [r.get("uid", "") for r in refs if not self._owner_exists(r.get("uid", ""), meta)]
                if dangling:
                    self._spawn(self._collect_dangling(event.resource, meta["uid"], dangling))
        if (
            event.type != "DELETED"
            and meta.get("deletionTimestamp")
            and FOREGROUND in (meta.get("finalizers") or [])
        ):
            prev_finalizers = ((event.prev or {}).get("metadata") or {}).get("finalizers") or []
            if FOREGROUND not in prev_finalizers:
                self._spawn(self._foreground(meta["uid"]))

    def _owner_exists(self, uid: str, dependent_meta: dict[str, Any]) -> bool:
        owner = self.store.by_uid(uid)
        if owner is None:
            return False
        owner_ns = owner["metadata"].get("namespace")
        return not owner_ns or owner_ns == dependent_meta.get("namespace")

    async def _collect_dangling(self, rt: ResourceType, uid: str, owner_uids: list[str]) -> None:
        await asyncio.sleep(0)
        dependent = self.store.by_uid(uid)
        if dependent is None:
            return
        for owner_uid in owner_uids:
            dependent = self.store.by_uid(uid)
            if dependent is None or self._owner_exists(owner_uid, dependent["metadata"]):
                continue
            self._release_or_delete(rt, dependent, owner_uid, "Background")

    async def _collect(self, owner_uid: str) -> None:
        await asyncio.sleep(0)
        for rt, dependent in self.store.dependents(owner_uid):
            self._release_or_delete(rt, dependent, owner_uid, "Background")

    def _release_or_delete(
        self, rt: ResourceType, dependent: dict[str, Any], owner_uid: str, policy: str
    ) -> None:
        meta = dependent["metadata"]
        living = [
            r
            for r in meta.get("ownerReferences") or []
            if r.get("uid") != owner_uid
            and self.store.by_uid(r.get("uid", "")) is not None
            and not (self.store.by_uid(r.get("uid", "")) or {}).get("metadata", {}).get("deletionTimestamp")
        ]
        with contextlib.suppress(ApiError):
            if living:
                changed = dict(dependent)
                changed["metadata"] = dict(
                    meta,
                    ownerReferences=[
                        r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_uid
                    ],
                )
                self.store.update(rt, meta.get("namespace", ""), meta["name"], changed, validate=False)
            elif not meta.get("deletionTimestamp"):
                self.store.delete(rt, meta.get("namespace", ""), meta["name"], propagation=policy)

    async def _foreground(self, owner_uid: str) -> None:
        await asyncio.sleep(0)
        for rt, dependent in self.store.dependents(owner_uid):
            self._release_or_delete(rt, dependent, owner_uid, "Foreground")
        await self._finish_foreground(owner_uid)

    async def _finish_foreground(self, owner_uid: str) -> None:
        await asyncio.sleep(0)
        owner = self.store.by_uid(owner_uid)
        if owner is None or self.store.dependents(owner_uid):
            return
        meta = owner["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FOREGROUND]
        changed = dict(owner)
        changed["metadata"] = dict(meta, finalizers=finalizers)
        rt = self._type_of(owner)
        if rt is not None:
            with contextlib.suppress(ApiError):
                self.store.update(rt, meta.get("namespace", ""), meta["name"], changed, validate=False)

    def _type_of(self, obj: dict[str, Any]) -> ResourceType | None:
        for rt, table in self.store.objects.items():
            if rt.kind == obj.get("kind") and rt.api_version == obj.get("apiVersion"):
                return rt if table is not None else None
        return None

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
