"""The StatefulSet controller (kube-controller-manager's statefulset controller): pods ``<set>-<ordinal>``
with stable names, ``hostname``/``subdomain`` and PVCs from ``volumeClaimTemplates``; ``OrderedReady``
(one pod at a time, in ordinal order, each Running and Ready before the next; scale-down from the highest
ordinal) or ``Parallel`` management; ControllerRevisions of the template (``controller-revision-hash``
label on pods, ``currentRevision``/``updateRevision`` in status, ``revisionHistoryLimit``); updates by
``RollingUpdate`` (highest ordinal first, down to ``partition``, one unavailable pod at a time) or
``OnDelete`` (a pod gets the new revision when it is deleted and re-created)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ApiError
from ..resources import CONTROLLER_REVISIONS, PODS, PVCS, STATEFULSETS
from ..store import Key, Obj, WatchEvent, key_of
from .base import (
    Controller,
    controlled,
    event_owner_keys,
    owner_reference,
    pod_available,
    pod_from_template,
    pod_ready,
    pod_terminal,
    safe_encode,
)

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
HASH_LABEL = "controller.kubernetes.io/hash"


# ---- decisions ---------------------------------------------------------------------------------------


def revision_data(sts: Obj) -> dict[str, Any]:
    """What a ControllerRevision of a StatefulSet stores: the template, as a patch replacing it."""
    template = json.loads(json.dumps((sts.get("spec") or {}).get("template") or {}))
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def revision_hash(data: dict[str, Any], collision_count: int = 0) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + (
        f"/{collision_count}" if collision_count else ""
    )
    return safe_encode(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"), 10)


def ordinal_of(sts_name: str, pod: Obj) -> int | None:
    match = re.fullmatch(re.escape(sts_name) + r"-(\d+)", pod["metadata"]["name"])
    return int(match.group(1)) if match else None


def healthy(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    """Running and Ready (and available for minReadySeconds), not being deleted."""
    return (
        (pod.get("status") or {}).get("phase") == "Running"
        and pod_ready(pod)
        and pod_available(pod, min_ready_seconds, now)
        and not pod["metadata"].get("deletionTimestamp")
    )


def pod_revision(pod: Obj) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")


def revision_for_ordinal(sts: Obj, ordinal: int, current: str, update: str) -> str:
    """newVersionedStatefulSetPod: below the partition a RollingUpdate keeps the current revision."""
    strategy = (sts.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        rolling = strategy.get("rollingUpdate")
        current_replicas = int((sts.get("status") or {}).get("currentReplicas") or 0)
        if rolling is None and ordinal < current_replicas:
            return current
        if rolling is not None and ordinal < int(rolling.get("partition") or 0):
            return current
    return update


@dataclass(frozen=True)
class Step:
    """One sync's pod actions: pods to create as (ordinal, revision), pods to delete by name."""

    create: tuple[tuple[int, str], ...] = ()
    delete: tuple[str, ...] = ()


def plan(sts: Obj, pods: dict[int, Obj], current: str, update: str, now: datetime) -> Step:
    """What updateStatefulSet does in one pass: create missing ordinals, replace failed pods, remove
    condemned ones (ordinals >= replicas), then roll one pod to the update revision. OrderedReady stops at
    the first pod that is not healthy; Parallel acts on every ordinal at once (updates stay one at a time)."""
    spec = sts.get("spec") or {}
    replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    parallel = spec.get("podManagementPolicy") == "Parallel"
    min_ready = int(spec.get("minReadySeconds") or 0)
    create: list[tuple[int, str]] = []
    delete: list[str] = []

    def step() -> Step:
        return Step(tuple(create), tuple(delete))

    for ordinal in range(replicas):
        pod = pods.get(ordinal)
        if pod is None:
            create.append((ordinal, revision_for_ordinal(sts, ordinal, current, update)))
        elif pod_terminal(pod):
            delete.append(pod["metadata"]["name"])  # a failed pod is replaced under the same name
        elif healthy(pod, min_ready, now):
            continue
        # A pod created, replaced, terminating or not yet ready: OrderedReady waits for it.
        if not parallel:
            return step()
    for ordinal in sorted((o for o in pods if o >= replicas), reverse=True):
        pod = pods[ordinal]
        if pod["metadata"].get("deletionTimestamp"):
            if not parallel:
                return step()
            continue
        others = [p for o, p in pods.items() if o != ordinal]
        if not parallel and any(not healthy(p, min_ready, now) for p in others):
            return step()
        delete.append(pod["metadata"]["name"])
        if not parallel:
            return step()
    if create or delete:
        return step()
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return step()  # OnDelete: pods take the new revision when they are deleted
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    for ordinal in range(replicas - 1, partition - 1, -1):
        pod = pods.get(ordinal)
        if pod is None:
            return step()
        if pod_revision(pod) != update and not pod["metadata"].get("deletionTimestamp"):
            delete.append(pod["metadata"]["name"])
            return step()
        if not healthy(pod, min_ready, now):
            return step()
    return step()


def set_status(sts: Obj, pods: list[Obj], current: str, update: str, now: datetime) -> dict[str, Any]:
    spec = sts.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    status = dict(sts.get("status") or {})
    live = [p for p in pods if not pod_terminal(p)]
    ready = [p for p in live if pod_ready(p) and (p.get("status") or {}).get("phase") == "Running"]
    counts = {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": len(live),
        "readyReplicas": len(ready),
        "availableReplicas": sum(1 for p in ready if pod_available(p, min_ready, now)),
        "currentReplicas": sum(1 for p in live if pod_revision(p) == current),
        "updatedReplicas": sum(1 for p in live if pod_revision(p) == update),
        "currentRevision": current,
        "updateRevision": update,
        "collisionCount": int(status.get("collisionCount") or 0),
    }
    status.update(counts)
    rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
    if (
        rolling
        and status["updatedReplicas"] == status["replicas"]
        and status["readyReplicas"] == status["replicas"]
    ):
        status["currentRevision"] = update  # completeRollingUpdate
        status["currentReplicas"] = status["updatedReplicas"]
    return status


def history_to_delete(revisions: list[Obj], keep: set[str], limit: int) -> list[Obj]:
    """Revisions beyond revisionHistoryLimit that no live pod and neither status revision uses, oldest
    first."""
    unused = sorted(
        (r for r in revisions if r["metadata"]["name"] not in keep), key=lambda r: int(r.get("revision") or 0)
    )
    return unused[: max(len(unused) - limit, 0)]


# ---- the controller ----------------------------------------------------------------------------------


class StatefulSetController(Controller):
    name = "statefulset-controller"
    watches = (STATEFULSETS, PODS, CONTROLLER_REVISIONS)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is STATEFULSETS:
            return [key_of(event.obj)]
        return event_owner_keys(event, "StatefulSet")

    async def sync(self, key: Key) -> float | None:
        sts = self.store.find(STATEFULSETS, *key)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return None
        now = self.now()
        current, update = self._revisions(sts)
        pods = {o: p for p in controlled(self.store, sts, PODS) if (o := ordinal_of(key[1], p)) is not None}
        if (sts.get("status") or {}).get("currentRevision") is None:
            sts = self.write_status(STATEFULSETS, sts, dict(sts.get("status") or {}, currentRevision=current))
        step = plan(sts, pods, current, update, now)
        failed = False
        for ordinal, revision in step.create:
            try:
                await self._create_pod(sts, ordinal, revision)
            except ApiError:
                failed = True
                break
        for name in step.delete:
            pod = next(p for p in pods.values() if p["metadata"]["name"] == name)
            self.delete_pod(pod)
        sts = self.store.find(STATEFULSETS, *key) or sts
        all_pods = controlled(self.store, sts, PODS)
        status = set_status(sts, all_pods, current, update, now)
        self.write_status(STATEFULSETS, sts, status)
        keep = {status["currentRevision"], update} | {pod_revision(p) for p in all_pods}
        limit = int((sts.get("spec") or {}).get("revisionHistoryLimit", 10))
        for stale in history_to_delete(controlled(self.store, sts, CONTROLLER_REVISIONS), keep, limit):
            with contextlib.suppress(ApiError):
                self.store.delete(CONTROLLER_REVISIONS, key[0], stale["metadata"]["name"])
        return 1.0 if failed else None

    def _revisions(self, sts: Obj) -> tuple[str, str]:
        """(current, update) revision names, creating the update revision (or renumbering an equal older
        one, as a rollback does) when the template changed."""
        namespace, name = sts["metadata"].get("namespace", ""), sts["metadata"]["name"]
        revisions = controlled(self.store, sts, CONTROLLER_REVISIONS)
        data = revision_data(sts)
        latest = max((int(r.get("revision") or 0) for r in revisions), default=0)
        equal = [r for r in revisions if r.get("data") == data]
        if equal:
            chosen = max(equal, key=lambda r: int(r.get("revision") or 0))
            if int(chosen.get("revision") or 0) < latest:
                chosen = self.store.update(
                    CONTROLLER_REVISIONS,
                    namespace,
                    chosen["metadata"]["name"],
                    dict(chosen, revision=latest + 1),
                )
            update = chosen["metadata"]["name"]
        else:
            collisions = int((sts.get("status") or {}).get("collisionCount") or 0)
            digest = revision_hash(data, collisions)
            labels = dict(
                ((sts.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
            )
            labels[HASH_LABEL] = digest
            body = {
                "metadata": {
                    "name": f"{name}-{digest}",
                    "namespace": namespace,
                    "labels": labels,
                    "ownerReferences": [owner_reference(sts)],
                },
                "data": data,
                "revision": latest + 1,
            }
            try:
                update = self.store.create(CONTROLLER_REVISIONS, namespace, body)["metadata"]["name"]
            except ApiError as exc:
                if exc.code != 409:
                    raise
                self.write_status(
                    STATEFULSETS, sts, dict(sts.get("status") or {}, collisionCount=collisions + 1)
                )
                raise
        names = {r["metadata"]["name"] for r in controlled(self.store, sts, CONTROLLER_REVISIONS)}
        current = (sts.get("status") or {}).get("currentRevision")
        if current not in names:
            current = update
        return str(current), update

    async def _create_pod(self, sts: Obj, ordinal: int, revision: str) -> None:
        namespace, name = sts["metadata"].get("namespace", ""), sts["metadata"]["name"]
        stored = self.store.find(CONTROLLER_REVISIONS, namespace, revision)
        template = (sts.get("spec") or {}).get("template") or {}
        if stored is not None:
            template = {k: v for k, v in stored["data"]["spec"]["template"].items() if k != "$patch"}
        pod_name = f"{name}-{ordinal}"
        pod = pod_from_template(template, sts, pod_name)
        pod["metadata"]["labels"].update(
            {REVISION_LABEL: revision, POD_NAME_LABEL: pod_name, POD_INDEX_LABEL: str(ordinal)}
        )
        spec = pod["spec"]
        spec["hostname"] = pod_name
        if (sts.get("spec") or {}).get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        volumes = [v for v in spec.get("volumes") or []]
        for claim in (sts.get("spec") or {}).get("volumeClaimTemplates") or []:
            claim_name = f"{claim['metadata']['name']}-{pod_name}"
            if self.store.find(PVCS, namespace, claim_name) is None:
                body = {
                    "metadata": {
                        "name": claim_name,
                        "namespace": namespace,
                        "labels": dict(
                            ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                        ),
                    },
                    "spec": json.loads(json.dumps(claim.get("spec") or {})),
                }
                await self.create(PVCS, namespace, body)
            volumes = [v for v in volumes if v.get("name") != claim["metadata"]["name"]]
            volumes.append(
                {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
            )
        if volumes:
            spec["volumes"] = volumes
        await self.create(PODS, namespace, pod)
