"""SidecarSet in-place upgrades as a pure decision: SidecarSet + pods + now -> this round's upgrades.

OpenKruise's rules (``pkg/controller/sidecarset/sidecarset_processor.go`` and
``sidecarset_strategy.go``), rollbook's choices
in docs/sidecarset.md ("Upgrade in place"). No I/O and no wall clock: ``now`` only stamps annotations, so
the same input always gives the same round.

- matched pods M: active pods of the SidecarSet's scope and selector whose injected-list names it and
  that still have every sidecar container (and every native sidecar among their init containers);
- updated: the pod's recorded hash is the SidecarSet's; upgradable: the recorded without-image hash is
  the SidecarSet's (only image changes roll to running pods);
- candidates W: not updated, upgradable, selected by ``updateStrategy.selector``, not mid-upgrade (a
  ready sidecar the last upgrade has not restarted yet); least valuable first (unscheduled, pending,
  not ready, most recently ready, most restarts, newest), then priorityStrategy;
- partition P over |M|; ``n = |W| - P`` candidates at most; maxUnavailable U over |M| (rounded
  up, default 1): a not-ready candidate is taken for free, a ready one while busy < U; the walk stops at
  the first ready candidate that would exceed U.

Native sidecars (init containers with ``restartPolicy: Always``) are upgraded like the containers: their
image is set in ``spec.initContainers`` (the API server lets a running pod's init container images change),
the kubelet restarts them in place, and completion reads ``status.initContainerStatuses``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.kinds.cloneset.rules.podstate import PodView
from services.kinds.cloneset.rules.update import _priority_key
from services.kinds.sidecarset.rules.revisions import RevisionDecision, plan_revision, revisions_in_use
from services.model import intorpercent, labels
from services.model import sidecarset as ss
from services.model.sidecarset_streams import SIDECARSET_INPLACE_STATE_ANNOTATION, revision_name


@dataclass(frozen=True)
class PodUpgrade:
    """One pod to upgrade in place this round."""

    namespace: str
    pod: str
    uid: str
    from_revision: str  # the hash the pod had
    images: dict[str, str]  # sidecar container -> new image (only the ones that change; init ones too)
    patch: dict[str, Any]  # strategic merge patch: sidecar images + the pod's SidecarSet annotations


@dataclass(frozen=True)
class PodAssessment:
    """How the round sees one matched pod."""

    key: str  # <namespace>/<name>: a cluster-scoped SidecarSet matches pods of many namespaces
    revision: str  # the hash recorded on the pod for this SidecarSet
    updated: bool
    upgradable: bool
    upgrade_complete: bool
    running_ready: bool
    mid_upgrade: bool  # a ready sidecar not yet restarted by the last upgrade: not a candidate


@dataclass(frozen=True)
class SidecarSetRound:
    sidecarset: str
    revision: str  # the SidecarSet's kruise.io/sidecarset-hash
    revision_name: str  # the rollout's target (hash-based); the recorded revision is revisions.latest
    update_type: str  # RollingUpdate | NotUpdate
    paused: bool
    matched: list[PodAssessment]
    candidates: list[str]  # W, in upgrade order (<namespace>/<name>)
    partition: int  # P resolved over |M|
    max_unavailable: int  # U resolved over |M|
    expected_updated: int  # pods at the revision once this partition step is done
    upgrades: list[PodUpgrade]
    not_upgradable: list[str]  # not updated, and only recreation can give them the new spec
    status: dict[str, Any]
    revisions: RevisionDecision  # the latest revision (status.latestRevision), what to record and prune
    strategy: dict[str, Any] = field(default_factory=dict)
    containers: list[dict[str, Any]] = field(default_factory=list)  # the defaulted sidecar containers

    @property
    def rolling(self) -> bool:
        return self.update_type == "RollingUpdate"

    @property
    def done(self) -> bool:
        """Every matched pod is at the revision and its upgrade complete."""
        return all(p.updated and p.upgrade_complete for p in self.matched)


def _json_annotation(pod: Mapping[str, Any], key: str) -> dict[str, Any]:
    return ss.json_object(((pod.get("metadata") or {}).get("annotations") or {}).get(key))


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{ss.pod_namespace(pod)}/{(pod.get('metadata') or {}).get('name', '')}"


def _container_statuses(pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container's status by name, init containers' included: a native sidecar reports in
    ``initContainerStatuses`` (names are unique across both lists)."""
    status = pod.get("status") or {}
    return {
        c.get("name", ""): c
        for c in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    }


def is_matched(sidecarset: ss.SidecarSet, pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is in M: active, in scope, selected, injected by it, sidecars still there.

    The injected-list is the record of scope: a namespaceSelector is evaluated at injection only (the
    planner does not watch Namespaces), which is what the annotation says happened.
    """
    if not ss.is_active(pod):
        return False
    if sidecarset.name not in ss.injected_sidecarsets(pod):
        return False
    if sidecarset.namespace is not None and ss.pod_namespace(pod) != sidecarset.namespace:
        return False
    if not labels.matches(sidecarset.selector, (pod.get("metadata") or {}).get("labels") or {}):
        return False
    spec = pod.get("spec") or {}
    names = {c.get("name") for c in spec.get("containers") or ()}
    init_names = {c.get("name") for c in spec.get("initContainers") or ()}
    return all(c["name"] in names for c in sidecarset.containers) and all(
        c["name"] in init_names for c in sidecarset.native_sidecars
    )


def running_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def upgrade_complete(sidecarset_name: str, pod: Mapping[str, Any]) -> bool:
    """The pod's last in-place sidecar upgrade by this SidecarSet has taken effect: every restarted
    sidecar runs a different image id than it did before (no record: nothing in progress)."""
    state = _json_annotation(pod, SIDECARSET_INPLACE_STATE_ANNOTATION).get(sidecarset_name)
    if not isinstance(state, dict):
        return True
    statuses = _container_statuses(pod)
    for container, before in (state.get("lastContainerStatuses") or {}).items():
        now_id = str((statuses.get(container) or {}).get("imageID") or "")
        if not now_id or now_id == str((before or {}).get("imageID") or ""):
            return False
    return True


def mid_upgrade(sidecarset_name: str, pod: Mapping[str, Any]) -> bool:
    """A sidecar of the pod's last in-place upgrade by this SidecarSet is ready but still runs the image id
    it ran before the patch: the kubelet has not restarted it yet, so another upgrade must wait. A sidecar
    that is not ready (crash-looping on a bad image, say) does not block: fixing forward is allowed."""
    state = _json_annotation(pod, SIDECARSET_INPLACE_STATE_ANNOTATION).get(sidecarset_name)
    if not isinstance(state, dict):
        return False
    statuses = _container_statuses(pod)
    for container, before in (state.get("lastContainerStatuses") or {}).items():
        status = statuses.get(container) or {}
        now_id = str(status.get("imageID") or "")
        if status.get("ready") and (not now_id or now_id == str((before or {}).get("imageID") or "")):
            return True
    return False


def _assess(sidecarset: ss.SidecarSet, pod: Mapping[str, Any]) -> PodAssessment:
    recorded = ss.pod_sidecar_revisions(pod).get(sidecarset.name)
    revision = recorded.hash if recorded else ""
    return PodAssessment(
        key=pod_key(pod),
        revision=revision,
        updated=revision == sidecarset.hash,
        upgradable=recorded is not None and recorded.hash_without_image == sidecarset.hash_without_image,
        upgrade_complete=upgrade_complete(sidecarset.name, pod),
        running_ready=running_ready(pod),
        mid_upgrade=mid_upgrade(sidecarset.name, pod),
    )


def upgrade_patch(
    sidecarset: ss.SidecarSet, pod: Mapping[str, Any], now: datetime, controller_revision: str | None = None
) -> PodUpgrade:
    """The strategic merge patch upgrading ``pod`` to the SidecarSet's images: sidecar images by container
    name (``spec.containers``, and ``spec.initContainers`` for the init containers the hash covers), the
    pod's ``kruise.io/sidecarset-hash`` entry for this SidecarSet (others kept), and the in-place state
    recording the image ids the restarted sidecars run now (completion = they change). A plain init
    container has run to completion and the kubelet does not run it again, so its new image is only
    recorded in the spec and not waited for. The without-image hash annotation is left alone (OpenKruise
    writes it at injection only). The entry's ``controllerRevision`` is ``controller_revision`` (this
    round's latest revision), else the SidecarSet's ``status.latestRevision``."""
    metadata = pod.get("metadata") or {}
    stamp = ss.format_time(now)
    spec = pod.get("spec") or {}
    by_name = {c.get("name"): c for c in spec.get("containers") or ()}
    init_by_name = {c.get("name"): c for c in spec.get("initContainers") or ()}
    container_images = {
        c["name"]: c["image"]
        for c in sidecarset.containers
        if (by_name.get(c["name"]) or {}).get("image") != c["image"]
    }
    init_images = {
        c["name"]: c["image"]
        for c in sidecarset.upgradable_init_containers
        if c["name"] in init_by_name and init_by_name[c["name"]].get("image") != c["image"]
    }
    images = {**container_images, **init_images}
    restarted = set(container_images) | {
        c["name"] for c in sidecarset.native_sidecars if c["name"] in init_images
    }
    hashes = _json_annotation(pod, ss.HASH_ANNOTATION)
    previous = hashes.get(sidecarset.name)
    entry: dict[str, Any] = dict(previous) if isinstance(previous, dict) else {}
    entry.update({"updateTimestamp": stamp, "hash": sidecarset.hash, "sidecarSetName": sidecarset.name})
    entry.setdefault(
        "sidecarList", sorted(c["name"] for c in [*sidecarset.containers, *sidecarset.native_sidecars])
    )
    revision = sidecarset.controller_revision if controller_revision is None else controller_revision
    if revision:
        entry["controllerRevision"] = revision
    hashes[sidecarset.name] = entry
    statuses = _container_statuses(pod)
    states = _json_annotation(pod, SIDECARSET_INPLACE_STATE_ANNOTATION)
    states[sidecarset.name] = {
        "revision": sidecarset.hash,
        "updateTimestamp": stamp,
        "lastContainerStatuses": {
            name: {"imageID": str((statuses.get(name) or {}).get("imageID") or "")}
            for name in sorted(restarted)
        },
    }
    patch: dict[str, Any] = {
        "metadata": {
            "annotations": {
                ss.HASH_ANNOTATION: json.dumps(hashes, separators=(",", ":")),
                SIDECARSET_INPLACE_STATE_ANNOTATION: json.dumps(
                    states, separators=(",", ":"), sort_keys=True
                ),
            }
        }
    }
    if images:
        patch["spec"] = {}
        if container_images:
            patch["spec"]["containers"] = [
                {"name": name, "image": image} for name, image in sorted(container_images.items())
            ]
        if init_images:
            patch["spec"]["initContainers"] = [
                {"name": name, "image": image} for name, image in sorted(init_images.items())
            ]
    recorded = ss.pod_sidecar_revisions(pod).get(sidecarset.name)
    return PodUpgrade(
        namespace=ss.pod_namespace(pod),
        pod=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        from_revision=recorded.hash if recorded else "",
        images=images,
        patch=patch,
    )


def plan_sidecarset(
    sidecarset_obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    revisions: Iterable[Mapping[str, Any]] = (),
    collision_count: int = 0,
) -> SidecarSetRound:
    """This round of the SidecarSet's rolling in-place upgrade. ``revisions`` are the recorded revisions
    (ControllerRevision-shaped, ``services.kinds.sidecarset.rules.revisions``): the round registers the latest
    one, names it in the status (``latestRevision``) and in the upgraded pods' annotations, and prunes the
    history. Raises ``SidecarSetError`` for an invalid SidecarSet (the caller reports it; nothing is
    upgraded)."""
    sidecarset = ss.parse_sidecarset(sidecarset_obj)
    pods = list(pods)
    revision = plan_revision(sidecarset, revisions, collision_count, revisions_in_use(sidecarset, pods))
    strategy: dict[str, Any] = sidecarset.spec.get("updateStrategy") or {}
    update_type = str(strategy.get("type") or "RollingUpdate")
    paused = bool(strategy.get("paused"))
    by_key = {pod_key(p): p for p in pods if is_matched(sidecarset, p)}
    assessed = {key: _assess(sidecarset, by_key[key]) for key in sorted(by_key)}
    total = len(by_key)
    partition = intorpercent.partition_count(strategy.get("partition"), total)
    raw_unavailable = strategy.get("maxUnavailable")
    if raw_unavailable is None:
        raw_unavailable = ss.DEFAULT_MAX_UNAVAILABLE
    max_unavailable = intorpercent.scaled(raw_unavailable, total, round_up=True)
    update_selector = strategy.get("selector")

    def candidate(key: str) -> bool:
        a = assessed[key]
        if a.updated or not a.upgradable or a.mid_upgrade:
            return False
        labels_of = (by_key[key].get("metadata") or {}).get("labels") or {}
        return not update_selector or labels.matches(update_selector, labels_of)

    views = [(PodView(dict(by_key[key])), key) for key in assessed if candidate(key)]
    priority = _priority_key(strategy.get("priorityStrategy"))
    # Least valuable first (the pod name, then the namespace, break full ties: deterministic), then
    # priorityStrategy.
    if priority is None:
        views.sort(key=lambda vk: (vk[0].active_order_key(), vk[1]))
    else:
        views.sort(key=lambda vk: (priority(vk[0]), vk[0].active_order_key(), vk[1]))
    order = [key for _, key in views]
    updated = sum(1 for a in assessed.values() if a.updated)
    wanted = max(len(order) - partition, 0)
    upgrades: list[PodUpgrade] = []
    if update_type == "RollingUpdate" and not paused and wanted:
        busy = sum(1 for a in assessed.values() if a.updated and not (a.upgrade_complete and a.running_ready))
        for key in order[:wanted]:
            if assessed[key].running_ready:
                if busy >= max_unavailable:
                    break  # as OpenKruise's calculateUpgradeCount: the walk stops at the first blocked pod
                busy += 1
            upgrades.append(upgrade_patch(sidecarset, by_key[key], now, revision.latest.name))
    not_upgradable = sorted(a.key for a in assessed.values() if not a.updated and not a.upgradable)
    ready = [a for a in assessed.values() if a.upgrade_complete and a.running_ready]
    status = {
        "matchedPods": total,
        "updatedPods": updated,
        "readyPods": len(ready),
        "updatedReadyPods": sum(1 for a in ready if a.updated),
        "observedGeneration": int((sidecarset_obj.get("metadata") or {}).get("generation") or 0),
        "latestRevision": revision.latest.name,
        "collisionCount": revision.collision_count,
    }
    return SidecarSetRound(
        sidecarset=sidecarset.name,
        revision=sidecarset.hash,
        revision_name=revision_name(sidecarset.name, sidecarset.hash),
        update_type=update_type,
        paused=paused,
        matched=[assessed[k] for k in sorted(assessed)],
        candidates=order,
        partition=partition,
        max_unavailable=max_unavailable,
        expected_updated=updated + wanted,
        upgrades=upgrades,
        not_upgradable=not_upgradable,
        status=status,
        revisions=revision,
        strategy=strategy,
        containers=sidecarset.containers,
    )
