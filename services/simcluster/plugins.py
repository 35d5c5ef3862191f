"""The API server's default (compiled-in) admission plugins that change or refuse what simcluster serves,
run before the admission webhooks, in kube-apiserver's order:

- NamespaceLifecycle: no new objects in a namespace that is being deleted (403 Forbidden), nor in one that
  does not exist (404);
- ServiceAccount (create): ``serviceAccountName: default``; the named ServiceAccount must exist (when
  ServiceAccounts are served); unless ``automountServiceAccountToken: false``, the projected
  ``kube-api-access-<random>`` volume (token, ``kube-root-ca.crt``, namespace) and its read-only mount at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` in every container and init container;
- DefaultTolerationSeconds (create and update): ``node.kubernetes.io/not-ready`` and ``unreachable``
  ``NoExecute`` tolerations for 300 s unless the pod tolerates them already;
- Priority (create): ``priority: 0`` and ``preemptionPolicy: PreemptLowerPriority`` without a
  priorityClassName (no PriorityClasses here).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from . import errors
from .resources import NAMESPACES, SERVICES, ResourceType

Obj = dict[str, Any]
AccountLookup = Callable[[str, str], Obj | None]  # (namespace, name) -> the ServiceAccount or None

TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
TOKEN_EXPIRATION_SECONDS = 3607  # what the ServiceAccount plugin asks for (an hour plus a margin)
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' utilrand alphabet (no vowels, no 0/1/3)


def check_namespace(
    rt: ResourceType, namespace: str, name: str, find_namespace: Callable[[str], Obj | None]
) -> None:
    """NamespaceLifecycle on create: 404 for a missing namespace, 403 for one being deleted."""
    if not rt.namespaced or rt is NAMESPACES:
        return
    ns = find_namespace(namespace)
    if ns is None:
        raise errors.not_found("", "namespaces", namespace)
    if ns["metadata"].get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
        raise errors.forbidden(
            rt.group,
            rt.plural,
            name,
            f"unable to create new content in namespace {namespace} because it is being terminated",
            [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        )


def admit_pod(
    operation: str,
    pod: Obj,
    rng: random.Random,
    service_account: AccountLookup | None = None,
    old: Obj | None = None,
) -> None:
    """Run the pod plugins in place. ``service_account(namespace, name)`` returns the ServiceAccount or
    None (absent: ServiceAccounts are not checked)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    if operation == "CREATE":
        _service_account(pod, spec, rng, service_account)
        _priority(spec)
    elif old is not None:
        keep_priority(pod, old)
    _default_tolerations(spec)


def _service_account(pod: Obj, spec: Obj, rng: random.Random, service_account: AccountLookup | None) -> None:
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec.get("serviceAccount") or "default"
    spec["serviceAccount"] = spec["serviceAccountName"]
    meta = pod.get("metadata") or {}
    account: Obj | None = None
    if service_account is not None:
        account = service_account(meta.get("namespace", ""), spec["serviceAccountName"])
        if account is None:
            name = meta.get("name") or meta.get("generateName") or ""
            account_name = spec["serviceAccountName"]
            raise errors.forbidden(
                "",
                "pods",
                name,
                f"error looking up service account {meta.get('namespace', '')}/{account_name}: "
                f'serviceaccount "{account_name}" not found',
            )
    automount = spec.get("automountServiceAccountToken")
    if automount is None and account is not None:
        automount = account.get("automountServiceAccountToken")
    if automount is False:
        return
    volumes = spec.setdefault("volumes", [])
    volume_name = next(
        (v.get("name") for v in volumes if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)), None
    )
    if volume_name is None:
        volume_name = TOKEN_VOLUME_PREFIX + "".join(rng.choices(_SUFFIX_ALPHABET, k=5))
        volumes.append(token_volume(volume_name))
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            mounts = container.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                mounts.append({"name": volume_name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})


_TOKEN_PROJECTION: Obj = {
    "sources": [
        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "downwardAPI": {
                "items": [
                    {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                ]
            }
        },
    ],
    "defaultMode": 420,
}


def token_volume(name: str) -> Obj:
    """The projected service-account token volume, as the ServiceAccount plugin writes it. The projection
    is shared between pods: stored objects are never changed in place (store.py)."""
    return {"name": name, "projected": _TOKEN_PROJECTION}


def _priority(spec: Obj) -> None:
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


_DEFAULT_TOLERATIONS = {
    taint: {
        "key": taint,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
    }
    for taint in (NOT_READY_TAINT, UNREACHABLE_TAINT)
}


def _default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    added = list(tolerations)
    for taint, toleration in _DEFAULT_TOLERATIONS.items():
        if not any(_tolerates_no_execute(t, taint) for t in tolerations if isinstance(t, dict)):
            added.append(dict(toleration))
    spec["tolerations"] = added


def _tolerates_no_execute(toleration: Obj, taint: str) -> bool:
    """Whether a toleration already covers the taint with effect NoExecute (the plugin then adds none)."""
    effect_ok = toleration.get("effect") in (None, "", "NoExecute")
    if not effect_ok:
        return False
    key = toleration.get("key")
    if not key:
        return toleration.get("operator") == "Exists"
    return bool(key == taint)


def keep_priority(pod: Obj, old: Obj) -> None:
    """Priority on update: the values it set on create stay when a client's PUT leaves them out."""
    spec, old_spec = pod.get("spec"), old.get("spec") or {}
    if isinstance(spec, dict):
        for field in ("priority", "preemptionPolicy"):
            if field not in spec and field in old_spec:
                spec[field] = old_spec[field]


class ClusterIPs:
    """The Service registry's allocation of ``spec.clusterIP`` / ``clusterIPs`` from 10.96.0.0/12 on create
    (``None`` for a headless Service, nothing for ExternalName)."""

    def __init__(self) -> None:
        self._next = 1

    def __call__(self, rt: ResourceType, obj: Obj) -> None:
        if rt is not SERVICES:
            return
        spec = obj.setdefault("spec", {})
        if spec.get("type") == "ExternalName":
            return
        if not spec.get("clusterIP"):
            self._next += 1
            spec["clusterIP"] = f"10.96.{self._next // 254}.{self._next % 254 + 1}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
