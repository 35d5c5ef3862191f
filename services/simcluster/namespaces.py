"""Namespace lifecycle, as kube-apiserver and the namespace controller run it.

Deleting a namespace marks it (deletionTimestamp, ``status.phase: Terminating``) and keeps it while its
``spec.finalizers`` holds ``kubernetes``. The controller then deletes everything in it (pods terminate
gracefully through the kubelet) and reports progress in the namespace's deletion conditions; once no
object is left (objects held by finalizers count), it removes the ``kubernetes`` finalizer and the
namespace goes. Meanwhile creating content in it is 403 and re-creating it is 409 (see ``plugins.py`` and
``Store.create``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from .errors import ApiError
from .plugins import ROOT_CA_CONFIGMAP
from .resources import CONFIGMAPS, NAMESPACES, SERVICE_ACCOUNTS, ResourceType
from .store import Store, WatchEvent, now_iso

Obj = dict[str, Any]
NAMESPACE_FINALIZER = "kubernetes"
# simcluster serves plain HTTP: there is no cluster CA; the published bundle says so.
SIMULATED_CA = "# simcluster serves plain HTTP and has no certificate authority\n"


def deletion_conditions(
    remaining: dict[str, int], finalizers: dict[str, int], old: list[Obj], now: str
) -> list[Obj]:
    """The namespace controller's five deletion conditions. ``remaining`` counts the objects left by
    resource (``pods.`` for the core group, ``clonesets.apps.kruise.io``), ``finalizers`` the objects each
    finalizer still holds. A condition keeps its lastTransitionTime while its status stays."""

    def condition(kind: str, held: bool, reason: str, message: str) -> Obj:
        status = "True" if held else "False"
        before = next((c for c in old if c.get("type") == kind), None)
        since = before["lastTransitionTime"] if before and before.get("status") == status else now
        return {
            "type": kind,
            "status": status,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }

    content = ", ".join(f"{r} has {n} resource instances" for r, n in sorted(remaining.items()))
    held = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))
    return [
        condition(
            "NamespaceDeletionDiscoveryFailure",
            False,
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        condition(
            "NamespaceDeletionGroupVersionParsingFailure",
            False,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        condition(
            "NamespaceDeletionContentFailure",
            False,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        condition(
            "NamespaceContentRemaining",
            bool(remaining),
            "SomeResourcesRemain" if remaining else "ContentRemoved",
            f"Some resources are remaining: {content}" if remaining else "All content successfully removed",
        ),
        condition(
            "NamespaceFinalizersRemaining",
            bool(finalizers),
            "SomeFinalizersRemain" if finalizers else "ContentHasNoFinalizers",
            f"Some content in the namespace has finalizers remaining: {held}"
            if finalizers
            else "All content-preserving finalizers finished",
        ),
    ]


def _resource_name(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}"


class NamespaceController:
    def __init__(self, store: Store) -> None:
        self.root_ca = SIMULATED_CA  # the CA of simcluster's HTTPS listener, when it has one
        self.store = store
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: set[str] = set()  # namespaces with a sync already scheduled
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.resource is NAMESPACES:
            name = meta["name"]
            if event.type == "ADDED":
                self._populate(name)
            if event.type != "DELETED" and meta.get("deletionTimestamp"):
                prev = (event.prev or {}).get("metadata") or {}
                self._schedule(name, delete_content=not prev.get("deletionTimestamp"))
            return
        namespace = meta.get("namespace")
        if namespace and event.resource.namespaced:
            ns = self.store.find(NAMESPACES, "", namespace)
            if ns is not None and ns["metadata"].get("deletionTimestamp"):
                self._schedule(namespace, delete_content=False)

    def _populate(self, namespace: str) -> None:
        """What kube-controller-manager puts in every new namespace: the ``default`` ServiceAccount
        (serviceaccounts-controller) and the ``kube-root-ca.crt`` ConfigMap (root-ca-cert-publisher).
        Done at once here, so a pod created right after its namespace finds its account."""
        with contextlib.suppress(ApiError):
            self.store.create(
                SERVICE_ACCOUNTS, namespace, {"metadata": {"name": "default", "namespace": namespace}}
            )
        with contextlib.suppress(ApiError):
            self.store.create(
                CONFIGMAPS,
                namespace,
                {
                    "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace},
                    "data": {"ca.crt": self.root_ca},
                },
            )

    def _schedule(self, name: str, *, delete_content: bool) -> None:
        if not delete_content and name in self._pending:
            return
        self._pending.add(name)
        task = asyncio.get_running_loop().create_task(self._sync(name, delete_content))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sync(self, name: str, delete_content: bool) -> None:
        await asyncio.sleep(0)  # after the write that triggered it has been answered
        self._pending.discard(name)
        ns = self.store.find(NAMESPACES, "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        if delete_content:
            for rt, obj in self._contents(name):
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(ApiError):
                        self.store.delete(rt, name, obj["metadata"]["name"])
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rt, obj in self._contents(name):
            remaining[_resource_name(rt)] = remaining.get(_resource_name(rt), 0) + 1
            for finalizer in obj["metadata"].get("finalizers") or []:
                finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
        ns = self.store.find(NAMESPACES, "", name)
        if ns is None:
            return
        status = dict(ns.get("status") or {})
        status["phase"] = "Terminating"
        status["conditions"] = deletion_conditions(
            remaining, finalizers, status.get("conditions") or [], now_iso()
        )
        updated = dict(ns, status=status)
        if not remaining:
            spec = dict(ns.get("spec") or {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER]
            updated["spec"] = spec
        self.store.commit_namespace(updated)

    def _contents(self, namespace: str) -> list[tuple[ResourceType, Obj]]:
        return [
            (rt, obj)
            for rt, table in list(self.store.objects.items())
            if rt.namespaced and rt is not NAMESPACES
            for (ns, _), obj in list(table.items())
            if ns == namespace
        ]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
