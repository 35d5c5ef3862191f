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


# The label every Namespace carries with its own name: a namespaceSelector on it names namespaces.
METADATA_NAME_LABEL = "kubernetes.io/metadata.name"


def named_namespaces(sidecarset: SidecarSet) -> frozenset[str] | None:
    """The namespaces a SidecarSet's scope names outright, or None for a cluster-scoped one.

    OpenKruise's SidecarSet namespace index: ``spec.namespace`` (v1alpha1), else a namespaceSelector whose
    ``matchLabels`` or an ``In`` expression pins ``kubernetes.io/metadata.name``; anything else (no scope,
    or a selector on other labels) is cluster-scoped there.
    """
    if sidecarset.namespace is not None:
        return frozenset({sidecarset.namespace})
    selector = sidecarset.namespace_selector or {}
    pinned = (selector.get("matchLabels") or {}).get(METADATA_NAME_LABEL)
    if isinstance(pinned, str):
        return frozenset({pinned})
    for expression in selector.get("matchExpressions") or []:
        if expression.get("key") == METADATA_NAME_LABEL and expression.get("operator") == "In":
            return frozenset(str(v) for v in expression.get("values") or [])
    return None


def injection_order(sidecarsets: Iterable[SidecarSet], namespace: str) -> list[SidecarSet]:
    """OpenKruise 1.9 lists the SidecarSets indexed under the pod's namespace, then the cluster-scoped ones
    (each list in its cache's order, unspecified); rollbook keeps those two groups and orders each by name."""
    return sorted(
        sidecarsets, key=lambda ss: (namespace not in (named_namespaces(ss) or frozenset()), ss.name)
    )


def select_sidecarsets(
    pod: Mapping[str, Any],
    sidecarsets: Iterable[SidecarSet],
    namespace: str | None = None,
    *,
    namespace_labels: Mapping[str, str] | None = None,
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[SidecarSet]:
    """The SidecarSets that inject into ``pod``, in injection order (``injection_order``)."""
    chosen = [
        ss
        for ss in sidecarsets
        if not ss.injection_paused
        and matches_pod(
            ss, pod, namespace, namespace_labels=namespace_labels, excluded_namespaces=excluded_namespaces
        )
    ]
    return injection_order(chosen, pod_namespace(pod, namespace))
