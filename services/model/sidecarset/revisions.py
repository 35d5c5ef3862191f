"""SidecarSet revisions: reading back what a pod got (the per-SidecarSet revisions recorded on it, the
injected list), and choosing the recorded revision ``injectionStrategy.revision`` injects instead of the
latest (OpenKruise's ``getSuitableRevisionSidecarSet`` and its history control)."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from services.model import labels
from services.model.events import RevisionCreated, RevisionsPruned
from services.model.sidecarset.core import (
    ALWAYS,
    CUSTOM_VERSION_LABEL,
    HASH_ANNOTATION,
    HASH_WITHOUT_IMAGE_ANNOTATION,
    INJECTED_LIST_ANNOTATION,
    PARTIAL,
    InjectionError,
    PodSidecarRevision,
    SidecarSet,
    json_object,
)
from services.model.sidecarset.hashes import sidecarset_hash, sidecarset_hash_without_image

# What a SidecarSet revision stores of the spec (OpenKruise's copySidecarSetSpecRevision).
REVISION_FIELDS = ("containers", "initContainers", "volumes", "imagePullSecrets", "patchPodMetadata")


def revision_data(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a SidecarSet revision stores (OpenKruise's ``copySidecarSetSpecRevision``)."""
    return {"spec": {"$patch": "replace", **{name: spec.get(name) for name in REVISION_FIELDS}}}


def pod_sidecar_revisions(pod: Mapping[str, Any]) -> dict[str, PodSidecarRevision]:
    """Per SidecarSet name, the revision recorded on the pod at injection (or by a later upgrade).

    Reads the JSON form and OpenKruise's older flat ``{"name": "hash"}`` form.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    hashes = json_object(annotations.get(HASH_ANNOTATION))
    without = json_object(annotations.get(HASH_WITHOUT_IMAGE_ANNOTATION))
    result: dict[str, PodSidecarRevision] = {}
    for name, entry in hashes.items():
        other = without.get(name)
        other_hash = other.get("hash", "") if isinstance(other, dict) else str(other or "")
        if isinstance(entry, dict):
            result[name] = PodSidecarRevision(
                sidecarset=name,
                hash=str(entry.get("hash", "")),
                hash_without_image=other_hash,
                sidecars=list(entry.get("sidecarList") or []),
                controller_revision=str(entry.get("controllerRevision", "")),
                update_timestamp=str(entry.get("updateTimestamp", "")),
            )
        else:
            result[name] = PodSidecarRevision(sidecarset=name, hash=str(entry), hash_without_image=other_hash)
    return result


def injected_sidecarsets(pod: Mapping[str, Any]) -> list[str]:
    """Names in ``kruise.io/sidecarset-injected-list``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return [n for n in annotations.get(INJECTED_LIST_ANNOTATION, "").split(",") if n]


# --- injecting a recorded revision (injectionStrategy.revision) -------------------------------------------

# OpenKruise's label selecting a SidecarSet's ControllerRevisions (sidecarcontrol.SidecarSetKindName).
SIDECARSET_NAME_LABEL = "kruise.io/sidecarset-name"


@dataclass(frozen=True)
class PinnedRevision:
    """``injectionStrategy.revision``: which recorded revision to inject, and when."""

    revision_name: str
    custom_version: str
    policy: str  # Always (also when empty) or Partial


def pinned_revision(sidecarset: SidecarSet) -> PinnedRevision | None:
    """The revision ``injectionStrategy.revision`` pins, or None (inject the latest) when it names none."""
    revision = (sidecarset.spec.get("injectionStrategy") or {}).get("revision") or {}
    name = str(revision.get("revisionName") or "")
    custom = str(revision.get("customVersion") or "")
    if not name and not custom:
        return None
    return PinnedRevision(name, custom, str(revision.get("policy") or ALWAYS))


def recorded_revision(
    sidecarset: SidecarSet, pinned: PinnedRevision, recorded: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any]:
    """The ControllerRevision-shaped record ``pinned`` names among ``recorded`` (this SidecarSet's history).

    ``revisionName`` wins over ``customVersion``; a custom version takes the highest-numbered revision with
    that label (ties: the latest created, then the greatest name). None found: InjectionError
    (OpenKruise's webhook refuses the pod).
    """
    names = sorted(str((record.get("metadata") or {}).get("name") or "") for record in recorded)
    known = f"recorded: {', '.join(names)}" if names else "no revision of it is recorded"
    if pinned.revision_name:
        for record in recorded:
            if (record.get("metadata") or {}).get("name") == pinned.revision_name:
                return record
        raise InjectionError(
            f"SidecarSet {sidecarset.name!r}: injectionStrategy.revision.revisionName "
            f"{pinned.revision_name!r} is not a recorded revision of it ({known})"
        )
    labelled = [
        record
        for record in recorded
        if ((record.get("metadata") or {}).get("labels") or {}).get(CUSTOM_VERSION_LABEL)
        == pinned.custom_version
        and isinstance(record.get("revision"), int)
    ]
    if not labelled:
        raise InjectionError(
            f"SidecarSet {sidecarset.name!r}: no recorded revision has custom version "
            f"{pinned.custom_version!r} (injectionStrategy.revision.customVersion; {known})"
        )
    return max(labelled, key=_history_order)


def _history_order(record: Mapping[str, Any]) -> tuple[int, str, str]:
    """OpenKruise's ``history.SortControllerRevisions`` order: revision number, then creation time (RFC 3339
    in UTC, so the strings sort as the times do; none sorts first), then name."""
    metadata = record.get("metadata") or {}
    return record["revision"], str(metadata.get("creationTimestamp") or ""), str(metadata.get("name") or "")


def pin_resolves(sidecarset: SidecarSet, recorded: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``recorded`` holds the revision ``injectionStrategy.revision`` pins (True when none is
    pinned)."""
    pinned = pinned_revision(sidecarset)
    if pinned is None:
        return True
    try:
        recorded_revision(sidecarset, pinned, recorded)
    except InjectionError:
        return False
    return True


def unpinned(sidecarset: SidecarSet) -> SidecarSet:
    """``sidecarset`` without ``injectionStrategy.revision``: injects its latest spec."""
    strategy = {k: v for k, v in (sidecarset.spec.get("injectionStrategy") or {}).items() if k != "revision"}
    return replace(sidecarset, spec={**sidecarset.spec, "injectionStrategy": strategy})


def history_sidecarset(sidecarset: SidecarSet, record: Mapping[str, Any]) -> SidecarSet:
    """The SidecarSet as it was at ``record``: its containers, init containers, volumes, imagePullSecrets and
    patchPodMetadata from the revision, everything else (selector, strategies) current; the hashes the
    revision recorded (computed when it has none) and the revision's name as the controller revision."""
    data = (record.get("data") or {}).get("spec") or {}
    spec = copy.deepcopy(dict(sidecarset.spec))
    for name in REVISION_FIELDS:
        value = data.get(name)
        if value is None:
            spec.pop(name, None)
        else:
            spec[name] = copy.deepcopy(value)
    metadata = record.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return replace(
        sidecarset,
        spec=spec,
        hash=str(annotations.get(HASH_ANNOTATION) or "") or sidecarset_hash(spec),
        hash_without_image=str(annotations.get(HASH_WITHOUT_IMAGE_ANNOTATION) or "")
        or sidecarset_hash_without_image(spec),
        controller_revision=str(metadata.get("name") or ""),
    )


def partial_draw(sidecarset: str, namespace: str, pod: str, injection_id: str) -> float:
    """The ``Partial`` policy's draw in [0, 1). OpenKruise draws at random; rollbook derives it from the
    SidecarSet, the pod (namespace, name or generateName) and the admission uid, so replaying an
    injection gives the same choice."""
    digest = hashlib.sha256(f"{sidecarset}\x00{namespace}\x00{pod}\x00{injection_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def injects_history(
    sidecarset: SidecarSet, pinned: PinnedRevision, pod: Mapping[str, Any], draw: float
) -> bool:
    """Whether the pinned revision (not the latest) goes into ``pod`` (OpenKruise's
    ``getSuitableRevisionSidecarSet``): always while ``updateStrategy.paused`` or with policy ``Always``;
    with ``Partial``, a pod ``updateStrategy.selector`` does not select gets it, the others get it when
    ``draw`` ≤ the partition percent (never with an integer partition; a string partition that is not a
    percentage refuses the pod)."""
    strategy = sidecarset.spec.get("updateStrategy") or {}
    if strategy.get("paused") or pinned.policy != PARTIAL:
        return True
    selector = strategy.get("selector")
    if selector and not labels.matches(selector, (pod.get("metadata") or {}).get("labels") or {}):
        return True
    partition = strategy.get("partition")
    if not isinstance(partition, str):  # none, or an integer: the latest
        return False
    # Any string must be a percentage (OpenKruise's ParsePercentageAsFloat64, whose error refuses the pod):
    # "5" is not 5%. Only a NotUpdate SidecarSet's partition goes unvalidated, so only it gets here.
    try:
        if not partition.endswith("%"):
            raise ValueError(partition)
        probability = float(partition[:-1]) / 100
    except ValueError:
        raise InjectionError(
            f"SidecarSet {sidecarset.name!r}: updateStrategy.partition {partition!r} is not a percentage"
        ) from None
    return draw <= probability


def revision_to_inject(
    sidecarset: SidecarSet,
    pod: Mapping[str, Any],
    recorded: Sequence[Mapping[str, Any]],
    *,
    namespace: str,
    injection_id: str,
) -> SidecarSet:
    """The SidecarSet to inject into ``pod``: the latest, or the revision ``injectionStrategy`` pins."""
    pinned = pinned_revision(sidecarset)
    if pinned is None:
        return sidecarset
    record = recorded_revision(sidecarset, pinned, recorded)
    if not isinstance((record.get("data") or {}).get("spec"), Mapping):
        raise InjectionError(  # recorded by a planner before revisions carried their data
            f"SidecarSet {sidecarset.name!r}: revision {(record.get('metadata') or {}).get('name')!r} "
            "was recorded without its spec, so it cannot be injected"
        )
    history = history_sidecarset(sidecarset, record)
    metadata = pod.get("metadata") or {}
    pod_name = str(metadata.get("name") or metadata.get("generateName") or "")
    draw = partial_draw(sidecarset.name, namespace, pod_name, injection_id)
    return history if injects_history(sidecarset, pinned, pod, draw) else sidecarset


def fold_revision(revisions: dict[str, dict[str, Any]], event: object) -> None:
    """Fold one event of a SidecarSet's decisions stream into its recorded revisions (name -> the
    ControllerRevision-shaped record): ``RevisionCreated`` records one (a re-numbering replaces it; a
    record written before revisions carried their data keeps its name and number only, so the planner
    records the revision afresh), ``RevisionsPruned`` drops them. Other events change nothing."""
    match event:
        case RevisionCreated():
            revisions[event.name] = dict(event.object) or {
                "metadata": {"name": event.name},
                "revision": event.revision,
            }
        case RevisionsPruned():
            for name in event.names:
                revisions.pop(name, None)
