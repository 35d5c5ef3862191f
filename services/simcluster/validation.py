"""422 Invalid checks: object names, the pod and CloneSet basics, and pod spec immutability.

Pod spec immutability is Kubernetes' rule: after creation only container/initContainer `image`,
`activeDeadlineSeconds` and added tolerations may change. With ``extended_inplace`` (the second seed's
customised kubelet) container `env`, `envFrom`, `volumeMounts`, pod `volumes` and probes may change too.
"""

from __future__ import annotations

import re
from typing import Any

from services.model.labels import SelectorError, matches, validate_selector

from .errors import ApiError, invalid
from .resources import CLONESETS, PODS, ResourceType

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_POD_STABLE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`, "
    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
    "(only additions to existing tolerations)"
)
_EXTENDED_CONTAINER_FIELDS = (
    "env",
    "envFrom",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
)

Cause = tuple[str, str, str]


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes: list[Cause] = []
    if not name:
        causes.append(
            ("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")
        )
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    if rt is PODS:
        causes += _pod_spec_causes(obj.get("spec") or {})
    if rt is CLONESETS:
        causes += _cloneset_causes(obj.get("spec") or {})
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def validate_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], extended_inplace: bool
) -> None:
    name = (new.get("metadata") or {}).get("name", "")
    causes: list[Cause] = []
    if rt is PODS:
        causes += _pod_spec_causes(new.get("spec") or {})
        if not causes:
            causes += _pod_update_causes(old.get("spec") or {}, new.get("spec") or {}, extended_inplace)
    if rt is CLONESETS:
        causes += _cloneset_causes(new.get("spec") or {})
        old_selector = (old.get("spec") or {}).get("selector")
        if old_selector != (new.get("spec") or {}).get("selector"):
            causes.append(("spec.selector", "FieldValueForbidden", "Forbidden: selector is immutable"))
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def _pod_spec_causes(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [("spec.containers", "FieldValueRequired", "Required value")]
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            where = f"spec.{field}[{i}]"
            cname = container.get("name") if isinstance(container, dict) else None
            if not cname:
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
            elif cname in seen:
                causes.append((f"{where}.name", "FieldValueDuplicate", f"Duplicate value: {cname!r}"))
            else:
                seen.add(cname)
            if isinstance(container, dict) and not container.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
    return causes


def _pod_update_causes(old: dict[str, Any], new: dict[str, Any], extended: bool) -> list[Cause]:
    def masked(spec: dict[str, Any]) -> dict[str, Any]:
        out = dict(spec)
        out.pop("activeDeadlineSeconds", None)
        out.pop("tolerations", None)
        for field in ("containers", "initContainers"):
            items = []
            for container in spec.get(field) or []:
                c = {k: v for k, v in container.items() if k != "image"}
                if extended:
                    for extra in _EXTENDED_CONTAINER_FIELDS:
                        c.pop(extra, None)
                items.append(c)
            out[field] = items
        if extended:
            out.pop("volumes", None)
        return out

    if masked(old) != masked(new):
        return [("spec", "FieldValueForbidden", f"Forbidden: {_POD_STABLE_MESSAGE}")]
    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        return [
            ("spec.tolerations", "FieldValueForbidden", "Forbidden: existing toleration can not be modified")
        ]
    return []


def _cloneset_causes(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    selector = spec.get("selector")
    if not selector:
        causes.append(("spec.selector", "FieldValueRequired", "Required value"))
    else:
        try:
            validate_selector(selector)
        except SelectorError as exc:
            causes.append((exc.field, "FieldValueInvalid", exc.reason))
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        causes.append(("spec.replicas", "FieldValueInvalid", "must be greater than or equal to 0"))
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if selector and not causes and not matches(selector, template_labels):
        causes.append(
            (
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "`selector` does not match template `labels`",
            )
        )
    return causes


def ensure_kind(rt: ResourceType, obj: dict[str, Any]) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if kind and kind != rt.kind:
        raise ApiError(400, f"the kind of the object ({kind}) does not match the endpoint ({rt.kind})")
    if api_version and api_version != rt.api_version:
        raise ApiError(
            400, f"the API version in the data ({api_version}) does not match the endpoint ({rt.api_version})"
        )
