"""The planner's SidecarSet half: folds a SidecarSet's streams, runs the pure upgrade round
(``services.planner.sidecarset_upgrade``), appends its decisions (docs/sidecarset.md, "Upgrade in place").

Same shape as the CloneSet planner (docs/services.md, "planner"): a bus message is only a wake-up; the
SidecarSet's observed, actions and decisions streams are caught up from the store; nothing is decided
while a requested upgrade is pending (not yet seen on the pod, not failed, not 60 s old); a round is a
``RoundPlanned`` naming exactly what it folded, followed by its decisions, appended with the decisions
stream's expected version. Ids derive from the round, so a re-run after a crash stores nothing twice.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg

from services.infra.metrics import PLANNING_SECONDS
from services.infra.store import ConcurrencyError, EventStore
from services.model.events import (
    Envelope,
    Event,
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
from services.model.management import Selection
from services.model.sidecarset import SidecarSetError
from services.model.sidecarset_streams import (
    SIDECARSET_ACTION_ANNOTATION,
    SIDECARSET_KIND,
    UPDATE_SIDECAR_ACTION,
    actions_stream,
    decisions_stream,
    observed_stream,
    revision_name,
    rollout_id,
    sidecarset_of,
)
from services.model.streams import derived_id
from services.planner import rounds
from services.planner.sidecarset_revisions import revision_object
from services.planner.sidecarset_upgrade import SidecarSetRound, plan_sidecarset
from services.planner.workload_state import EXPECTATION_TIMEOUT

log = structlog.get_logger("planner")

_canonical = msgspec.json.Encoder(order="sorted")

# The version of the SidecarSet planner's rules, written on every RoundPlanned (``rules``). Bump it with
# any change to what decisions a given input produces (sidecarset_upgrade.py, sidecarset_revisions.py,
# decisions_for), so ``rollbook verify`` reports rounds decided by other rules as not re-verifiable
# instead of as divergences (docs/replay.md, "Upgrading rollbook"). 1: rounds recorded before rules were
# versioned. 2: SidecarSet revisions (RevisionCreated / RevisionsPruned).
RULES_VERSION = 2


def _key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '')}"


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
    paused: bool = False
    last_step: tuple[Any, ...] | None = None
    last_status: dict[str, Any] | None = None
    last_rejection: tuple[str, str] | None = None
    schedules: dict[str, datetime] = field(default_factory=dict)

    @property
    def streams(self) -> tuple[str, str, str]:
        return observed_stream(self.name), actions_stream(self.name), decisions_stream(self.name)

    def through(self) -> dict[str, int]:
        return {stream: self.versions.get(stream, 0) for stream in self.streams}

    def fold(self, envelope: Envelope) -> None:
        if not rounds.advance(self, envelope, decisions_stream(self.name)):
            return
        payload = envelope.payload
        match payload:
            case ObjectObserved():
                self._fold_observed(payload)
            case PodActionSucceeded():
                self.outcomes[payload.action_id] = "succeeded"
            case PodActionFailed():
                self.outcomes[payload.action_id] = "failed"
            case PodActionRequested():
                self.requested[payload.action_id] = (payload, envelope.occurred_at)
            case RevisionCreated():
                self.record_revision(payload)
            case RevisionsPruned():
                for name in payload.names:
                    self.revisions.pop(name, None)
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
                self.last_step = _step_key(payload)
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

    def record_revision(self, created: RevisionCreated) -> None:
        """A recorded revision, kept as the ControllerRevision the round built (a re-numbering replaces it).
        A record without the object (written before revisions carried their data) keeps the name and number
        only, so the next round records the SidecarSet's revision afresh."""
        self.revisions[created.name] = created.object or {
            "metadata": {"name": created.name},
            "revision": created.revision,
        }

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

    def plan_input(self) -> dict[str, Any]:
        assert self.sidecarset is not None and self.now is not None
        return {
            "sidecarSet": self.sidecarset,
            "pods": [self.pods[key] for key in sorted(self.pods)],
            "now": self.now.isoformat().replace("+00:00", "Z"),
        }


def _step_key(step: PartitionStepPlanned) -> tuple[Any, ...]:
    return (step.rollout_id, step.partition, step.replicas, step.expected_updated, step.max_unavailable)


def round_of(state: SidecarSetState) -> SidecarSetRound | SidecarSetError:
    assert state.sidecarset is not None and state.now is not None
    try:
        return plan_sidecarset(
            state.sidecarset,
            state.pods.values(),
            state.now,
            revisions=[state.revisions[name] for name in sorted(state.revisions)],
            collision_count=state.collision_count(),
        )
    except SidecarSetError as error:
        return error


def decisions_for(state: SidecarSetState, result: SidecarSetRound | SidecarSetError) -> list[Event]:
    """The decision events a round means, given what was already decided (nothing repeated). Pure: a
    replay calls it with the same state and gets the same list."""
    sidecarset = state.sidecarset or {}
    generation = (sidecarset.get("metadata") or {}).get("generation")
    if isinstance(result, SidecarSetError):
        if (result.field, result.reason) == state.last_rejection:
            return []
        return [SpecRejected(field=result.field, reason=result.reason, generation=generation)]
    decisions: list[Event] = []
    target = result.revision_name
    rollout = rollout_id(state.name, target)
    recorded = result.revisions.record
    if recorded is not None:
        spec = recorded.data.get("spec") or {}
        decisions.append(
            RevisionCreated(
                name=recorded.name,
                revision=recorded.number,
                hash=result.revision,
                template={k: v for k, v in spec.items() if k != "$patch" and v is not None},
                object=revision_object(state.name, recorded),
            )
        )
    if result.revisions.pruned:
        decisions.append(RevisionsPruned(names=result.revisions.pruned))
    active = state.active_rollout
    paused = state.paused
    if target != state.update_revision:
        if active:
            decisions.append(RolloutCompleted(rollout_id=active, revision=target, outcome="superseded"))
            active = None
        if result.done:
            decisions.append(RolloutCompleted(rollout_id=rollout, revision=target))
        else:
            old = Counter(
                revision_name(state.name, p.revision) for p in result.matched if not p.updated and p.revision
            )
            decisions.append(
                RolloutStarted(
                    rollout_id=rollout,
                    from_revision=old.most_common(1)[0][0] if old else "",
                    to_revision=target,
                    strategy=result.strategy,
                    replicas=len(result.matched),
                )
            )
            active, paused = rollout, False
    halted = result.paused or not result.rolling
    if active and halted and not paused:
        reason = "updateStrategy.paused" if result.paused else "updateStrategy.type is NotUpdate"
        decisions.append(RolloutPaused(rollout_id=active, reason=reason))
    elif active and not halted and paused:
        decisions.append(RolloutResumed(rollout_id=active))
    if active and not halted:
        step = PartitionStepPlanned(
            rollout_id=active,
            partition=result.partition,
            replicas=len(result.matched),
            expected_updated=result.expected_updated,
            max_unavailable=result.max_unavailable,
            max_surge=0,
        )
        if _step_key(step) != state.last_step:
            decisions.append(step)
    round_key = derived_id("sidecarset-round", *sorted(state.through().items()))
    for index, upgrade in enumerate(result.upgrades):
        decisions.append(
            PodActionRequested(
                action_id=str(derived_id("sidecarset-action", round_key, index)),
                action=UPDATE_SIDECAR_ACTION,
                namespace=upgrade.namespace,
                pod=upgrade.pod,
                rollout_id=active,
                revision=target,
                details={
                    "uid": upgrade.uid,
                    "sidecarSet": state.name,
                    "fromRevision": revision_name(state.name, upgrade.from_revision),
                    "images": upgrade.images,
                    "patch": upgrade.patch,
                },
            )
        )
    if result.status != state.last_status:
        decisions.append(
            StatusPlanned(kind=SIDECARSET_KIND, namespace="", name=state.name, status=result.status)
        )
    if active and result.done and not result.upgrades:
        decisions.append(RolloutCompleted(rollout_id=active, revision=target))
    return decisions


class SidecarSetPlanner:
    """Plans every SidecarSet; called by the planner service for messages of SidecarSet streams."""

    def __init__(self, store: EventStore, selection: Selection | None = None) -> None:
        self.store = store
        self.selection = selection or Selection()  # which SidecarSets we plan for (model/management.py)
        self.states: dict[str, SidecarSetState] = {}

    async def handle(self, envelope: Envelope, msg: Msg) -> None:
        name = sidecarset_of(envelope.stream)
        if name is None:
            return
        state = self.states.get(name)
        if state is None:
            state = self.states[name] = SidecarSetState(name)
        structlog.contextvars.bind_contextvars(sidecarset=name)
        try:
            if isinstance(envelope.payload, RequeueScheduled):
                left = (envelope.payload.due_at - datetime.now(UTC)).total_seconds()
                if left > 0.05:
                    await msg.nak(delay=left)  # JetStream keeps the timer, across restarts too
                    return
                await self._fire(state, envelope, envelope.payload)
                await self.plan_round(state, force=True)
                return
            await self.plan_round(state)
        finally:
            structlog.contextvars.unbind_contextvars("sidecarset")

    async def catch_up(self, state: SidecarSetState) -> int:
        return await rounds.catch_up(self.store, state)

    async def _fire(self, state: SidecarSetState, envelope: Envelope, timer: RequeueScheduled) -> None:
        await self.catch_up(state)
        due = rounds.requeue_due(state, decisions_stream(state.name), envelope, timer)
        if due is not None:
            await rounds.append(self.store, state, [due])

    async def plan_round(self, state: SidecarSetState, *, force: bool = False) -> None:
        started = time.perf_counter()
        try:
            folded = await self.catch_up(state)
            if not folded and not force:
                return
            await self._decide(state)
        except ConcurrencyError as error:
            log.warning("decisions_stream_moved", error=str(error))
            self.states.pop(state.name, None)  # rebuilt from the store on the next wake-up
            raise
        finally:
            PLANNING_SECONDS.observe(time.perf_counter() - started)

    async def _decide(self, state: SidecarSetState) -> None:
        if state.sidecarset is None or state.now is None or not self.selection.manages(state.sidecarset):
            return
        pending = state.pending()
        if pending:
            await self._expect(state, min(pending) + EXPECTATION_TIMEOUT)
            return
        plan_input = state.plan_input()
        digest = hashlib.sha256(_canonical.encode(plan_input)).hexdigest()
        result = round_of(state)
        decisions = decisions_for(state, result)
        if not decisions:
            return
        correlation = (
            rollout_id(state.name, result.revision_name) if isinstance(result, SidecarSetRound) else None
        )
        envelopes = rounds.round_envelopes(
            state,
            decisions_stream(state.name),
            round_id=derived_id("sidecarset-round", *sorted(state.through().items())),
            input_sha256=digest,
            decisions=decisions,
            correlation_id=correlation,
            rules=RULES_VERSION,
        )
        await rounds.append(self.store, state, envelopes)
        log.info(
            "sidecarset_planned",
            correlation_id=correlation,
            decisions=[type(d).__name__ for d in decisions],
            upgrades=[f"{d.namespace}/{d.pod}" for d in decisions if isinstance(d, PodActionRequested)],
        )

    async def _expect(self, state: SidecarSetState, due: datetime) -> None:
        """Pending upgrades block planning; a timer wakes the SidecarSet when they time out."""
        timer = rounds.expectation_timer(state, decisions_stream(state.name), due)
        if timer is not None:
            await rounds.append(self.store, state, [timer])
