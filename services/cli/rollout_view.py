"""What `rollbook status -w` / `rollbook get NS/NAME -w` show about one CloneSet, derived without I/O: the
CloneSet and its pods as the API server returns them, the rollout's pod actions and latest partition step
from the SQL views, and the time. ``RolloutView.read`` builds the picture; ``waiting_reasons`` says why
the rollout is not moving; ``outcome`` says whether it is over and how (the command's exit code).

Exit codes (docs/cli.md): 0 the rollout finished (every pod updated and available, or the partition
reached with the pods it covers updated and available), 3 the spec is rejected (the reason is shown),
4 the rollout failed or was superseded (its RolloutCompleted outcome), 5 --timeout passed first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any

from services.kinds.base import Kind
from services.kinds.cloneset.rules.names import (
    INPLACE_GRACE_ANNOTATION,
    LIFECYCLE_STATE_LABEL,
    REJECTED_CONDITION,
    REVISION_LABEL,
)
from services.model import intorpercent
from services.model.actions import ActionKind
from services.model.availability import min_ready_seconds, pod_available, revision_hash, unavailable
from services.model.cloneset import desired_replicas
from services.model.timestamps import parse_kube_time

# Lifecycle states in which a pod waits on a hook (another controller removes the hook's finalizer/label).
HOOK_STATES = frozenset({"PreparingUpdate", "PreparingDelete", "Updated"})
IN_PLACE_ACTIONS = frozenset({ActionKind.UPDATE_IN_PLACE, ActionKind.RESIZE})
RECREATE_ACTIONS = frozenset({ActionKind.RECREATE_POD, ActionKind.DELETE_POD, ActionKind.CREATE_POD})
UPDATE_ACTIONS = IN_PLACE_ACTIONS | RECREATE_ACTIONS


class Outcome(IntEnum):
    """How a followed rollout ended: the process exit code of `status -w` / `get -w`."""

    FINISHED = 0
    REJECTED = 3
    FAILED = 4
    TIMED_OUT = 5


@dataclass(frozen=True)
class PodAction:
    """One row of the ``pod_actions`` view, as much as the view needs."""

    pod: str
    action: str
    rollout_id: str | None
    requested: datetime | None
    finished: datetime | None
    outcome: str
    in_place: bool


@dataclass(frozen=True)
class PodRow:
    name: str
    revision: str  # hash
    updated: bool
    ready: bool
    available: bool
    restarts: int
    terminating: bool
    how: str  # "in place", "recreated", "created" or "" (not touched by this rollout)
    batch: int | None  # 1-based round of this rollout in which its update was requested
    out_of_service_seconds: float | None  # the last update's not-ready mark..markReady, or down since
    lifecycle: str
    in_grace_seconds: float | None  # seconds left of an in-place grace period


@dataclass(frozen=True)
class RolloutView:
    namespace: str
    name: str
    generation: int
    observed_generation: int
    replicas: int
    update_revision: str  # hash
    current_revision: str  # hash
    partition: int  # pods kept at old revisions (resolved)
    max_unavailable: int  # allowed (resolved)
    unavailable: int  # in use now
    paused: bool
    rejected: str | None  # "field: reason" of the Rejected condition
    rollout_id: str | None
    rollout_outcome: str | None  # the rollouts view's outcome ("in progress", "succeeded", ...)
    pods: tuple[PodRow, ...] = field(default_factory=tuple)
    kind: str = "CloneSet"
    paused_field: str = "spec.updateStrategy.paused"  # where the workload says it is paused
    # The spec field holding pods at the old revision; None: the step is the controller's own (a
    # Deployment's new ReplicaSet scaled up in steps), nothing a user lowers.
    partition_field: str | None = "spec.updateStrategy.partition"
    max_surge: int = 0  # pods the controller may add above replicas: unavailability then holds nothing up

    @property
    def updated(self) -> int:
        return sum(1 for p in self.pods if p.updated and not p.terminating)

    @property
    def updated_available(self) -> int:
        return sum(1 for p in self.pods if p.updated and p.available)

    @property
    def updating_old_pods(self) -> bool:
        """Pods of an older revision are left to update: only then does maxUnavailable hold anything back
        (a new CloneSet's pods, all at the update revision, start however many are unavailable)."""
        return any(p.revision != self.update_revision for p in self.pods)

    @property
    def target_updated(self) -> int:
        """Pods the rollout updates: all but the partition."""
        return max(self.replicas - self.partition, 0)

    @staticmethod
    def read(
        cloneset: Mapping[str, Any],
        pods: Sequence[Mapping[str, Any]],
        actions: Sequence[PodAction],
        step_max_unavailable: int | None,
        rollout_id: str | None,
        rollout_outcome: str | None,
        now: datetime,
    ) -> RolloutView:
        metadata = cloneset.get("metadata") or {}
        spec = cloneset.get("spec") or {}
        status = cloneset.get("status") or {}
        strategy = spec.get("updateStrategy") or {}
        replicas = desired_replicas(dict(cloneset))
        rejected = next(
            (
                str(c.get("message") or c.get("reason") or "rejected")
                for c in status.get("conditions") or ()
                if c.get("type") == REJECTED_CONDITION and c.get("status") == "True"
            ),
            None,
        )
        partition = _resolved(lambda: intorpercent.partition_count(strategy.get("partition"), replicas), 0)
        allowed = step_max_unavailable
        if allowed is None:
            allowed = _resolved(
                lambda: intorpercent.scaled(strategy.get("maxUnavailable", "20%"), replicas, False), 0
            )
        update_hash = revision_hash(status.get("updateRevision"))
        mine = [a for a in actions if rollout_id is not None and a.rollout_id == rollout_id]
        # A batch is a planning round that requested the update (or creation) of a pod shown, numbered from
        # 1 in this rollout. Metadata-only actions (lifecycle-label moves, readiness marks) do not open one,
        # nor do the deletions of a ReCreate's old pods (gone from the list; their successors' creations
        # are the batch), so a ReCreate's batches count 1, 2, 3 like an in-place rollout's.
        shown = {_name(pod) for pod in pods}
        last_update: dict[str, datetime] = {}
        for a in mine:
            if a.pod in shown and a.action in UPDATE_ACTIONS and a.requested is not None:
                last_update[a.pod] = a.requested
        rounds = sorted(set(last_update.values()))
        min_ready = min_ready_seconds(cloneset)
        rows = tuple(
            _pod_row(pod, update_hash, [a for a in mine if a.pod == _name(pod)], rounds, now, min_ready)
            for pod in sorted(pods, key=_name)
        )
        return RolloutView(
            namespace=str(metadata.get("namespace", "default")),
            name=str(metadata.get("name", "")),
            generation=int(metadata.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            replicas=replicas,
            update_revision=update_hash,
            current_revision=revision_hash(status.get("currentRevision")),
            partition=partition,
            max_unavailable=allowed,
            unavailable=unavailable(replicas, pods, min_ready, now.timestamp()),
            paused=bool(strategy.get("paused")),
            rejected=rejected,
            rollout_id=rollout_id,
            rollout_outcome=rollout_outcome,
            pods=rows,
        )

    @staticmethod
    def read_recorded(
        kind: Kind,
        workload: Mapping[str, Any],
        revisions: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        actions: Sequence[PodAction],
        rollout_id: str | None,
        rollout_outcome: str | None,
        now: datetime,
    ) -> RolloutView:
        """A workload rollbook records (a Deployment with its ReplicaSets, a StatefulSet with its
        ControllerRevisions), read by its kind's rules as the recorder reads it: the update revision, the
        step (a Deployment's new ReplicaSet's replicas; a StatefulSet's partition), maxUnavailable as its
        controller resolves it, paused, past its progress deadline (the rollout failed)."""
        assert kind.trail is not None
        metadata = workload.get("metadata") or {}
        status = workload.get("status") or {}
        trail = kind.trail(str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        trail.workload = dict(workload)
        trail.revisions = {_name(r): dict(r) for r in revisions}
        target = trail.target()
        step = trail.step(target) if target is not None else None
        replicas = int((workload.get("spec") or {}).get("replicas", 1))
        update_hash = revision_hash(target.update) if target is not None else ""
        mine = [a for a in actions if rollout_id is not None and a.rollout_id == rollout_id]
        min_ready = min_ready_seconds(workload)
        rows = tuple(
            _pod_row(
                pod,
                update_hash,
                [a for a in mine if a.pod == _name(pod)],
                [],
                now,
                min_ready,
                kind.revision_label,
            )
            for pod in sorted(pods, key=_name)
        )
        if target is not None and target.deadline_exceeded:
            rollout_outcome = "failed"  # as `kubectl rollout status` ends: the deadline passed
        return RolloutView(
            namespace=str(metadata.get("namespace", "default")),
            name=str(metadata.get("name", "")),
            generation=int(metadata.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            replicas=replicas,
            update_revision=update_hash,
            current_revision=revision_hash(target.current) if target is not None else "",
            partition=step.partition if step is not None else 0,
            max_unavailable=step.max_unavailable if step is not None else 0,
            unavailable=unavailable(replicas, pods, min_ready, now.timestamp()),
            paused=target is not None and target.paused,
            rejected=None,
            rollout_id=rollout_id,
            rollout_outcome=rollout_outcome,
            pods=rows,
            kind=kind.name,
            paused_field="spec.paused" if kind.name == "Deployment" else "spec.updateStrategy.paused",
            partition_field=None
            if kind.name == "Deployment"
            else "spec.updateStrategy.rollingUpdate.partition",
            max_surge=step.max_surge if step is not None else 0,
        )


def _resolved(compute: Any, default: int) -> int:
    try:
        return int(compute())
    except (ValueError, TypeError):
        return default  # an invalid value: the Rejected condition says why


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _pod_row(
    pod: Mapping[str, Any],
    update_hash: str,
    actions: list[PodAction],
    rounds: list[datetime],
    now: datetime,
    min_ready: int = 0,
    revision_label: str = REVISION_LABEL,
) -> PodRow:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = pod.get("status") or {}
    revision = revision_hash(labels.get(revision_label))
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    available = pod_available(pod, min_ready, now.timestamp())
    restarts = max(
        (int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or ()), default=0
    )
    update = next((a for a in reversed(actions) if a.action in UPDATE_ACTIONS), None)
    how = ""
    if update is not None:
        how = (
            "in place"
            if update.in_place
            else ("created" if update.action == ActionKind.CREATE_POD else "recreated")
        )
    batch = rounds.index(update.requested) + 1 if update and update.requested in rounds else None
    out: float | None = None
    if update is not None and update.in_place and update.requested is not None:
        out = ((update.finished or now) - update.requested).total_seconds()
    elif not available:
        since = parse_kube_time((conditions.get("Ready") or {}).get("lastTransitionTime"))
        out = (now - since).total_seconds() if since else None
    return PodRow(
        name=_name(pod),
        revision=revision,
        updated=bool(update_hash) and revision == update_hash,
        ready=ready,
        available=available,
        restarts=restarts,
        terminating=bool(metadata.get("deletionTimestamp")),
        how=how,
        batch=batch,
        out_of_service_seconds=None if out is None else max(out, 0.0),
        lifecycle=str(labels.get(LIFECYCLE_STATE_LABEL, "")),
        in_grace_seconds=_grace_left(metadata.get("annotations") or {}, now),
    )


def _grace_left(annotations: Mapping[str, Any], now: datetime) -> float | None:
    raw = annotations.get(INPLACE_GRACE_ANNOTATION)
    if not raw:
        return None
    try:
        grace = json.loads(raw)
        marked = parse_kube_time(grace.get("markedAt"))
        seconds = float(grace.get("graceSeconds") or 0)
    except (ValueError, TypeError, AttributeError):
        return None
    if marked is None:
        return None
    return max(seconds - (now - marked).total_seconds(), 0.0)


def waiting_reasons(view: RolloutView) -> list[str]:
    """Why the rollout is not moving right now, most decisive first; empty when it is moving or done."""
    if view.rejected and view.observed_generation >= view.generation:
        return [f"spec rejected: {view.rejected}"]
    reasons: list[str] = []
    if view.observed_generation < view.generation:
        reasons.append(
            f"spec generation {view.generation} not planned yet (status at {view.observed_generation})"
        )
    if view.paused:
        reasons.append(f"paused ({view.paused_field}: true)")
    graced = [p for p in view.pods if p.in_grace_seconds is not None]
    for pod in graced:
        reasons.append(f"grace period: {pod.name} marked not ready, updated in {pod.in_grace_seconds:.0f}s")
    hooked = [p for p in view.pods if p.lifecycle in HOOK_STATES]
    for pod in hooked:
        reasons.append(f"lifecycle hook: {pod.name} is {pod.lifecycle}")
    # A pod a hook holds is said above (it is unavailable too: it counts against maxUnavailable).
    not_ready = [
        p.name
        for p in view.pods
        if not p.available
        and not p.terminating
        and p.in_grace_seconds is None
        and p.lifecycle not in HOOK_STATES
    ]
    if not_ready:
        reasons.append(f"pods not ready: {', '.join(not_ready)}")
    old_left = sum(1 for p in view.pods if not p.updated and not p.terminating)
    if (
        view.unavailable >= view.max_unavailable
        and old_left > view.partition
        and not view.paused
        and not view.max_surge
    ):
        reasons.append(f"maxUnavailable in use: {view.unavailable} of {view.max_unavailable} allowed")
    if view.partition and view.updated >= view.target_updated and old_left and view.partition_field:
        reasons.append(
            f"partition reached: {view.partition} pod{'s' if view.partition != 1 else ''} kept at the old"
            f" revision (lower {view.partition_field} to continue)"
        )
    return reasons


def outcome(view: RolloutView) -> Outcome | None:
    """How the rollout ended, or None while it goes on (a paused rollout goes on: it can be resumed).

    A status that does not reflect the spec yet (``observedGeneration`` below ``generation``) is never
    judged: its Rejected condition or its rollout's end are about an earlier spec, e.g. the rejected one a
    fixed spec just replaced (as ``kubectl rollout status`` waits for the spec update to be observed)."""
    if view.observed_generation < view.generation:
        return None
    if view.rejected:
        return Outcome.REJECTED
    if view.rollout_outcome in ("failed", "superseded"):
        return Outcome.FAILED
    if not view.update_revision:
        return None
    live = [p for p in view.pods if not p.terminating]
    if len(live) != view.replicas:
        return None
    if view.updated_available >= view.target_updated and all(p.available for p in live):
        return Outcome.FINISHED
    return None


def unavailable_text(view: RolloutView) -> str:
    """maxUnavailable in use against the allowed number; for pods that are all new (a new or scaled
    CloneSet) maxUnavailable holds nothing back, and `5/1 allowed` would read as a breach."""
    if view.updating_old_pods:
        return f"{view.unavailable} in use of {view.max_unavailable} allowed"
    return f"{view.unavailable} unavailable, all at the update revision (maxUnavailable limits updates only)"


def rollout_state(view: RolloutView, result: Outcome | None) -> str:
    """The rollout's outcome as shown beside its id: the trail's, unless the watch has seen it end first
    (the trail records the end a moment later), so the last frame never says "in progress" under
    "finished"."""
    recorded = view.rollout_outcome or ""
    if result is not None and recorded in ("", "in progress"):
        return {
            Outcome.FINISHED: "finished (the trail records it in a moment)",
            Outcome.REJECTED: "spec rejected",
        }.get(result, recorded)
    return recorded
