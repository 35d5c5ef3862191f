"""Which pods a SidecarSet selects, and the order several SidecarSets inject into one pod."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.model import labels
from services.model.sidecarset.core import DEFAULT_EXCLUDED_NAMESPACES, SidecarSet


def pod_namespace(pod: Mapping[str, Any], namespace: str | None = None) -> str:
    """The namespace a pod is created in: the request's, else the object's, else ``default``."""
    return namespace or (pod.get("metadata") or {}).get("namespace") or "default"


def is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def matches_pod(
    sidecarset: SidecarSet,
    pod: Mapping[str, Any],
    namespace: str | None = None,
    *,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> bool:
    """Whether ``sidecarset`` selects ``pod`` (created in ``namespace``).

    A cluster-wide SidecarSet (no namespace, no namespaceSelector) skips ``excluded_namespaces``; an
    explicit ``namespace`` or ``namespaceSelector`` is taken as asked. A namespaceSelector needs the
    Namespace's labels: without them (``None``) the pod does not match, as in OpenKruise.
    """
    ns = pod_namespace(pod, namespace)
    if sidecarset.namespace is not None:
        if sidecarset.namespace != ns:
            return False
    elif sidecarset.namespace_selector is not None:
        if namespace_labels is None or not labels.matches(sidecarset.namespace_selector, namespace_labels):
            return False
    elif ns in excluded_namespaces:
        return False
    if not is_active(pod):
        return False
    return labels.matches(sidecarset.selector, (pod.get("metadata") or {}).get("labels") or {})


def select_sidecarsets(
    pod: Mapping[str, Any],
    sidecarsets: Iterable[SidecarSet],
    namespace: str | None = None,
    *,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[SidecarSet]:
    """The SidecarSets that inject into ``pod``, in injection order: by SidecarSet name."""
    chosen = [
        ss
        for ss in sidecarsets
        if not ss.injection_paused
        and matches_pod(
            ss, pod, namespace, namespace_labels=namespace_labels, excluded_namespaces=excluded_namespaces
        )
    ]
    return sorted(chosen, key=lambda ss: ss.name)
