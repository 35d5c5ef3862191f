"""What the registry knows of one kind of workload (services/kinds/registry.py): its name, its streams, and
how the watcher routes an object to it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# (namespace, workload name) of the workload an object belongs to.
Workload = tuple[str, str]
Route = Callable[[str, dict[str, Any]], Workload | None]


@dataclass(frozen=True)
class Watched:
    """One Kubernetes resource the watcher lists and watches for a kind."""

    kind: str  # ObjectObserved.kind
    api: str  # "core", "apps" or "custom"
    # The kubernetes-asyncio method listing it in every namespace (core/apps); for "custom", the plural
    # of ``group``/``version``.
    method: str
    group: str = ""
    version: str = ""
    optional: bool = False  # a CRD the cluster may lack (404: not served, not failing)


@dataclass(frozen=True)
class Kind:
    """A kind of workload: rollbook drives it (``driven``: CloneSet, SidecarSet) or records it."""

    name: str  # the Kubernetes kind and the first segment of its streams
    driven: bool
    cluster_scoped: bool = False
    # The resources the watcher lists for this kind (Pods are watched once for every kind).
    watches: tuple[Watched, ...] = ()
    # (object kind, object) -> the workload of this kind it belongs to, or None.
    route: Route | None = None
    # The pod label naming the revision a pod was made from.
    revision_label: str = "controller-revision-hash"
    suffixes: tuple[str, ...] = field(default=("observed",))
    # A recorded kind's fold (services/kinds/recorded/rules.py): called with (namespace, name).
    trail: Callable[[str, str], Any] | None = None
    # A driven kind's pod actions: PodActionRequested.action -> the Struct its details decode to (the
    # kind's actions.py), which the executor matches on.
    actions: Mapping[str, type[Any]] = field(default_factory=dict)

    # A driven kind's planner decisions stream, as a suffix ("" for CloneSet's ``CloneSet/<ns>/<name>``,
    # "decisions" for SidecarSet's, whose workload stream holds the webhook's injections); None: not driven.
    decisions: str | None = None
    # A driven kind's object -> the fields of its status that rollbook's status write (the executor
    # carrying out a StatusPlanned) counts from the pods alone and that its rules do not read back in that
    # state. The watcher does not store an observation whose only change is there, written by rollbook's
    # executor with the values of a StatusPlanned it stored (docs/services.md, "watcher"). None: every
    # change is stored.
    pod_counts: Callable[[dict[str, Any]], frozenset[str]] | None = None

    def prefix(self) -> str:
        return f"{self.name}/"

    def stream(self, namespace: str, name: str, suffix: str = "") -> str:
        """``<Kind>/<namespace>/<name>[/<suffix>]``: every stream of a workload is named so, here only (a
        cluster-scoped kind's namespace is "")."""
        base = f"{self.name}/{namespace}/{name}"
        return f"{base}/{suffix}" if suffix else base

    def observed_stream(self, namespace: str, name: str) -> str:
        """The watcher's ``ObjectObserved`` of the workload and the objects routed to it."""
        return self.stream(namespace, name, "observed")

    def recorded_stream(self, namespace: str, name: str) -> str:
        """A recorded kind's trail: revisions, rollouts, steps and pod actions folded from observations."""
        return self.stream(namespace, name, "recorded")

    def decisions_stream(self, namespace: str, name: str) -> str:
        """A driven kind's planner rounds and decisions (one writer, expected versions)."""
        if self.decisions is None:
            raise ValueError(f"{self.name} is not driven by rollbook: it has no decisions stream")
        return self.stream(namespace, name, self.decisions)

    def actions_stream(self, namespace: str, name: str) -> str:
        """A driven kind's executor outcomes (store-assigned versions)."""
        return self.stream(namespace, name, "actions")

    def shadow_stream(self, namespace: str, name: str) -> str:
        """What a shadowed workload's own controller did and rollbook would have done (docs/shadow.md)."""
        return self.stream(namespace, name, "shadow")

    def workload_of(self, stream: str) -> Workload | None:
        """(namespace, name) of the workload of this kind ``stream`` belongs to; None for another's."""
        parts = stream.split("/", 3)
        if len(parts) < 3 or parts[0] != self.name or not parts[2]:
            return None
        if (parts[1] == "") != self.cluster_scoped:  # a namespace exactly when the kind has them
            return None
        return parts[1], parts[2]

    def planned_streams(self, namespace: str, name: str) -> tuple[str, str, str]:
        """What a driven kind's planner folds, in its fold's order: observed, actions, decisions."""
        return (
            self.observed_stream(namespace, name),
            self.actions_stream(namespace, name),
            self.decisions_stream(namespace, name),
        )


def controller_owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference marked controller=true, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owned_by(obj: dict[str, Any], kind: str, group: str) -> str | None:
    """The name of the ``kind`` (of API group ``group``; "" for the core group) controlling ``obj``."""
    owner = controller_owner(obj)
    if owner is None or owner.get("kind") != kind:
        return None
    api_version = str(owner.get("apiVersion", ""))
    if (group and not api_version.startswith(group + "/")) or (not group and "/" in api_version):
        return None
    return str(owner.get("name", "")) or None


def own_name(obj: dict[str, Any]) -> Workload:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name", ""))
