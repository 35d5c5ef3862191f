"""The shadow trail of one CloneSet rollbook observes but does not drive (docs/shadow.md). Pure: each
observation of the workload in, the events it means out, for ``CloneSet/<ns>/<name>/shadow``.

Per observation, in this order:

1. a CloneSet observation whose status shows a new ``updateRevision`` (and the spec it reflects) starts an
   observed rollout (``RolloutStarted``, superseding an unfinished one); one whose status shows every pod
   updated and ready completes it (``RolloutCompleted``);
2. a pod observation is compared with the pod's previous observation (services/planner/observed_actions.py);
   each change the controller made is a ``PodActionObserved`` and, but for ``becameReady``, a
   ``ShadowCompared`` against rollbook's decision on the state the controller acted on
   (services/planner/shadow_compare.py). That state is the one before this observation, or, for an in-place
   update, the one before the pod left service for it;
3. rollbook's planner runs on the state after the observation; its decision is a ``ShadowPlanned`` when it
   differs from the last one recorded, and its resolved partition step a ``PartitionStepPlanned`` of the
   observed rollout when that changed.

The controller's revision names need not be rollbook's (OpenKruise hashes Go's JSON of the template,
rollbook sorted JSON). Once a CloneSet status reports an ``updateRevision`` for the spec rollbook planned
on, that name's hash is an alias of rollbook's revision name, and the planner's input carries rollbook's
names from then on. Event ids derive from the observation, so the trail re-derived after a restart is the
trail recorded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from services.kinds.cloneset.rules import plan as planning
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.kinds.cloneset.rules.names import REVISION_LABEL
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.recorded.rules import existed_before
from services.kinds.registry import CLONESET
from services.model import intorpercent
from services.model.actions import BECAME_READY, PVC_ACTIONS, ActionKind
from services.model.availability import AvailabilityCount, min_ready_seconds
from services.model.cloneset import desired_replicas
from services.model.events import (
    Envelope,
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionObserved,
    RolloutCompleted,
    RolloutStarted,
    ShadowCompared,
    ShadowPlanned,
    new_event,
)
from services.model.shadow import shadowed
from services.model.streams import derived_id, rollout_id, rollout_revision
from services.planner.observed_actions import Change, PodView, changes, pod_view
from services.planner.shadow_compare import Intent, compare, observed_intent, revision_key, rollbook_intents


@dataclass(frozen=True)
class Decision:
    """rollbook's decision on one observed state, as recorded (its ShadowPlanned)."""

    event_id: uuid.UUID
    intents: frozenset[Intent] | None  # None: rejected, nothing rollbook would do is known
    actions: tuple[dict[str, Any], ...]
    max_unavailable: int


@dataclass(frozen=True)
class _Left:
    """A pod left service: an in-place update may follow, decided on the state before it left."""

    at: datetime
    decision: Decision | None
    unavailable: int


@dataclass
class ShadowTrail:
    namespace: str
    name: str
    shadow_all: bool
    rules: int
    # Where the trail starts (shadow mode's own start, docs/shadow.md): the observed stream's version of its
    # first observation, as stored (the cause of the trail's first event); or, before anything was stored,
    # ``since``: the first observation made at or after it starts the trail. Observations before the start
    # are folded (the state needs them) but mean nothing: they happened before shadow mode began. Both None:
    # the trail starts with the first shadowed observation (the label's case).
    start_version: int | None = None
    since: datetime | None = None
    state: WorkloadState = field(init=False)
    observed_version: int = 0
    version: int = 0  # of the shadow stream, as produced
    decision: Decision | None = None
    last_planned: Any = None
    aliases: dict[str, str] = field(default_factory=dict)  # controller's revision hash -> rollbook's name
    update_revision: str | None = None  # the controller's, from the CloneSet status
    active_rollout: str | None = None
    last_rollout: str | None = None  # the latest rollout this trail recorded (RolloutStarted)
    rollouts_started: int = 0  # observed rollouts so far: the last one's sequence (its id's #N)
    last_step: tuple[Any, ...] | None = None
    first_seen: datetime | None = None
    left: dict[str, _Left] = field(default_factory=dict)  # pod uid -> left service
    awaiting_ready: dict[str, str] = field(default_factory=dict)  # pod uid -> action id it completes
    names_used: set[str] = field(default_factory=set)
    created_in: dict[str, str] = field(default_factory=dict)  # pod uid -> rollout it was created for
    # The available pods, counted as the view ``unavailability`` counts them (services/model/availability.py).
    availability: AvailabilityCount = field(default_factory=AvailabilityCount)
    min_ready_seconds: int = 0  # the CloneSet's, as last observed

    def __post_init__(self) -> None:
        self.state = WorkloadState(self.namespace, self.name)

    @property
    def observed(self) -> str:
        return CLONESET.observed_stream(self.namespace, self.name)

    @property
    def stream(self) -> str:
        return CLONESET.shadow_stream(self.namespace, self.name)

    # --- one observation -----------------------------------------------------------------------------

    def step(self, envelope: Envelope) -> list[Envelope]:
        """The shadow events one observation of the workload means (none for other events, repeats, or
        while the CloneSet is not shadowed)."""
        payload = envelope.payload
        if envelope.stream != self.observed or envelope.stream_version <= self.observed_version:
            return []
        self.observed_version = envelope.stream_version
        if not isinstance(payload, ObjectObserved):
            return []
        if self.start_version is None and self.since is not None and envelope.occurred_at >= self.since:
            self.start_version = envelope.stream_version
        starting = envelope.stream_version == self.start_version
        if self.first_seen is None or starting:
            self.first_seen = envelope.occurred_at
        before = self._view(payload.name) if payload.kind == "Pod" else None
        self.state.fold(envelope)
        self._count(envelope, payload)
        started = self.start_version is not None and envelope.stream_version >= self.start_version
        if (self.since is not None or self.start_version is not None) and not started:
            # before shadow mode began (rollbook, or nobody, drove it then): fold it, record nothing
            self.decision = None
            self._forget(payload, before)
            return []
        if not shadowed(self.state.cloneset, shadow_all=self.shadow_all):
            # rollbook drives it (or it is gone): nothing to record, but keep what later moments need.
            self.decision = None
            self._forget(payload, before)
            return []
        events: list[Event] = []
        if payload.kind == CLONESET.name:
            events += self._rollout_events(payload)
        elif starting and self.state.cloneset is not None:
            # the trail starts on a pod: a rollout already under way is recorded from here
            events += self._rollout_events(
                msgspec.structs.replace(
                    payload, kind=CLONESET.name, change="MODIFIED", object=self.state.cloneset
                )
            )
        if payload.kind == "Pod":
            after = None if payload.change == "DELETED" else pod_view(payload.object)
            events += self._pod_events(envelope, payload, before, after)
        planned, decision = self._plan()
        envelopes = self._envelopes(envelope, events + planned)
        if decision is not None:
            # The decision compared with from now on is the one just recorded (the last envelope).
            self.decision = Decision(envelopes[-1].event_id, *decision)
        return envelopes

    def _count(self, envelope: Envelope, payload: ObjectObserved) -> None:
        at = envelope.occurred_at.timestamp()
        if payload.kind == "Pod":
            self.availability.observe(
                payload.name, self.state.pods.get(payload.name), self.min_ready_seconds, at
            )
        elif payload.kind == CLONESET.name:
            if payload.change != "DELETED":
                self.min_ready_seconds = min_ready_seconds(payload.object)
            self.availability.advance(at)

    def _view(self, pod: str) -> PodView | None:
        obj = self.state.pods.get(pod)
        return None if obj is None else pod_view(obj)

    def _forget(self, payload: ObjectObserved, before: PodView | None) -> None:
        if payload.kind == "Pod" and before is not None and payload.change == "DELETED":
            self.names_used.add(payload.name)

    # --- rollouts ------------------------------------------------------------------------------------

    def _rollout_events(self, observed: ObjectObserved) -> list[Event]:
        if observed.change == "DELETED":
            return []
        cloneset = observed.object
        metadata, spec = cloneset.get("metadata") or {}, cloneset.get("spec") or {}
        status = cloneset.get("status") or {}
        if int(status.get("observedGeneration") or 0) < int(metadata.get("generation") or 0):
            return []  # the status does not reflect this spec yet
        update, current = status.get("updateRevision"), status.get("currentRevision")
        replicas = desired_replicas(cloneset)
        events: list[Event] = []
        if update and update != self.update_revision:
            if self.active_rollout:
                events.append(
                    RolloutCompleted(rollout_id=self.active_rollout, revision=update, outcome="superseded")
                )
                self.active_rollout = None
            self.update_revision = update
            if current and current != update:
                self.rollouts_started += 1
                self.active_rollout = rollout_id(self.namespace, self.name, update, self.rollouts_started)
                self.last_rollout = self.active_rollout
                self.last_step = None
                events.append(
                    RolloutStarted(
                        rollout_id=self.active_rollout,
                        from_revision=str(current),
                        to_revision=update,
                        strategy=spec.get("updateStrategy") or {},
                        replicas=replicas,
                    )
                )
        if (
            self.active_rollout
            and current == update
            and int(status.get("updatedReplicas") or 0) == replicas
            and int(status.get("updatedReadyReplicas") or 0) == replicas
        ):
            events.append(RolloutCompleted(rollout_id=self.active_rollout, revision=str(update)))
            self.active_rollout = None
        return events

    def _rollout_of_now(self) -> str | None:
        if self.active_rollout:
            return self.active_rollout
        # After a rollout ended, actions at its revision (scaling) stay with it; before any rollout this
        # trail recorded they belong to none (not to a rollout it never saw start).
        last = self.last_rollout
        if last is not None and self.update_revision and rollout_revision(last) == self.update_revision:
            return last
        return None

    # --- pods ----------------------------------------------------------------------------------------

    def _unavailable(self) -> int:
        """Desired pods not available (services/model/availability.py: missing, terminating, not Running and
        Ready, InPlaceUpdateReady not True, a lifecycle state other than Normal, or Ready for less than
        minReadySeconds)."""
        return self.availability.unavailable(desired_replicas(self.state.cloneset))

    def _pod_events(
        self, envelope: Envelope, observed: ObjectObserved, before: PodView | None, after: PodView | None
    ) -> list[Event]:
        events: list[Event] = []
        found = changes(before, after, name_used=observed.name in self.names_used)
        if after is None or (before is not None and before.uid != after.uid):
            self.names_used.add(observed.name)
        # A CloneSet's pods are never held back for their workload: a born pod is born in its observation.
        if before is None and existed_before(observed, self.first_seen):
            return []  # there before the trail started (the watcher's first list): nothing we saw happen
        for index, change in enumerate(found):
            events += self._action_events(envelope, observed, change, index)
        return events

    def _action_events(
        self, envelope: Envelope, observed: ObjectObserved, change: Change, index: int
    ) -> list[Event]:
        at = envelope.occurred_at
        if change.action == "leftService":
            self.left[change.uid] = _Left(at, self.decision, self._unavailable())
            return []
        action_id = str(derived_id("observed-action", envelope.event_id, index))
        decision, started_at, unavailable = self.decision, at, self._unavailable()
        completes = None
        if change.action == ActionKind.UPDATE_IN_PLACE:
            marker = self.left.pop(change.uid, None)
            if marker is not None:
                decision, started_at, unavailable = marker.decision, marker.at, marker.unavailable
            self.awaiting_ready[change.uid] = action_id
        elif change.action in (ActionKind.CREATE_POD, ActionKind.RECREATE_POD):
            self.awaiting_ready[change.uid] = action_id
            if self.active_rollout and revision_key(change.revision) == revision_key(self.update_revision):
                self.created_in[change.uid] = self.active_rollout
        elif change.action == BECAME_READY:
            completes = self.awaiting_ready.pop(change.uid, None)
            self.left.pop(change.uid, None)
        rollout = self._rollout_of_now()
        observed_action = PodActionObserved(
            action_id=action_id,
            action=change.action,
            namespace=self.namespace,
            pod=observed.name,
            pod_uid=change.uid,
            observation=envelope.event_id,
            started_at=started_at,
            rollout_id=rollout,
            revision=change.revision,
            from_revision=change.from_revision,
            completes=completes,
            details=_image_details(change),
        )
        intent = observed_intent(change.action, observed.name, self._aliased(change.revision))
        if intent is None:
            return [observed_action]
        thrash = (
            change.action == ActionKind.DELETE_POD
            and self.active_rollout is not None
            and self.created_in.get(change.uid) == self.active_rollout
        )
        intents = decision.intents if decision is not None else None
        verdict = compare(
            intent,
            set(intents) if intents is not None else None,
            unavailable=unavailable,
            max_unavailable=decision.max_unavailable
            if decision is not None and self.active_rollout
            else None,
            thrash=thrash,
        )
        comparison = ShadowCompared(
            action_id=action_id,
            action=change.action,
            pod=observed.name,
            verdict=verdict.verdict,  # type: ignore[arg-type]
            reason=verdict.reason,
            rollout_id=rollout,
            decision=decision.event_id if decision is not None else None,
            rollbook=list(decision.actions) if decision is not None else [],
            unavailable=unavailable,
            max_unavailable=decision.max_unavailable if decision is not None else None,
            pattern=verdict.pattern,
        )
        return [observed_action, comparison]

    def _aliased(self, revision: str | None) -> str | None:
        if revision is None:
            return None
        return self.aliases.get(revision_key(revision), revision)

    # --- what rollbook would do ----------------------------------------------------------------------

    def _plan(
        self,
    ) -> tuple[list[Event], tuple[frozenset[Intent] | None, tuple[dict[str, Any], ...], int] | None]:
        """The events of rollbook's decision on the state now, and the decision when it is new (then its
        ``ShadowPlanned`` is the last event)."""
        if self.state.cloneset is None or self.state.now is None:
            self.decision = None
            return [], None
        plan = self._decide()
        learned = self._learn_alias(plan)
        if learned:
            plan = self._decide()  # the controller's names are rollbook's from now on
        for revision in plan.revisions:
            name = str((revision.get("metadata") or {}).get("name", ""))
            self.state.revisions[name] = revision
        for name in plan.revisions_to_delete:
            self.state.revisions.pop(name, None)
        events: list[Event] = []
        update = plan.update_revision
        actions = tuple(
            {"action": a["action"], "pod": a.get("pod"), "revision": a.get("revision")}
            for a in map(msgspec.to_builtins, plan.actions)  # as the plan's JSON: no revision = None
            if a["action"] not in PVC_ACTIONS
        )
        rejected = msgspec.to_builtins(plan.rejected) if plan.rejected is not None else None
        max_unavailable = plan.max_unavailable or 0
        if self.active_rollout and plan.partition is not None and not rejected:
            replicas = desired_replicas(self.state.cloneset)
            partition = plan.partition
            step = PartitionStepPlanned(
                rollout_id=self.active_rollout,
                partition=partition,
                replicas=replicas,
                expected_updated=plan.expected_updated_replicas
                or intorpercent.expected_updated(replicas, partition),
                max_unavailable=max_unavailable,
                max_surge=plan.max_surge or 0,
            )
            key = (step.partition, step.replicas, step.expected_updated, step.max_unavailable, step.max_surge)
            if key != self.last_step:
                self.last_step = key
                events.append(step)
        content = (update, plan.partition, max_unavailable, plan.max_surge, actions, rejected)
        if content != self.last_planned:
            self.last_planned = content
            planned = ShadowPlanned(
                through=self.observed_version,
                now=self.state.now,
                update_revision=update,
                partition=plan.partition,
                max_unavailable=max_unavailable,
                max_surge=plan.max_surge or 0,
                actions=list(actions),
                rejected=rejected,
                rules=self.rules,
            )
            events.append(planned)
            intents = None if rejected else frozenset(rollbook_intents(actions, update))
            return events, (intents, actions, max_unavailable)
        return events, None

    def _decide(self) -> Plan:
        return planning.plan(_with_aliases(self.state.plan_input(), self.aliases))

    def _learn_alias(self, plan: Plan) -> bool:
        cloneset = self.state.cloneset or {}
        metadata, status = cloneset.get("metadata") or {}, cloneset.get("status") or {}
        theirs, ours = status.get("updateRevision"), plan.update_revision
        if (
            not theirs
            or not ours
            or int(status.get("observedGeneration") or 0) < int(metadata.get("generation") or 0)
        ):
            return False
        key = revision_key(theirs)
        if self.aliases.get(key) == ours or key == revision_key(ours):
            return False
        self.aliases[key] = ours
        return True

    # --- envelopes -----------------------------------------------------------------------------------

    def _envelopes(self, cause: Envelope, events: list[Event]) -> list[Envelope]:
        result = []
        for index, payload in enumerate(events):
            self.version += 1
            envelope = new_event(
                payload,
                stream=self.stream,
                stream_version=self.version,
                occurred_at=cause.occurred_at,
                event_id=derived_id("shadow", cause.event_id, index),
                causation_id=cause.event_id,
                correlation_id=getattr(payload, "rollout_id", None) or self._rollout_of_now(),
            )
            result.append(envelope)
        return result


def _with_aliases(plan_input: PlanInput, aliases: dict[str, str]) -> PlanInput:
    """The planner's input with the controller's revision names replaced by rollbook's (pods' revision
    labels, the CloneSet status' current and update revisions)."""
    if not aliases:
        return plan_input
    pods = []
    for pod in plan_input.pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        ours = aliases.get(revision_key(labels.get(REVISION_LABEL)))
        if ours is not None and labels.get(REVISION_LABEL) != ours:
            # Shallow copies down to the label: the folded pod itself stays as observed.
            metadata = pod["metadata"]
            pod = {**pod, "metadata": {**metadata, "labels": {**labels, REVISION_LABEL: ours}}}
        pods.append(pod)
    cloneset = plan_input.clone_set
    status = cloneset.get("status") or {}
    renamed = {
        key: aliases[revision_key(status[key])]
        for key in ("currentRevision", "updateRevision")
        if status.get(key) and revision_key(status[key]) in aliases
    }
    if renamed:
        cloneset = {**cloneset, "status": {**status, **renamed}}
    return msgspec.structs.replace(plan_input, pods=pods, clone_set=cloneset)


def _image_details(change: Change) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if change.images:
        details["images"] = dict(change.images)
    if change.from_images:
        details["fromImages"] = dict(change.from_images)
    return details
