"""CustomResourceDefinitions registered dynamically, as apiextensions-apiserver serves them: a CRD that is
created is checked (name = plural.group, one storage version, structural schemas), gets its
``NamesAccepted`` and ``Established`` conditions, and its served versions appear in discovery with CRUD,
watch, the status and scale subresources it declares; objects are pruned, defaulted and validated by its
schema (``schema.py``). Objects are stored in the storage version and converted to and from the other
served versions (``conversion.py``). Deleting the CRD deletes its objects and stops serving them.

A CRD for a resource simcluster knows natively (CloneSets, SidecarSets) attaches its schema to that
resource and, when the resource was switched off (``disabled_resources``), serves it again: so the CRDs
of an install are the ones the tests run on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import errors
from .conversion import Conversions, VersionView
from .resources import ALL, CRDS, ResourceType
from .schema import structural_problems
from .store import Store, WatchEvent, now_iso

Obj = dict[str, Any]
Cause = tuple[str, str, str]


def crd_causes(crd: Obj) -> list[Cause]:
    """What apiextensions' validation refuses in a CRD (the checks that matter for serving it)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[Cause] = []
    name = (crd.get("metadata") or {}).get("name", "")
    expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
    if name != expected:
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            (
                "spec.scope",
                "FieldValueNotSupported",
                f'Unsupported value: "{spec.get("scope", "")}": supported values: "Cluster", "Namespaced"',
            )
        )
    if not names.get("kind"):
        causes.append(("spec.names.kind", "FieldValueRequired", "Required value"))
    versions = spec.get("versions") or []
    if sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            (
                "spec.versions",
                "FieldValueInvalid",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    causes += conversion_causes(spec.get("conversion"))
    for i, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            causes.append(
                (
                    f"spec.versions[{i}].schema.openAPIV3Schema",
                    "FieldValueRequired",
                    "Required value: schemas are required",
                )
            )
            continue
        for problem in structural_problems(schema, f"spec.versions[{i}].schema.openAPIV3Schema"):
            field, _, message = problem.partition(": ")
            causes.append((field, "FieldValueRequired", message))
    return causes


def conversion_causes(conversion: Any) -> list[Cause]:
    """apiextensions' checks of ``spec.conversion``."""
    if conversion is None:
        return []
    where = "spec.conversion"
    strategy = conversion.get("strategy", "None")
    webhook = conversion.get("webhook")
    if strategy not in ("None", "Webhook"):
        message = f'Unsupported value: "{strategy}": supported values: "None", "Webhook"'
        return [(f"{where}.strategy", "FieldValueNotSupported", message)]
    if strategy == "None":
        if webhook is not None:
            message = "Forbidden: should not be set when strategy is not set to Webhook"
            return [(f"{where}.webhook", "FieldValueForbidden", message)]
        return []
    if not isinstance(webhook, dict):
        return [
            (
                f"{where}.webhook",
                "FieldValueRequired",
                "Required value: required when strategy is set to Webhook",
            )
        ]
    causes: list[Cause] = []
    if not set(webhook.get("conversionReviewVersions") or []) & {"v1", "v1beta1"}:
        message = "Required value: must include at least one of v1, v1beta1"
        causes.append((f"{where}.webhook.conversionReviewVersions", "FieldValueRequired", message))
    client_config = webhook.get("clientConfig") or {}
    if bool(client_config.get("url")) == bool(client_config.get("service")):
        message = "Required value: exactly one of url or service is required"
        causes.append((f"{where}.webhook.clientConfig", "FieldValueRequired", message))
    return causes


def _resource_type(spec: Obj, version: Obj) -> ResourceType:
    names = spec["names"]
    sub = version.get("subresources") or {}
    scale = sub.get("scale")
    return ResourceType(
        spec["group"],
        version["name"],
        names["plural"],
        names["kind"],
        spec["scope"] == "Namespaced",
        has_status="status" in sub,
        custom=True,
        short_names=tuple(names.get("shortNames") or ()),
        singular=names.get("singular") or names["kind"].lower(),
        categories=tuple(names.get("categories") or ()),
        scale=(
            (
                scale.get("specReplicasPath", ""),
                scale.get("statusReplicasPath", ""),
                scale.get("labelSelectorPath", ""),
            )
            if isinstance(scale, dict)
            else None
        ),
        list_kind=names.get("listKind") or f"{names['kind']}List",
    )


def resource_types(crd: Obj) -> list[tuple[ResourceType, Obj]]:
    """One resource type per served version, with its schema."""
    spec = crd["spec"]
    return [
        (_resource_type(spec, version), version["schema"]["openAPIV3Schema"])
        for version in spec.get("versions") or []
        if version.get("served")
    ]


def _serving(crd: Obj) -> Any:
    """What of a CRD decides how its resource is served (a change re-registers it)."""
    spec = crd.get("spec") or {}
    return (
        spec.get("group"),
        spec.get("names"),
        spec.get("scope"),
        spec.get("versions"),
        spec.get("conversion"),
    )


def established_status(crd: Obj, now: str) -> Obj:
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    return {
        "acceptedNames": names,
        "storedVersions": [storage],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
    }


class CrdController:
    """Keeps what is served in step with the stored CRDs. ``serve(rt)`` / ``stop_serving(rt)`` are the
    API server's."""

    def __init__(
        self,
        store: Store,
        serve: Callable[[ResourceType, VersionView | None], None],
        stop_serving: Callable[[ResourceType], None],
        conversions: Conversions,
    ) -> None:
        self.store = store
        self.serve = serve
        self.stop_serving = stop_serving
        self.conversions = conversions
        self._native = {rt.key: rt for rt in ALL if rt.custom}
        self._by_crd: dict[str, list[ResourceType]] = {}
        store.create_hooks.append(self._check)
        store.listeners.append(self._on_event)

    @staticmethod
    def _check(rt: ResourceType, obj: Obj) -> None:
        if rt is CRDS:
            causes = crd_causes(obj)
            if causes:
                name = (obj.get("metadata") or {}).get("name", "")
                raise errors.invalid(rt.group, rt.kind, name, causes)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource is not CRDS:
            return
        crd = event.obj
        name = crd["metadata"]["name"]
        if event.type == "DELETED":
            for rt in self._by_crd.pop(name, []):
                self._forget(rt)
            return
        if event.type == "ADDED" or _serving(crd) != _serving(event.prev or {}):
            self._register(name, crd)

    def _register(self, name: str, crd: Obj) -> None:
        """Objects are stored once, under the storage version's type; every other served version is a
        view converted to and from it (conversion.py). A CRD replaced (updated) or created over a resource
        simcluster served already keeps the objects stored so far, each at the version it was written at
        (``status.storedVersions``), converted when read, as kube-apiserver does."""
        spec = crd["spec"]
        served = [(self._native_or(rt), schema) for rt, schema in resource_types(crd)]
        stored = next(v for v in spec["versions"] if v.get("storage"))
        storage_rt = next(
            (rt for rt, _ in served if rt.version == stored["name"]),
            self._native_or(_resource_type(spec, stored)),  # stored but not served
        )
        previous = [
            *self._by_crd.get(name, []),
            *(
                rt
                for rt in self._native.values()
                if (rt.group, rt.plural) == (spec["group"], spec["names"]["plural"])
            ),
        ]
        self.store.register(storage_rt, stored["schema"]["openAPIV3Schema"])
        for rt in previous:
            if rt is not storage_rt:
                self.store.move(rt, storage_rt)
        versions = [
            str((o.get("apiVersion") or "").rpartition("/")[2])
            for o in self.store.objects.get(storage_rt, {}).values()
        ]
        mixed = any(v != storage_rt.version for v in versions)
        registered = [storage_rt]
        served_now = {rt for rt, _ in served}
        for rt in previous:
            if rt not in served_now and rt is not storage_rt:
                self.store.schemas.pop(rt, None)
                self.stop_serving(rt)
            if rt is not storage_rt:
                for watcher in list(self.store.watchers):  # the old storage's watches end; clients relist
                    if watcher.resource is rt:
                        watcher.queue.put_nowait(None)
        for rt, schema in served:
            if rt is storage_rt:
                view = VersionView(storage_rt, self.conversions.converter(crd, rt)) if mixed else None
                self.serve(rt, view)
                continue
            self.store.schemas[rt] = schema  # what a write at this version is checked against
            self.serve(rt, VersionView(storage_rt, self.conversions.converter(crd, rt)))
            registered.append(rt)
        self._by_crd[name] = registered
        status = established_status(crd, now_iso())
        kept = list((crd.get("status") or {}).get("storedVersions") or [])
        for version in [*sorted(set(versions)), storage_rt.version]:
            if version and version not in kept:
                kept.append(version)
        status["storedVersions"] = kept
        if (crd.get("status") or {}).get("conditions"):
            status["conditions"] = crd["status"]["conditions"]
        established = dict(crd, status=status)
        self.store.commit_internal(CRDS, established)

    def _native_or(self, rt: ResourceType) -> ResourceType:
        return self._native.get(rt.key) or rt

    def _forget(self, rt: ResourceType) -> None:
        """The CRD is gone: its objects go with it, and the resource is no longer served."""
        for obj in list(self.store.objects.get(rt, {}).values()):
            self.store.remove_now(rt, obj)
        self.store.schemas.pop(rt, None)
        self.stop_serving(rt)
