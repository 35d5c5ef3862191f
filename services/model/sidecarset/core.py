"""SidecarSet vocabulary: API constants, pod annotation keys, the parsed SidecarSet, injection records.

Every other module of this package builds on these; they import nothing of the package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "apps.kruise.io/v1alpha1"
KIND = "SidecarSet"

# Pod annotations, as OpenKruise writes them.
HASH_ANNOTATION = "kruise.io/sidecarset-hash"
# Top-level key of an object as rollbook records it (redacted): the policy and what decisions need of the
# real values (services/model/redaction.py, docs/events.md "Redaction").
REDACTION_MARK = "rollbookRedaction"
HASH_WITHOUT_IMAGE_ANNOTATION = "kruise.io/sidecarset-hash-without-image"
INJECTED_LIST_ANNOTATION = "kruise.io/sidecarset-injected-list"
# rollbook's own: the AdmissionReview uid of the injection, linking the pod to its SidecarInjected events
# (a pod created with generateName has no name yet at admission).
INJECTION_ID_ANNOTATION = "rollbook.io/sidecar-injection-id"

# Env var marking a container as an injected sidecar (OpenKruise's SidecarEnvKey).
INJECTED_ENV = "IS_INJECTED"

# The SidecarSet label naming its custom version (OpenKruise v1alpha1; v1beta1's spec.customVersion). A
# revision recorded while it is set carries it as a label, so injectionStrategy.revision.customVersion
# can find the revision.
CUSTOM_VERSION_LABEL = "apps.kruise.io/sidecarset-custom-version"

# The seed: a cluster-wide SidecarSet skips these. OpenKruise >= 1.3 excludes none (docs/sidecarset.md).
DEFAULT_EXCLUDED_NAMESPACES: frozenset[str] = frozenset({"kube-system", "kube-public"})

# injectionStrategy.revision.policy: always the pinned revision, or only for some pods.
ALWAYS = "Always"
PARTIAL = "Partial"

BEFORE_APP = "BeforeAppContainer"
AFTER_APP = "AfterAppContainer"

# updateStrategy.maxUnavailable of a RollingUpdate SidecarSet that sets none (OpenKruise's default).
DEFAULT_MAX_UNAVAILABLE = 1


class InjectionError(ValueError):
    """A pod cannot be injected as its SidecarSets ask (a pinned revision not recorded, a resourcesPolicy
    with no target container): OpenKruise's webhook refuses such a pod, and so does rollbook's."""


REQUIRED, INVALID, DUPLICATE = "Required value", "Invalid value", "Duplicate value"


@dataclass(frozen=True)
class KruiseError:
    """A problem as OpenKruise's SidecarSet validating webhook states it: a Kubernetes ``field.Error`` of
    ``kind`` (REQUIRED, INVALID, DUPLICATE) at OpenKruise's own field path (some of its paths are not the
    object's: ``spec.container.podInjectPolicy``, ``spec[0].resourcesPolicy``, ``revision.policy``)."""

    kind: str
    field: str
    detail: str = ""
    value: Any = None  # rendered as Go's field.Error prints it (services.model.cloneset_validation.go_value)

    def text(self) -> str:
        from services.model.cloneset_validation import go_value

        if self.kind == REQUIRED:
            return f"{self.field}: {REQUIRED}" + (f": {self.detail}" if self.detail else "")
        if self.kind == DUPLICATE:
            return f"{self.field}: {DUPLICATE}: {go_value(self.value)}"
        return f"{self.field}: {self.kind}: {go_value(self.value)}" + (
            f": {self.detail}" if self.detail else ""
        )


def aggregate(errors: list[KruiseError]) -> str:
    """Several errors as Kubernetes' ``ErrorList.ToAggregate()`` prints them (one alone, else bracketed)."""
    texts = list(dict.fromkeys(e.text() for e in errors))
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


class SidecarSetError(ValueError):
    """A SidecarSet is invalid; ``field`` is the JSON path of the offending part. ``kruise``: the same
    problem as OpenKruise's webhook words it, where it has the rule (the admission webhook answers with it);
    None for rollbook's own checks."""

    def __init__(self, field: str, reason: str, kruise: KruiseError | None = None) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.kruise = kruise

    def admission_message(self) -> str:
        """What the admission webhook answers: OpenKruise's wording, else this problem in its form."""
        if self.kruise is not None:
            return self.kruise.text()
        return f"{self.field}: {INVALID}: {self.reason}" if self.field else self.reason


@dataclass(frozen=True)
class SidecarSet:
    """A validated, defaulted SidecarSet. ``spec`` is the defaulted spec (plain JSON); never mutate it."""

    name: str
    spec: dict[str, Any]
    hash: str  # kruise.io/sidecarset-hash
    hash_without_image: str  # kruise.io/sidecarset-hash-without-image
    controller_revision: str = ""  # status.latestRevision when the cluster reports one
    resource_version: str = ""
    custom_version: str = ""  # CUSTOM_VERSION_LABEL (or spec.customVersion)
    # FNV of the real spec's revision data when ``spec`` holds redacted values (recorded beside them by the
    # watcher: docs/events.md, "Redaction"); None when the spec is as the API server returned it.
    revision_fnv: int | None = None

    @property
    def namespace(self) -> str | None:
        return self.spec.get("namespace") or None

    @property
    def namespace_selector(self) -> dict[str, Any] | None:
        return self.spec.get("namespaceSelector") or None

    @property
    def selector(self) -> dict[str, Any]:
        return self.spec.get("selector") or {}

    @property
    def containers(self) -> list[dict[str, Any]]:
        return self.spec.get("containers") or []

    @property
    def init_containers(self) -> list[dict[str, Any]]:
        return self.spec.get("initContainers") or []

    @property
    def native_sidecars(self) -> list[dict[str, Any]]:
        """The init containers with ``restartPolicy: Always``: they run beside the app containers."""
        return [c for c in self.init_containers if c.get("restartPolicy") == "Always"]

    @property
    def upgradable_init_containers(self) -> list[dict[str, Any]]:
        """The init containers the hashes cover, so an in-place upgrade sets their images: all of them
        when one is a native sidecar (as OpenKruise's hash), none otherwise."""
        return self.init_containers if self.native_sidecars else []

    @property
    def volumes(self) -> list[dict[str, Any]]:
        return self.spec.get("volumes") or []

    @property
    def injection_paused(self) -> bool:
        return bool((self.spec.get("injectionStrategy") or {}).get("paused"))

    @property
    def cluster_wide(self) -> bool:
        return self.namespace is None and self.namespace_selector is None


@dataclass(frozen=True)
class InjectionRecord:
    """What one SidecarSet put into one pod: becomes a SidecarInjected event."""

    sidecarset: str
    namespace: str
    pod: str  # the pod's name, or its generateName prefix when the name is not assigned yet
    revision: str  # the SidecarSet hash the pod got
    revision_without_image: str
    controller_revision: str
    containers: list[str]
    init_containers: list[str]


@dataclass(frozen=True)
class PodSidecarRevision:
    """One entry of a pod's kruise.io/sidecarset-hash annotation: which revision a SidecarSet gave it."""

    sidecarset: str
    hash: str
    hash_without_image: str = ""
    sidecars: list[str] = field(default_factory=list)
    controller_revision: str = ""
    update_timestamp: str = ""


def json_object(text: Any) -> dict[str, Any]:
    """A JSON-object annotation value (the per-SidecarSet hash and in-place state maps); anything
    missing, malformed or not an object reads as empty, as OpenKruise tolerates hand-edited pods."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
