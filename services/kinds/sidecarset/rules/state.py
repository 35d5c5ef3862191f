"""One SidecarSet's state folded from its observed, actions and decisions streams (docs/sidecarset.md,
"Upgrade in place"). Pure, and order-independent across streams like the CloneSet fold: pods are the
latest observation per name, expectations sets of facts that only grow."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from services.kinds.sidecarset import KIND as SIDECARSET
from services.model import rounds
from services.model import sidecarset as ss
from services.model.events import (
    Envelope,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionFailed,
    PodActionRequested,
    PodActionSucceeded,
    RequeueDue,
    RequeueScheduled,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    SpecRejected,
    StatusPlanned,
)
from services.model.rounds import EXPECTATION_TIMEOUT
from services.model.sidecarset_streams import SIDECARSET_ACTION_ANNOTATION, SIDECARSET_KIND
from services.model.upcasting import numbered


def _key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}"


class SidecarSetInput(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Everything a SidecarSet round decides on (``decisions.round_of``), all of it hashed into
    ``RoundPlanned.input_sha256``: the SidecarSet, its pods (by namespace/name), the revisions recorded so
    far (by name) and the collision count last planned into its status. Rounds of rules 4 and before
    hashed the first two and ``now`` only."""

    sidecar_set: dict[str, Any]
    pods: list[dict[str, Any]]
    revisions: list[dict[str, Any]]
    collision_count: int
    now: datetime


@dataclass
class SidecarSetState:
    """One SidecarSet's state folded from its three streams (order-independent across streams)."""

    name: str
    versions: dict[str, int] = field(default_factory=dict)
    now: datetime | None = None
    last_input_id: Any = None
    sidecarset: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # <namespace>/<name> -> pod
    seen_action_ids: dict[str, set[str]] = field(default_factory=dict)  # pod key -> action ids seen on it
    gone_uids: set[str] = field(default_factory=set)
    requested: dict[str, tuple[PodActionRequested, datetime]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    # the planner's own record
    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> ControllerRevision-shaped
    update_revision: str | None = None
    active_rollout: str | None = None
    rollouts_started: int = 0  # RolloutStarted events so far: the last rollout's sequence (its id's #N)
    paused: bool = False
    last_step: rounds.StepKey | None = None
    last_status: dict[str, Any] | None = None
    last_rejection: tuple[str, str] | None = None
    schedules: dict[str, datetime] = field(default_factory=dict)

    @property
    def streams(self) -> tuple[str, str, str]:
        return SIDECARSET.planned_streams("", self.name)

    def through(self) -> dict[str, int]:
        return {stream: self.versions.get(stream, 0) for stream in self.streams}

    def fold(self, envelope: Envelope) -> None:
        if not rounds.advance(self, envelope, SIDECARSET.decisions_stream("", self.name)):
            return
        payload = envelope.payload
        if isinstance(payload, RolloutStarted):
            self.rollouts_started += 1
        # a rollout id recorded before rollouts were numbered reads as numbered (services/model/upcasting.py)
        payload = numbered(payload, self.rollouts_started)
        match payload:
            case ObjectObserved():
                self._fold_observed(payload)
            case PodActionSucceeded():
                self.outcomes[payload.action_id] = "succeeded"
            case PodActionFailed():
                self.outcomes[payload.action_id] = "failed"
            case PodActionRequested():
                self.requested[payload.action_id] = (payload, envelope.occurred_at)
            case RevisionCreated() | RevisionsPruned():
                ss.fold_revision(self.revisions, payload)
            case RolloutStarted():
                self.active_rollout = payload.rollout_id
                self.update_revision = payload.to_revision
                self.paused = False
            case RolloutCompleted():
                if self.active_rollout == payload.rollout_id:
                    self.active_rollout = None
                self.update_revision = payload.revision
                self.paused = False
            case RolloutPaused():
                self.paused = True
            case RolloutResumed():
                self.paused = False
            case PartitionStepPlanned():
                self.last_step = rounds.step_key(payload)
            case StatusPlanned():
                self.last_status = payload.status
            case SpecRejected():
                self.last_rejection = (payload.field, payload.reason)
            case RequeueScheduled():
                self.schedules[str(envelope.event_id)] = payload.due_at
            case RequeueDue():
                self.schedules.pop(str(payload.scheduled_by), None)
                if self.now is None or payload.due_at > self.now:
                    self.now = payload.due_at

    def collision_count(self) -> int:
        """The collision count last planned into the status (OpenKruise reads it back from the status)."""
        value = (self.last_status or {}).get("collisionCount")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _fold_observed(self, observed: ObjectObserved) -> None:
        obj = observed.object
        metadata = obj.get("metadata") or {}
        if observed.kind == SIDECARSET_KIND:
            self.sidecarset = None if observed.change == "DELETED" else obj
            return
        if observed.kind != "Pod":
            return
        key = _key(obj)
        action_id = (metadata.get("annotations") or {}).get(SIDECARSET_ACTION_ANNOTATION)
        if action_id:
            self.seen_action_ids.setdefault(key, set()).add(action_id)
        if observed.change == "DELETED" or metadata.get("deletionTimestamp"):
            self.gone_uids.add(observed.uid)
        if observed.change == "DELETED":
            current = self.pods.get(key)
            if current is not None and (current.get("metadata") or {}).get("uid") == observed.uid:
                del self.pods[key]
        else:
            self.pods[key] = obj

    def in_effect(self, request: PodActionRequested) -> bool:
        """Monotone: seen on the pod, or the targeted pod is gone."""
        key = f"{request.namespace}/{request.pod}"
        if request.action_id in self.seen_action_ids.get(key, set()):
            return True
        uid = request.details.get("uid")
        return bool(uid) and uid in self.gone_uids

    def pending(self) -> list[datetime]:
        """Request times of upgrades neither failed nor in effect nor timed out at the round's ``now``."""
        result = []
        for action_id, (request, at) in self.requested.items():
            if self.outcomes.get(action_id) == "failed" or self.in_effect(request):
                continue
            if self.now is not None and self.now - at >= EXPECTATION_TIMEOUT:
                continue
            result.append(at)
        return result

    def plan_input(self) -> SidecarSetInput:
        assert self.sidecarset is not None and self.now is not None
        return SidecarSetInput(
            sidecar_set=self.sidecarset,
            pods=[self.pods[key] for key in sorted(self.pods)],
            revisions=[self.revisions[name] for name in sorted(self.revisions)],
            collision_count=self.collision_count(),
            now=self.now,
        )
