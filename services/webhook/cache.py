"""In-memory views of the cluster the webhook needs: SidecarSets and Namespace labels.

Each is kept by list+watch through kubernetes-asyncio: list, then watch from the list's resourceVersion;
a watch that ends resumes from the last version seen; an expired version (410 Gone) or any other error
means a fresh list after a short backoff. Admission reads a snapshot and never waits on the API server.

SidecarSets are optional: on a cluster without the Kruise SidecarSet CRD their list answers 404. The
cache is then synced and empty (nothing to inject), the kind is reported not served (log
``resource_not_served``, ``rollbook_webhook_kind_served`` 0, /readyz text) and looked for again every
minute, so the webhook starts and admits pods unchanged instead of failing its start.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.infra.retry import Backoff
from services.model import sidecarset as ss
from services.model.management import Selection

log = structlog.get_logger("rollbook.webhook.cache")

ListFunction = Callable[..., Awaitable[Any]]


class SidecarSetCache:
    """The valid SidecarSets in the cluster, by name; invalid ones are kept aside with their error."""

    def __init__(self, selection: Selection | None = None) -> None:
        self._items: dict[str, ss.SidecarSet] = {}
        self.invalid: dict[str, str] = {}
        self._snapshot: tuple[ss.SidecarSet, ...] = ()
        # Only SidecarSets rollbook manages are injected (services/model/management.py); another
        # controller (OpenKruise's webhook) injects the rest.
        self.selection = selection or Selection()
        self.unmanaged: set[str] = set()

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self._items.clear()
        self.invalid.clear()
        self.unmanaged.clear()
        for obj in objects:
            self._store(obj)
        self._snapshot = tuple(self._items.values())

    def apply(self, change: str, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if change == "DELETED":
            self._items.pop(name, None)
            self.invalid.pop(name, None)
            self.unmanaged.discard(name)
        else:
            self._store(obj)
        self._snapshot = tuple(self._items.values())

    def _store(self, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if not self.selection.manages(obj):
            self._items.pop(name, None)
            self.invalid.pop(name, None)
            self.unmanaged.add(name)
            return
        self.unmanaged.discard(name)
        try:
            parsed = ss.parse_sidecarset(obj)
        except ss.SidecarSetError as err:
            # Applied before the validating webhook existed, or past it: never inject from it.
            self._items.pop(name, None)
            self.invalid[name] = str(err)
            log.warning("sidecarset_invalid", sidecarset=name, error=str(err))
            return
        self.invalid.pop(name, None)
        self._items[name] = parsed

    def snapshot(self) -> tuple[ss.SidecarSet, ...]:
        """An immutable view: safe to use across awaits while the watch keeps changing the cache."""
        return self._snapshot


class NamespaceLabels:
    """Namespace name -> labels (for SidecarSets with a namespaceSelector)."""

    def __init__(self) -> None:
        self._labels: dict[str, dict[str, str]] = {}

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self._labels = {
            (o.get("metadata") or {}).get("name", ""): dict((o.get("metadata") or {}).get("labels") or {})
            for o in objects
        }

    def apply(self, change: str, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if change == "DELETED":
            self._labels.pop(name, None)
        else:
            self._labels[name] = dict((obj.get("metadata") or {}).get("labels") or {})

    def get(self, namespace: str) -> dict[str, str] | None:
        return self._labels.get(namespace)


class ListWatch:
    """Mirrors one resource kind into a ``replace``/``apply`` target; ``synced`` after the first list."""

    def __init__(
        self,
        kind: str,
        list_function: ListFunction,
        target: SidecarSetCache | NamespaceLabels,
        *,
        args: tuple[Any, ...] = (),
        watch_timeout_seconds: int = 300,
        retry_seconds: float = 1.0,
        optional: bool = False,
        not_served_retry_seconds: float = 60.0,
    ) -> None:
        self.kind = kind
        self._list = list_function
        self._args = args
        self._target = target
        self._watch_timeout = watch_timeout_seconds
        self._backoff = Backoff(initial=retry_seconds, maximum=30.0)
        # A 404 for an optional kind (a CRD the cluster may lack) means "none there", not an error.
        self._optional = optional
        self._not_served_retry = not_served_retry_seconds
        self.served: bool | None = None  # None until the first list answered
        self.synced = asyncio.Event()

    async def _relist(self) -> str:
        body = await kube.raw_json(await self._list(*self._args, _preload_content=False))
        self._target.replace(list(body.get("items") or []))
        if self.served is False:
            log.info("resource_served", kind=self.kind)
        self.served = True
        self.synced.set()
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def run(self) -> None:
        attempt = 0
        while True:
            try:
                version = await self._relist()
                attempt = 0
                while True:
                    version = await self._watch_from(version)
            except asyncio.CancelledError:
                raise
            except ApiException as err:
                if err.status == 410:  # our version expired: relist at once, nothing is wrong
                    log.info("watch_expired", kind=self.kind)
                    continue
                if err.status == 404 and self._optional:
                    self._not_served()
                    await asyncio.sleep(self._not_served_retry)
                    continue
                log.warning("watch_failed", kind=self.kind, status=err.status, reason=str(err.reason))
            except Exception as err:  # the API server went away: relist when it is back
                log.warning("watch_failed", kind=self.kind, error=repr(err))
            await asyncio.sleep(self._backoff.delay(attempt, random.random()))
            attempt += 1

    def _not_served(self) -> None:
        if self.served is not False:
            log.warning(
                "resource_not_served",
                kind=self.kind,
                detail=f"the API server answers 404 for {self.kind} (is its CRD installed?); none are "
                f"used; looking again every {self._not_served_retry:g}s",
            )
        self.served = False
        self._target.replace([])  # a CRD removed takes its objects with it
        self.synced.set()

    async def _watch_from(self, version: str) -> str:
        stream = watch.Watch()
        try:
            async for event in stream.stream(
                self._list, *self._args, resource_version=version, timeout_seconds=self._watch_timeout
            ):
                obj = event.get("raw_object") or {}
                change = event.get("type", "")
                if change == "ERROR":
                    raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message")))
                if change in ("ADDED", "MODIFIED", "DELETED"):
                    self._target.apply(change, obj)
                new_version = (obj.get("metadata") or {}).get("resourceVersion")
                if new_version:
                    version = str(new_version)
        finally:
            await stream.close()
        return version


def sidecarset_list_watch(api: client.ApiClient, cache: SidecarSetCache, **options: Any) -> ListWatch:
    custom = client.CustomObjectsApi(api)
    return ListWatch(
        "SidecarSet",
        custom.list_cluster_custom_object,
        cache,
        args=("apps.kruise.io", "v1alpha1", "sidecarsets"),
        optional=True,
        **options,
    )


def namespace_list_watch(api: client.ApiClient, labels: NamespaceLabels, **options: Any) -> ListWatch:
    return ListWatch("Namespace", client.CoreV1Api(api).list_namespace, labels, **options)
