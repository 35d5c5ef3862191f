"""In-memory object store: one monotonic resourceVersion counter, optimistic concurrency, finalizers,
a bounded event history for watches, and in-process listeners (scheduler, kubelet, garbage collector).

Stored objects are never mutated in place: every write stores a fresh dict, so list responses and
watch events may hand out references safely.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.model.json_copy import json_copy

from . import errors, resize
from . import schema as crd_schema
from .defaults import apply_defaults, generated_selector, initial_status
from .plugins import check_namespace
from .resources import ALL, NAMESPACES, PODS, ResourceType
from .validation import validate_create, validate_update

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _namespace_finalizers(rt: ResourceType, obj: Obj) -> list[str]:
    """A namespace's spec.finalizers (``kubernetes``): they hold a deleted namespace until its
    contents are gone, as metadata.finalizers hold any object."""
    if rt is not NAMESPACES:
        return []
    return list((obj.get("spec") or {}).get("finalizers") or [])


def _spec_part(obj: Obj) -> Obj:
    """Everything but metadata and status: what `metadata.generation` counts changes of."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: ResourceType
    obj: Obj
    prev: Obj | None
    _encoded: bytes | None = field(default=None, repr=False)

    def encoded(self) -> bytes:
        """The `{"type","object"}` line, encoded once however many watchers send it."""
        if self._encoded is None:
            self._encoded = msgspec.json.encode({"type": self.type, "object": self.obj}) + b"\n"
        return self._encoded


class Watcher:
    """One watch stream's queue. ``closed`` is set when the stream must end (cut by fault injection)."""

    def __init__(self, resource: ResourceType, namespace: str | None) -> None:
        self.resource = resource
        self.namespace = namespace
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()  # None: end the stream
        self.closed = asyncio.Event()

    def wants(self, event: WatchEvent) -> bool:
        if event.resource is not self.resource:
            return False
        return self.namespace is None or key_of(event.obj)[0] == self.namespace


Listener = Callable[[WatchEvent], None]


class Store:
    def __init__(
        self, *, history_window: int = 20_000, seed: int = 0, extended_inplace: bool = False
    ) -> None:
        self.objects: dict[ResourceType, dict[Key, Obj]] = {rt: {} for rt in ALL}
        # Structural schemas of CRD-defined resources (crds.py): pruning, defaults, validation.
        self.schemas: dict[ResourceType, dict[str, Any]] = {}
        self.rv = 0
        self.history: deque[WatchEvent] = deque()
        self.history_window = history_window
        self.compacted_rv = 0  # events with rv <= this are no longer kept
        self.watchers: set[Watcher] = set()
        self.listeners: list[Listener] = []
        self.extended_inplace = extended_inplace
        self.rng = random.Random(seed)
        self._by_uid: dict[str, tuple[ResourceType, Key]] = {}
        self._dependents: dict[str, set[tuple[ResourceType, Key]]] = {}
        # In-process admission plugins (e.g. PVC protection): may change an object about to be created.
        self.create_hooks: list[Callable[[ResourceType, Obj], None]] = []
        # Decides whether deleting this object is graceful (the kubelet finishes it). Set by the kubelet.
        self.graceful_delete: Callable[[ResourceType, Obj, int | None], bool] = lambda rt, obj, grace: False

    def register(self, rt: ResourceType, schema: dict[str, Any] | None = None) -> None:
        """Store objects of a resource defined at run time (a CRD), with its schema."""
        self.objects.setdefault(rt, {})
        if schema is not None:
            self.schemas[rt] = schema

    def _apply_schema(self, rt: ResourceType, obj: Obj) -> Obj:
        schema = self.schemas.get(rt)
        if schema is None:
            return obj
        prepared = crd_schema.prepare(schema, obj)
        causes = crd_schema.validate_object(schema, prepared)
        if causes:
            name = (prepared.get("metadata") or {}).get("name", "")
            raise errors.invalid(rt.group, rt.kind, name, causes)
        return prepared

    def check_schema(self, rt: ResourceType, obj: Obj) -> None:
        """422 when ``obj`` does not match its CRD's schema (nothing for kinds without one)."""
        self._apply_schema(rt, json_copy(obj))

    def check(self, rt: ResourceType, obj: Obj, old: Obj | None, *, subresource: str | None = None) -> Obj:
        """A write at a version that is not stored as such (a CRD's non-storage version): pruned, defaulted
        and validated by that version's schema and rules before it is converted to the storage version."""
        checked = self._apply_schema(rt, obj)
        if subresource is None and old is not None:
            validate_update(rt, old, checked, self.extended_inplace)
        elif subresource is None and (checked.get("metadata") or {}).get("name"):
            validate_create(rt, checked)  # a generateName'd object is named, and checked, when stored
        return checked

    # ---- reads -------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rt].get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return obj

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self.objects[rt].get((namespace if rt.namespaced else "", name))

    def by_uid(self, uid: str) -> Obj | None:
        where = self._by_uid.get(uid)
        return self.objects[where[0]].get(where[1]) if where else None

    def dependents(self, owner_uid: str) -> list[tuple[ResourceType, Obj]]:
        out = []
        for rt, key in list(self._dependents.get(owner_uid, ())):
            obj = self.objects[rt].get(key)
            if obj is not None:
                out.append((rt, obj))
        return out

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        predicate: Callable[[Obj], bool] = lambda obj: True,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], int, str | None, int | None]:
        """Items (sorted by namespace/name), the list resourceVersion, the continue token, remaining count."""
        start_after: Key | None = None
        list_rv = self.rv
        if continue_token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start_after = (decoded["start"][0], decoded["start"][1])
                list_rv = int(decoded["rv"])
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise errors.ApiError(400, "continue key is not valid") from exc
            if list_rv < self.compacted_rv:
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter."
                )
        keys: Iterator[Key] = iter(sorted(self.objects[rt]))
        table = self.objects[rt]
        items: list[Obj] = []
        remaining = 0
        last: Key | None = None
        for key in keys:
            if namespace is not None and key[0] != namespace:
                continue
            if start_after is not None and key <= start_after:
                continue
            obj = table[key]
            if not predicate(obj):
                continue
            if limit and len(items) >= limit:
                remaining += 1
                continue
            items.append(obj)
            last = key
        token = None
        if remaining and last is not None:
            token = base64.urlsafe_b64encode(
                json.dumps({"rv": list_rv, "start": [last[0], last[1]]}).encode()
            ).decode()
        return items, self.rv, token, (remaining if token else None)

    # ---- writes ------------------------------------------------------------------------------------

    def _commit(self, rt: ResourceType, event_type: str, obj: Obj, prev: Obj | None) -> Obj:
        self.rv += 1
        key = key_of(obj)
        if event_type != "DELETED":
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[rt][key] = obj
        else:
            obj = dict(obj)
            obj["metadata"] = dict(obj["metadata"], resourceVersion=str(self.rv))
            self.objects[rt].pop(key, None)
        self._index(rt, key, obj, prev, deleted=event_type == "DELETED")
        event = WatchEvent(self.rv, event_type, rt, obj, prev)
        self.history.append(event)
        while len(self.history) > self.history_window:
            self.compacted_rv = self.history.popleft().rv
        for watcher in self.watchers:
            if watcher.wants(event):
                watcher.queue.put_nowait(event)
        for listener in self.listeners:
            listener(event)
        return obj

    def _index(self, rt: ResourceType, key: Key, obj: Obj, prev: Obj | None, deleted: bool) -> None:
        uid = obj["metadata"].get("uid", "")
        old_owners = {r.get("uid") for r in ((prev or {}).get("metadata") or {}).get("ownerReferences") or []}
        new_owners = (
            set() if deleted else {r.get("uid") for r in obj["metadata"].get("ownerReferences") or []}
        )
        for owner in old_owners - new_owners:
            self._dependents.get(owner, set()).discard((rt, key))
        for owner in new_owners - old_owners:
            self._dependents.setdefault(owner, set()).add((rt, key))
        if deleted:
            self._by_uid.pop(uid, None)
        else:
            self._by_uid[uid] = (rt, key)

    def commit_internal(self, rt: ResourceType, new: Obj) -> Obj:
        """A trusted write by a simulated controller (scheduler, kubelet, binder): no validation, no
        generation bump, no resourceVersion check. Skipped when nothing changed."""
        old = self.objects[rt].get(key_of(new))
        if old is None or old["metadata"]["uid"] != new["metadata"]["uid"]:
            return new
        new["metadata"] = dict(new["metadata"], resourceVersion=old["metadata"]["resourceVersion"])
        if new == old:
            return old
        return self._commit(rt, "MODIFIED", new, old)

    def move(self, source: ResourceType, target: ResourceType) -> int:
        """Keep the objects stored under ``source`` under ``target`` instead, unchanged (each keeps the
        apiVersion it was stored at, as etcd keeps what was written): a CRD whose storage version changed
        keeps its objects. No watch event: the stored data did not change. Returns how many moved."""
        table = self.objects.get(source) or {}
        moved = 0
        for key, obj in list(table.items()):
            if key in self.objects.setdefault(target, {}):
                continue
            del table[key]
            self.objects[target][key] = obj
            self._by_uid[obj["metadata"]["uid"]] = (target, key)
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents = self._dependents.get(ref.get("uid"), set())
                if (source, key) in dependents:
                    dependents.discard((source, key))
                    dependents.add((target, key))
            moved += 1
        return moved

    def compact(self) -> None:
        """Forget all kept events (as etcd compaction does): older resourceVersions now get 410 Gone."""
        if self.history:
            self.compacted_rv = self.history[-1].rv
            self.history.clear()

    def create(
        self, rt: ResourceType, namespace: str, obj: Obj, *, validate: bool = True, defaulted: bool = False
    ) -> Obj:
        obj = dict(obj)
        meta = dict(obj.get("metadata") or {})
        obj["metadata"] = meta
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if rt.namespaced:
            ns = meta.get("namespace") or namespace
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise errors.ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = ns
            check_namespace(rt, ns, meta.get("name") or "", lambda n: self.find(NAMESPACES, "", n))
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            for _ in range(20):
                candidate = meta["generateName"] + "".join(self.rng.choice(_NAME_ALPHABET) for _ in range(5))
                if (meta.get("namespace", ""), candidate) not in self.objects[rt]:
                    meta["name"] = candidate
                    break
        if not defaulted:  # the API server defaults before admission; internal creators rely on this
            apply_defaults(rt, obj, None)
        initial_status(rt, obj)
        for hook in self.create_hooks:
            hook(rt, obj)
        if validate:
            obj = self._apply_schema(rt, obj)
            meta = obj["metadata"]
            validate_create(rt, obj)
            if meta.get("resourceVersion"):
                # The storage layer's ErrResourceVersionSetOnCreate, which reaches the client as a 500.
                raise errors.ApiError(
                    500, "Internal error occurred: resourceVersion should not be set on objects to be created"
                )
        existing = self.objects[rt].get(key_of(obj))
        if existing is not None:
            being_deleted = bool(existing["metadata"].get("deletionTimestamp"))
            raise errors.already_exists(rt.group, rt.plural, meta["name"], being_deleted)
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(transient, None)
        meta["uid"] = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        generated_selector(rt, obj)
        if rt.has_status and rt.custom:
            obj.pop("status", None)  # CRDs with a status subresource drop status on create
        return self._commit(rt, "ADDED", obj, None)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        new: Obj,
        *,
        subresource: str | None = None,
        validate: bool = True,
        require_resource_version: bool = False,
    ) -> Obj:
        """Replace an object (PUT semantics). A non-empty metadata.resourceVersion must match (else 409)."""
        old = self.get(rt, namespace, name)
        new_meta = new.get("metadata") or {}
        if rt.namespaced and new_meta.get("namespace") not in (None, "", namespace):
            raise errors.ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        if new_meta.get("uid") and new_meta["uid"] != old["metadata"]["uid"]:
            raise errors.invalid(
                rt.group,
                rt.kind,
                name,
                [
                    (
                        "metadata.uid",
                        "FieldValueInvalid",
                        f'Invalid value: "{new_meta["uid"]}": field is immutable',
                    )
                ],
            )
        if new_meta.get("name") not in (None, name):
            raise errors.ApiError(
                400,
                f"the name of the object ({new_meta.get('name')}) does not match the name "
                f"on the URL ({name})",
            )
        wanted_rv = new_meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.group, rt.plural, name)
        if not wanted_rv and require_resource_version:
            raise errors.invalid(
                rt.group,
                rt.kind,
                name,
                [
                    (
                        "metadata.resourceVersion",
                        "FieldValueInvalid",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        if subresource == "resize" and rt is PODS:
            # pods/resize keeps nothing of the write but container resources and resize policies.
            merged = resize.prepare(old, new)
            apply_defaults(rt, merged, old)
            if validate:
                causes = resize.causes(old, merged)
                if causes:
                    raise errors.invalid(rt.group, rt.kind, name, causes)
            if _spec_part(merged) != _spec_part(old):
                merged["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        else:
            merged = self._prepare_update(rt, old, new, subresource)
            if validate:
                merged = self._apply_schema(rt, merged)
            if subresource is None:
                apply_defaults(rt, merged, old)
                if _spec_part(merged) != _spec_part(old):
                    merged["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
            if validate and (subresource is None or rt is PODS):  # pods/status may change metadata
                validate_update(rt, old, merged, self.extended_inplace)
        merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if merged == old:
            return old  # a no-op write does not bump the resourceVersion, as in Kubernetes
        meta = merged["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
            and not _namespace_finalizers(rt, merged)
        ):
            # The last finalizer is gone and no graceful termination is pending (as the API server decides).
            return self._commit(rt, "DELETED", merged, old)
        return self._commit(rt, "MODIFIED", merged, old)

    @staticmethod
    def _kept_identity(meta: Obj, old_meta: Obj) -> Obj:
        """``meta`` with the fields no update changes taken from ``old_meta``."""
        for fixed in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        return meta

    @staticmethod
    def _check_no_new_finalizers(rt: ResourceType, meta: Obj, old_meta: Obj) -> None:
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rt.group,
                    rt.kind,
                    meta["name"],
                    [
                        (
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being deleted",
                        )
                    ],
                )

    @staticmethod
    def _prepare_update(rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        new = dict(new)
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if subresource == "status":
            merged = dict(old)
            merged["metadata"] = dict(old["metadata"])
            if rt is PODS:
                # pods/status takes the object's labels, annotations and finalizers too: Kubernetes resets
                # only spec, deletionTimestamp and ownerReferences there (podStatusStrategy); a custom
                # resource's status subresource keeps nothing but the status.
                meta = Store._kept_identity(dict(new.get("metadata") or {}), old["metadata"])
                meta.pop("ownerReferences", None)
                if "ownerReferences" in old["metadata"]:
                    meta["ownerReferences"] = old["metadata"]["ownerReferences"]
                Store._check_no_new_finalizers(rt, meta, old["metadata"])
                merged["metadata"] = meta
            elif "managedFields" in (new.get("metadata") or {}):
                # The write's own bookkeeping (server.py notes the status fields it set) is kept.
                merged["metadata"]["managedFields"] = new["metadata"]["managedFields"]
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        old_meta = old["metadata"]
        meta = Store._kept_identity(dict(new.get("metadata") or {}), old_meta)
        new["metadata"] = meta
        if rt is NAMESPACES:
            # spec.finalizers change only through /finalize (the namespace controller), as in Kubernetes.
            new["spec"] = dict(new.get("spec") or {}, finalizers=_namespace_finalizers(rt, old))
        Store._check_no_new_finalizers(rt, meta, old_meta)
        if rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)

        return new

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
        grace_seconds: int | None = None,
    ) -> Obj:
        obj = self.get(rt, namespace, name)
        meta = obj["metadata"]
        if precondition_uid and precondition_uid != meta["uid"]:
            raise errors.ApiError(
                409,
                f"Precondition failed: UID in precondition: {precondition_uid}, UID in "
                f"object meta: {meta['uid']}",
                "Conflict",
            )
        if precondition_rv and precondition_rv != meta["resourceVersion"]:
            raise errors.ApiError(
                409,
                f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}",
                "Conflict",
            )
        if propagation not in (None, "Orphan", "Background", "Foreground"):
            raise errors.ApiError(
                400, f"propagationPolicy {propagation!r} is not one of Orphan, Background, Foreground"
            )
        finalizers = list(meta.get("finalizers") or [])
        if propagation == "Orphan":
            self.orphan_dependents(meta["uid"])
        if (
            propagation == "Foreground"
            and "foregroundDeletion" not in finalizers
            and self.dependents(meta["uid"])
        ):
            finalizers.append("foregroundDeletion")
        graceful = self.graceful_delete(rt, obj, grace_seconds)
        held = _namespace_finalizers(rt, obj)
        if meta.get("deletionTimestamp"):
            if not graceful and not finalizers and not held:
                return self._commit(rt, "DELETED", obj, obj)
            return obj
        if held:
            marked = dict(obj, status=dict(obj.get("status") or {}, phase="Terminating"))
            marked["metadata"] = dict(meta, deletionTimestamp=now_iso(), deletionGracePeriodSeconds=0)
            return self._commit(rt, "MODIFIED", marked, obj)
        if finalizers or graceful:
            grace = 0
            if graceful:
                grace = (
                    grace_seconds
                    if grace_seconds is not None
                    else int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                )
            marked = dict(obj)
            marked["metadata"] = dict(
                meta, deletionTimestamp=now_iso(), finalizers=finalizers, deletionGracePeriodSeconds=grace
            )
            if not finalizers:
                marked["metadata"].pop("finalizers")
            return self._commit(rt, "MODIFIED", marked, obj)
        return self._commit(rt, "DELETED", obj, obj)

    def remove(self, rt: ResourceType, obj: Obj) -> None:
        """Finish a graceful deletion (the kubelet has stopped the pod); finalizers still hold it."""
        current = self.objects[rt].get(key_of(obj))
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            return
        if current["metadata"].get("finalizers"):
            # Termination is over but finalizers still hold the object: it goes when the last is removed.
            if current["metadata"].get("deletionGracePeriodSeconds"):
                held = dict(current, metadata=dict(current["metadata"], deletionGracePeriodSeconds=0))
                self._commit(rt, "MODIFIED", held, current)
            return
        self._commit(rt, "DELETED", current, current)

    def remove_now(self, rt: ResourceType, obj: Obj) -> None:
        """Delete at once, finalizers or not (the objects of a CRD that is gone)."""
        if self.objects.get(rt, {}).get(key_of(obj)) is obj:
            self._commit(rt, "DELETED", obj, obj)

    def commit_namespace(self, new: Obj) -> None:
        """The namespace controller's write (status, and spec.finalizers as its /finalize call does): the
        namespace goes once it is being deleted and nothing holds it any more."""
        old = self.objects[NAMESPACES].get(key_of(new))
        if old is None or old["metadata"]["uid"] != new["metadata"]["uid"]:
            return
        new = dict(new, metadata=dict(new["metadata"], resourceVersion=old["metadata"]["resourceVersion"]))
        done = (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not _namespace_finalizers(NAMESPACES, new)
        )
        if done:
            self._commit(NAMESPACES, "DELETED", new, old)
        elif new != old:
            self._commit(NAMESPACES, "MODIFIED", new, old)

    def orphan_dependents(self, owner_uid: str) -> None:
        for rt, dependent in self.dependents(owner_uid):
            changed = dict(dependent)
            refs = [
                r for r in dependent["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
            ]
            changed["metadata"] = dict(dependent["metadata"], ownerReferences=refs)
            if not refs:
                changed["metadata"].pop("ownerReferences")
            self._commit(rt, "MODIFIED", changed, dependent)

    def next_event_after(self, rv: int) -> int:
        """Index in history of the first event with rv > given rv (history is sorted by rv)."""
        lo, hi = 0, len(self.history)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.history[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return lo
