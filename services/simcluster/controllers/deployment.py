"""The Deployment controller (kube-controller-manager's deployment controller): a ReplicaSet per pod
template, named ``<deployment>-<pod-template-hash>``; rolling updates bounded by ``maxSurge`` and
``maxUnavailable``; Recreate; proportional scaling while a rollout is under way; ``paused``; the
``deployment.kubernetes.io/revision`` annotation; ``revisionHistoryLimit``; the ``Available`` and
``Progressing`` conditions with ``progressDeadlineSeconds`` (``ProgressDeadlineExceeded``).

The functions before ``DeploymentController`` are the decisions, pure and table-tested with upstream's
cases (tests/simcluster/test_deployment_rules.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ..errors import ApiError
from ..resources import DEPLOYMENTS, PODS, REPLICASETS
from ..store import Key, Obj, WatchEvent, key_of
from .base import (
    Controller,
    controlled,
    drop_condition,
    event_owner_keys,
    find_condition,
    iso,
    owner_key,
    owner_reference,
    parse_time,
    pod_terminal,
    put_condition,
    safe_encode,
    scaled_value,
)

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Annotations of a Deployment that are not copied to its ReplicaSets (as annotationsToSkip upstream).
_SKIPPED_ANNOTATIONS = {
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS,
    MAX_REPLICAS,
}
MAX_INT32 = 2**31 - 1

# Progressing reasons (pkg/controller/deployment/util).
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"


# ---- decisions ---------------------------------------------------------------------------------------


def replicas_of(obj: Obj) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def status_int(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def is_rolling(deployment: Obj) -> bool:
    return ((deployment.get("spec") or {}).get("strategy") or {}).get(
        "type", "RollingUpdate"
    ) == "RollingUpdate"


def resolve_fenceposts(
    max_surge: int | str | None, max_unavailable: int | str | None, desired: int
) -> tuple[int, int]:
    """(surge, unavailable): surge rounds up, unavailable down; both zero makes unavailable 1, so a
    rollout can always proceed. A malformed value is a ValueError."""
    surge = scaled_value(max_surge, desired, round_up=True)
    unavailable = scaled_value(max_unavailable, desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _rolling_params(deployment: Obj) -> dict[str, Any]:
    return ((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}


def max_surge(deployment: Obj) -> int:
    if not is_rolling(deployment):
        return 0
    params = _rolling_params(deployment)
    return resolve_fenceposts(params.get("maxSurge"), params.get("maxUnavailable"), replicas_of(deployment))[
        0
    ]


def max_unavailable(deployment: Obj) -> int:
    """MaxUnavailable: 0 for Recreate or no replicas, never more than the replicas."""
    replicas = replicas_of(deployment)
    if not is_rolling(deployment) or replicas == 0:
        return 0
    params = _rolling_params(deployment)
    _, unavailable = resolve_fenceposts(params.get("maxSurge"), params.get("maxUnavailable"), replicas)
    return min(unavailable, replicas)


def min_available(deployment: Obj) -> int:
    if not is_rolling(deployment):
        return 0
    return replicas_of(deployment) - max_unavailable(deployment)


def template_hash(template: Obj, collision_count: int | None) -> str:
    """The pod-template-hash: a digest of the template (and the collision count, when there is one)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    if collision_count:
        text += f"/{collision_count}"
    return safe_encode(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"), 10)


def _without_hash(template: Obj) -> Obj:
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != HASH_LABEL}
    meta["labels"] = labels
    if not labels:
        meta.pop("labels")
    out = dict(template, metadata=meta)
    if not meta:
        out.pop("metadata")
    return out


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """Two pod templates are the same ignoring the pod-template-hash label (EqualIgnoreHash)."""
    return _without_hash(a) == _without_hash(b)


def revision_of(obj: Obj) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _created(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


def find_new_replica_set(deployment: Obj, replica_sets: list[Obj]) -> Obj | None:
    """The oldest ReplicaSet whose template is the Deployment's (FindNewReplicaSet)."""
    template = (deployment.get("spec") or {}).get("template") or {}
    for rs in sorted(replica_sets, key=_created):
        if equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, template):
            return rs
    return None


def new_rs_new_replicas(deployment: Obj, all_rss: list[Obj], new_rs: Obj) -> int:
    """How many replicas the new ReplicaSet may have now (NewRSNewReplicas)."""
    replicas = replicas_of(deployment)
    if not is_rolling(deployment):
        return replicas
    current = sum(replicas_of(rs) for rs in all_rss)
    max_total = replicas + max_surge(deployment)
    if current >= max_total:
        return replicas_of(new_rs)
    scale_up = min(max_total - current, replicas - replicas_of(new_rs))
    return replicas_of(new_rs) + scale_up


def cleanup_unhealthy(old_rss: list[Obj], max_cleanup: int) -> dict[str, int]:
    """Old ReplicaSets scaled down by their unavailable pods first, at most ``max_cleanup`` in all
    (cleanupUnhealthyReplicas): name -> new replicas."""
    out: dict[str, int] = {}
    total = 0
    for rs in sorted(old_rss, key=_created):
        if total >= max_cleanup:
            break
        replicas, available = replicas_of(rs), status_int(rs, "availableReplicas")
        if replicas == 0 or replicas == available:
            continue
        down = min(max_cleanup - total, replicas - available)
        out[rs["metadata"]["name"]] = replicas - down
        total += down
    return out


def scale_down_old(deployment: Obj, all_rss: list[Obj], old_rss: list[Obj]) -> dict[str, int]:
    """Old ReplicaSets scaled down as far as availability allows (scaleDownOldReplicaSetsForRollingUpdate)."""
    available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
    allowed = available - min_available(deployment)
    out: dict[str, int] = {}
    if allowed <= 0:
        return out
    done = 0
    for rs in sorted(old_rss, key=_created):
        if done >= allowed:
            break
        replicas = replicas_of(rs)
        if replicas == 0:
            continue
        down = min(replicas, allowed - done)
        out[rs["metadata"]["name"]] = replicas - down
        done += down
    return out


def reconcile_old_replica_sets(
    deployment: Obj, all_rss: list[Obj], old_rss: list[Obj], new_rs: Obj | None
) -> dict[str, int]:
    """The old ReplicaSets to scale down in one step of a rolling update (reconcileOldReplicaSets): name ->
    new replicas. Unhealthy old replicas go first; then as many as keep ``minAvailable``, never counting
    the new ReplicaSet's unavailable pods as removable."""
    if sum(replicas_of(rs) for rs in old_rss) == 0:
        return {}
    all_pods = sum(replicas_of(rs) for rs in all_rss)
    new_unavailable = 0
    if new_rs is not None:
        new_unavailable = replicas_of(new_rs) - status_int(new_rs, "availableReplicas")
    max_scaled_down = all_pods - min_available(deployment) - new_unavailable
    if max_scaled_down <= 0:
        return {}
    changes = cleanup_unhealthy(old_rss, max_scaled_down)

    def after(rs: Obj) -> Obj:
        name = rs["metadata"]["name"]
        if name not in changes:
            return rs
        return dict(rs, spec=dict(rs.get("spec") or {}, replicas=changes[name]))

    olds = [after(rs) for rs in old_rss]
    news = [after(rs) for rs in all_rss]
    changes.update(scale_down_old(deployment, news, olds))
    return changes


def deployment_complete(deployment: Obj, status: dict[str, Any]) -> bool:
    replicas = replicas_of(deployment)
    return (
        int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("replicas") or 0) == replicas
        and int(status.get("availableReplicas") or 0) == replicas
        and int(status.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation") or 0)
    )


def deployment_progressing(deployment: Obj, new_status: dict[str, Any]) -> bool:
    old = deployment.get("status") or {}

    def get(status: dict[str, Any], field: str) -> int:
        return int(status.get(field) or 0)

    old_old = get(old, "replicas") - get(old, "updatedReplicas")
    new_old = get(new_status, "replicas") - get(new_status, "updatedReplicas")
    return (
        get(new_status, "updatedReplicas") > get(old, "updatedReplicas")
        or new_old < old_old
        or get(new_status, "readyReplicas") > get(old, "readyReplicas")
        or get(new_status, "availableReplicas") > get(old, "availableReplicas")
    )


def has_progress_deadline(deployment: Obj) -> bool:
    deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
    return deadline is not None and int(deadline) != MAX_INT32


def deployment_timed_out(deployment: Obj, status: dict[str, Any], now: datetime) -> bool:
    """The Progressing condition was last updated longer than progressDeadlineSeconds ago."""
    if not has_progress_deadline(deployment):
        return False
    condition = find_condition(status.get("conditions"), "Progressing")
    if condition is None:
        return False
    if condition.get("reason") == NEW_RS_AVAILABLE:
        return False
    if condition.get("reason") == TIMED_OUT:
        return True
    since = parse_time(condition.get("lastUpdateTime"))
    if since is None:
        return False
    deadline = int((deployment.get("spec") or {}).get("progressDeadlineSeconds") or 0)
    return since + timedelta(seconds=deadline) < now


def condition(type_: str, status: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = iso(now)
    return {
        "type": type_,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def calculate_status(
    deployment: Obj, all_rss: list[Obj], new_rs: Obj | None, now: datetime
) -> dict[str, Any]:
    """The replica counts and the Available condition (calculateStatus)."""
    available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
    total = replicas_of(deployment)
    status = dict(deployment.get("status") or {})
    status.update(
        {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": sum(status_int(rs, "replicas") for rs in all_rss),
            "updatedReplicas": status_int(new_rs, "replicas") if new_rs is not None else 0,
            "readyReplicas": sum(status_int(rs, "readyReplicas") for rs in all_rss),
            "availableReplicas": available,
            "unavailableReplicas": max(total - available, 0),
        }
    )
    if available >= total - max_unavailable(deployment):
        wanted = condition(
            "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", now
        )
    else:
        wanted = condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    current = find_condition(status.get("conditions"), "Available")
    if current is None or current.get("status") != wanted["status"]:
        status["conditions"] = put_condition(status.get("conditions"), wanted)
    for zero in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
        if not status[zero]:
            status.pop(zero)  # omitempty, as the API serves them
    return status


def rollout_status(
    deployment: Obj, all_rss: list[Obj], new_rs: Obj | None, now: datetime
) -> tuple[dict[str, Any], float | None]:
    """The status with the Progressing condition (syncRolloutStatus), and when to look again for the
    progress deadline."""
    status = calculate_status(deployment, all_rss, new_rs, now)
    full = {**{k: 0 for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")}, **status}
    conditions = status.get("conditions") or []
    if not has_progress_deadline(deployment):
        conditions = drop_condition(conditions, "Progressing")
    current = find_condition(conditions, "Progressing")
    paused = bool((deployment.get("spec") or {}).get("paused"))
    complete_before = (
        full["replicas"] == full["updatedReplicas"]
        and current is not None
        and current.get("reason") == NEW_RS_AVAILABLE
    )
    rs_name = new_rs["metadata"]["name"] if new_rs is not None else ""
    if has_progress_deadline(deployment) and not complete_before and not paused:
        if deployment_complete(deployment, full):
            conditions = put_condition(
                conditions,
                condition(
                    "Progressing",
                    "True",
                    NEW_RS_AVAILABLE,
                    f'ReplicaSet "{rs_name}" has successfully progressed.',
                    now,
                ),
            )
        elif deployment_progressing(deployment, full):
            wanted = condition(
                "Progressing", "True", RS_UPDATED, f'ReplicaSet "{rs_name}" is progressing.', now
            )
            if current is not None and current.get("status") == "True":
                wanted["lastTransitionTime"] = current.get("lastTransitionTime", wanted["lastTransitionTime"])
            conditions = put_condition(conditions, wanted)
        elif deployment_timed_out(deployment, {**status, "conditions": conditions}, now):
            conditions = put_condition(
                conditions,
                condition(
                    "Progressing",
                    "False",
                    TIMED_OUT,
                    f'ReplicaSet "{rs_name}" has timed out progressing.',
                    now,
                ),
            )
    status["conditions"] = conditions
    recheck: float | None = None
    current = find_condition(conditions, "Progressing")
    if (
        current is not None
        and current.get("status") == "True"
        and current.get("reason") != NEW_RS_AVAILABLE
        and has_progress_deadline(deployment)
        and not deployment_complete(deployment, full)
    ):
        since = parse_time(current.get("lastUpdateTime")) or now
        deadline = int((deployment.get("spec") or {}).get("progressDeadlineSeconds") or 0)
        recheck = max((since + timedelta(seconds=deadline) - now).total_seconds(), 0.0) + 1.0
    return status, recheck


def paused_condition(deployment: Obj, now: datetime) -> list[dict[str, Any]] | None:
    """checkPausedConditions: the Progressing condition a pause or a resume sets, or None."""
    if not has_progress_deadline(deployment):
        return None
    conditions = (deployment.get("status") or {}).get("conditions") or []
    current = find_condition(conditions, "Progressing")
    paused = bool((deployment.get("spec") or {}).get("paused"))
    if paused and (current is None or current.get("reason") != PAUSED):
        return put_condition(
            conditions, condition("Progressing", "Unknown", PAUSED, "Deployment is paused", now)
        )
    if not paused and current is not None and current.get("reason") == PAUSED:
        return put_condition(
            conditions, condition("Progressing", "Unknown", RESUMED, "Deployment is resumed", now)
        )
    return None


def _round(value: float) -> int:
    """integer.RoundToInt32: half away from zero."""
    return int(value - 0.5) if value < 0 else int(value + 0.5)


def _max_replicas(rs: Obj, deployment: Obj) -> int:
    """The Deployment's replicas + surge when ``rs`` was last scaled (its max-replicas annotation), else
    the Deployment's current status.replicas."""
    try:
        value = int(((rs.get("metadata") or {}).get("annotations") or {}).get(MAX_REPLICAS, ""))
    except ValueError:
        value = 0
    return value if value > 0 else status_int(deployment, "replicas")


def proportional_scale(deployment: Obj, active: list[Obj], new_rs: Obj | None) -> dict[str, int]:
    """A scaling event (spec.replicas changed) spread over the active ReplicaSets in proportion to their
    size (the controller's scale() with getReplicaSetFraction/getProportion): each gets its share of the
    new replicas + maxSurge, rounded; what rounding leaves goes to the largest (newer first when scaling
    up, older first when scaling down). Name -> new replicas, for those that change."""
    replicas = replicas_of(deployment)
    if not active:
        return {}
    if len(active) == 1:
        return {active[0]["metadata"]["name"]: replicas} if replicas_of(active[0]) != replicas else {}
    if (
        new_rs is not None
        and replicas_of(new_rs) == replicas
        and status_int(new_rs, "availableReplicas") == replicas
    ):
        return {rs["metadata"]["name"]: 0 for rs in active if rs is not new_rs}
    allowed = replicas + max_surge(deployment)
    to_add = allowed - sum(replicas_of(rs) for rs in active)
    if to_add == 0:
        return {}
    by_age = sorted(active, key=_created, reverse=to_add > 0)  # newer first when scaling up
    ordered = sorted(by_age, key=lambda rs: -replicas_of(rs))  # stable: largest first
    out: dict[str, int] = {}
    added = 0
    for rs in ordered:
        proportion = 0
        annotated = _max_replicas(rs, deployment)
        if annotated > 0:
            fraction = _round(replicas_of(rs) * allowed / annotated) - replicas_of(rs)
            left = to_add - added
            proportion = min(fraction, left) if to_add > 0 else max(fraction, left)
        out[rs["metadata"]["name"]] = replicas_of(rs) + proportion
        added += proportion
    first = ordered[0]["metadata"]["name"]
    out[first] = max(out[first] + (to_add - added), 0)
    sizes = {rs["metadata"]["name"]: replicas_of(rs) for rs in active}
    return {name: value for name, value in out.items() if value != sizes[name]}


def cleanup_candidates(deployment: Obj, old_rss: list[Obj]) -> list[Obj]:
    """Old ReplicaSets beyond revisionHistoryLimit that can go: scaled to 0, no pods, synced; oldest
    revision first."""
    limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
    if limit is None:
        return []
    alive = [rs for rs in old_rss if not rs["metadata"].get("deletionTimestamp")]
    diff = len(alive) - int(limit)
    if diff <= 0:
        return []
    out = []
    # The ``diff`` oldest are looked at; one that still has pods is kept this time (as upstream does).
    for rs in sorted(alive, key=lambda r: (revision_of(r), _created(r)))[:diff]:
        if (
            status_int(rs, "replicas") != 0
            or replicas_of(rs) != 0
            or int(rs["metadata"].get("generation") or 0) > status_int(rs, "observedGeneration")
        ):
            continue
        out.append(rs)
    return out


def is_scaling_event(deployment: Obj, active: list[Obj]) -> bool:
    replicas = str(replicas_of(deployment))
    for rs in active:
        desired = ((rs.get("metadata") or {}).get("annotations") or {}).get(DESIRED_REPLICAS)
        if desired is not None and desired != replicas:
            return True
    return False


def replica_set_annotations(deployment: Obj, current: dict[str, str], revision: int) -> dict[str, str]:
    """The annotations a new (or newly current) ReplicaSet carries: the Deployment's own, its revision,
    and the desired and max replicas."""
    out = dict(current)
    for key, value in ((deployment.get("metadata") or {}).get("annotations") or {}).items():
        if key not in _SKIPPED_ANNOTATIONS:
            out[key] = value
    try:
        old_revision = int(out.get(REVISION, "0"))
    except ValueError:
        old_revision = 0
    if old_revision < revision:
        out[REVISION] = str(revision)
    out[DESIRED_REPLICAS] = str(replicas_of(deployment))
    out[MAX_REPLICAS] = str(replicas_of(deployment) + max_surge(deployment))
    return out


# ---- the controller ----------------------------------------------------------------------------------


class DeploymentController(Controller):
    name = "deployment-controller"
    watches = (DEPLOYMENTS, REPLICASETS, PODS)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is DEPLOYMENTS:
            return [key_of(event.obj)]
        if event.resource is REPLICASETS:
            return event_owner_keys(event, "Deployment")
        # Pods matter to Recreate only (old pods must be gone before new ones start).
        if event.type != "DELETED" and not pod_terminal(event.obj):
            return []
        out: list[Key] = []
        for rs_key in event_owner_keys(event, "ReplicaSet"):
            deployment = owner_key(self.store.find(REPLICASETS, *rs_key), "Deployment")
            if deployment is not None:
                out.append(deployment)
        return out

    async def sync(self, key: Key) -> float | None:
        d = self.store.find(DEPLOYMENTS, *key)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return None
        now = self.now()
        rss = controlled(self.store, d, REPLICASETS)
        spec = d.get("spec") or {}
        paused_conditions = paused_condition(d, now)
        if paused_conditions is not None:
            d = self.write_status(DEPLOYMENTS, d, dict(d.get("status") or {}, conditions=paused_conditions))
        try:
            max_surge(d)
        except ValueError as exc:  # a malformed maxSurge/maxUnavailable: nothing can be decided
            status = dict(d.get("status") or {}, observedGeneration=d["metadata"].get("generation", 1))
            status["conditions"] = put_condition(
                status.get("conditions"), condition("Progressing", "False", "InvalidStrategy", str(exc), now)
            )
            self.write_status(DEPLOYMENTS, d, status)
            return None
        new_rs = find_new_replica_set(d, rss)
        old_rss = [rs for rs in rss if rs is not new_rs]
        active = [rs for rs in rss if replicas_of(rs) > 0]
        if spec.get("paused") or is_scaling_event(d, active):
            new_rs = self._sync_new_rs(d, new_rs, old_rss, create=False)
            changes = {rs["metadata"]["name"]: replicas_of(rs) for rs in active}
            changes.update(
                proportional_scale(
                    d, active if new_rs is None or new_rs in active else [*active, new_rs], new_rs
                ),
            )
            self._scale_all(d, changes)
            return self._finish(key)
        if is_rolling(d):
            return await self._rolling(key, d, new_rs, old_rss)
        return await self._recreate(key, d, new_rs, old_rss)

    # ---- strategies ----------------------------------------------------------------------------------

    async def _rolling(self, key: Key, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> float | None:
        new_rs = self._sync_new_rs(d, new_rs, old_rss, create=True)
        if new_rs is None:
            return 0.05
        all_rss = [*old_rss, new_rs]
        replicas = replicas_of(d)
        if replicas_of(new_rs) > replicas:
            self._scale(new_rs, replicas, d)
            return self._finish(key)
        target = new_rs_new_replicas(d, all_rss, new_rs)
        if target != replicas_of(new_rs):
            self._scale(new_rs, target, d)
            return self._finish(key)
        changes = reconcile_old_replica_sets(d, all_rss, old_rss, new_rs)
        if changes:
            self._scale_all(d, changes)
        return self._finish(key)

    async def _recreate(self, key: Key, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> float | None:
        if new_rs is not None:
            new_rs = self._sync_new_rs(d, new_rs, old_rss, create=False)
        running = [rs for rs in old_rss if replicas_of(rs) > 0]
        if running:
            self._scale_all(d, {rs["metadata"]["name"]: 0 for rs in running})
            return self._finish(key)
        for rs in old_rss:
            if any(not pod_terminal(p) for p in controlled(self.store, rs, PODS)):
                return self._finish(key)  # old pods still terminating
        if new_rs is None:
            new_rs = self._sync_new_rs(d, None, old_rss, create=True)
            if new_rs is None:
                return 0.05
        if replicas_of(new_rs) != replicas_of(d):
            self._scale(new_rs, replicas_of(d), d)
        return self._finish(key)

    def _finish(self, key: Key) -> float | None:
        d = self.store.find(DEPLOYMENTS, *key)
        if d is None:
            return None
        now = self.now()
        rss = controlled(self.store, d, REPLICASETS)
        new_rs = find_new_replica_set(d, rss)
        old_rss = [rs for rs in rss if rs is not new_rs]
        status, recheck = rollout_status(d, rss, new_rs, now)
        if deployment_complete(d, {**status}) or (d.get("spec") or {}).get("paused"):
            for rs in cleanup_candidates(d, old_rss):
                meta = rs["metadata"]
                try:
                    self.store.delete(
                        REPLICASETS, meta["namespace"], meta["name"], precondition_uid=meta["uid"]
                    )
                except ApiError:
                    pass
        self.write_status(DEPLOYMENTS, d, status)
        return recheck

    # ---- ReplicaSets --------------------------------------------------------------------------------

    def _sync_new_rs(self, d: Obj, new_rs: Obj | None, old_rss: list[Obj], create: bool) -> Obj | None:
        """getNewReplicaSet: bring the current ReplicaSet's annotations (revision) up to date, or create
        it."""
        revision = max((revision_of(rs) for rs in old_rss), default=0) + 1
        now = self.now()
        if new_rs is not None:
            meta = new_rs["metadata"]
            annotations = replica_set_annotations(d, dict(meta.get("annotations") or {}), revision)
            if annotations != (meta.get("annotations") or {}):
                new_rs = self.write(REPLICASETS, dict(new_rs, metadata=dict(meta, annotations=annotations)))
            self._set_deployment_revision(d, annotations.get(REVISION, str(revision)))
            d = self.store.find(DEPLOYMENTS, d["metadata"].get("namespace", ""), d["metadata"]["name"]) or d
            if find_condition(
                (d.get("status") or {}).get("conditions"), "Progressing"
            ) is None and has_progress_deadline(d):
                status = dict(d.get("status") or {})
                status["conditions"] = put_condition(
                    status.get("conditions"),
                    condition(
                        "Progressing", "True", FOUND_NEW_RS, f'Found new replica set "{meta["name"]}"', now
                    ),
                )
                self.write_status(DEPLOYMENTS, d, status)
            return new_rs
        if not create:
            return None
        spec = d.get("spec") or {}
        collisions = int((d.get("status") or {}).get("collisionCount") or 0)
        template = json.loads(json.dumps(spec.get("template") or {}))
        digest = template_hash(template, collisions)
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = dict(tmeta.get("labels") or {}, **{HASH_LABEL: digest})
        selector = json.loads(json.dumps(spec.get("selector") or {}))
        selector["matchLabels"] = dict(selector.get("matchLabels") or {}, **{HASH_LABEL: digest})
        name = f"{d['metadata']['name']}-{digest}"
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": d["metadata"].get("namespace", ""),
                "labels": dict(tmeta["labels"]),
                "annotations": replica_set_annotations(d, {}, revision),
                "ownerReferences": [owner_reference(d)],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": template,
            },
        }
        body["spec"]["replicas"] = new_rs_new_replicas(d, old_rss, body)
        try:
            created = self.store.create(REPLICASETS, d["metadata"].get("namespace", ""), body)
        except ApiError as exc:
            if exc.code != 409:
                raise
            existing = self.store.find(REPLICASETS, d["metadata"].get("namespace", ""), name)
            if existing is not None and equal_ignore_hash(
                (existing.get("spec") or {}).get("template") or {}, spec.get("template") or {}
            ):
                return existing
            # A hash collision: count it, so the next hash differs (status.collisionCount).
            status = dict(d.get("status") or {}, collisionCount=collisions + 1)
            self.write_status(DEPLOYMENTS, d, status)
            return None
        self._set_deployment_revision(d, str(revision))
        d = self.store.find(DEPLOYMENTS, d["metadata"].get("namespace", ""), d["metadata"]["name"]) or d
        if has_progress_deadline(d):
            status = dict(d.get("status") or {})
            status["conditions"] = put_condition(
                status.get("conditions"),
                condition("Progressing", "True", NEW_RS_CREATED, f'Created new replica set "{name}"', now),
            )
            self.write_status(DEPLOYMENTS, d, status)
        return created

    def _set_deployment_revision(self, d: Obj, revision: str) -> None:
        meta = d["metadata"]
        annotations = dict(meta.get("annotations") or {})
        if annotations.get(REVISION) == revision:
            return
        annotations[REVISION] = revision
        current = self.store.find(DEPLOYMENTS, meta.get("namespace", ""), meta["name"])
        if current is None:
            return
        self.write(DEPLOYMENTS, dict(current, metadata=dict(current["metadata"], annotations=annotations)))

    def _scale(self, rs: Obj, replicas: int, d: Obj) -> None:
        meta = rs["metadata"]
        annotations = dict(meta.get("annotations") or {})
        annotations[DESIRED_REPLICAS] = str(replicas_of(d))
        annotations[MAX_REPLICAS] = str(replicas_of(d) + max_surge(d))
        current = self.store.find(REPLICASETS, meta.get("namespace", ""), meta["name"])
        if current is None:
            return
        spec = dict(current.get("spec") or {}, replicas=replicas)
        self.write(
            REPLICASETS, dict(current, spec=spec, metadata=dict(current["metadata"], annotations=annotations))
        )

    def _scale_all(self, d: Obj, changes: dict[str, int]) -> None:
        for name, replicas in changes.items():
            rs = self.store.find(REPLICASETS, d["metadata"].get("namespace", ""), name)
            if rs is not None:
                self._scale(rs, replicas, d)
