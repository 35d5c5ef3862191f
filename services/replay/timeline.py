"""Time travel over a workload's record: its state rebuilt from the event store alone, as it was after
each event (``rollbook replay``). Pure: events in, states out; the planner's own fold
(services/kinds/cloneset/rules/workload_state.py) is the one fold, so what replay shows is what the planner
saw."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.kinds.cloneset.rules.names import CLONESET_KIND, REVISION_LABEL
from services.kinds.cloneset.rules.workload_state import Requested, WorkloadState
from services.model.availability import (
    AvailabilityCount,
    min_ready_seconds,
    pod_available,
    revision_hash,
    unavailable,
)
from services.model.cloneset import desired_replicas
from services.model.event_store import StoredEvent
from services.model.events import (
    Envelope,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionFailed,
    PodActionObserved,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    RevisionCreated,
    RolloutCompleted,
    RolloutStarted,
    ShadowCompared,
)


@dataclass(frozen=True)
class PodFacts:
    """What replay reads of one pod object: its summary and the facts a replay line counts."""

    pod: dict[str, Any]  # the folded object these facts are of (the fold replaces it, never changes it)
    summary: dict[str, Any]
    revision: str  # the hash of its revision label


class PodTally:
    """The pods of a folded workload, summarised and counted as the fold goes: only the pod an event
    observed is summarised again, so a line per event costs the same for 3 pods as for 200 (summarising
    every pod after every event made a 200-pod rollout's replay cost events x pods). Available pods are
    counted as the view ``unavailability`` counts them (services/model/availability.py,
    ``AvailabilityCount``): at the latest observation's time, minReadySeconds included."""

    def __init__(self) -> None:
        self.facts: dict[str, PodFacts] = {}
        self.ready = 0
        self.availability = AvailabilityCount()
        self.min_ready_seconds = 0  # the workload's, as last observed
        # pod -> the workload's minReadySeconds when the pod was last observed before the tally was kept
        # (``observed``): ``refresh_all`` holds each pod to it, as the count along the trail does.
        self._held_to: dict[str, int] = {}
        self.by_revision: Counter[str] = Counter()
        self.changed: list[str] = []  # pods created, changed or gone at the last ``refresh``

    @property
    def available(self) -> int:
        return self.availability.available

    def observe_workload(self, workload: dict[str, Any] | None, at: datetime) -> None:
        """An observation of the workload itself: its minReadySeconds from now on (kept when it is gone)."""
        if workload is not None:
            self.min_ready_seconds = min_ready_seconds(workload)
        self.availability.advance(at.timestamp())

    def observed(self, payload: object, at: datetime) -> None:
        """An event that does not refresh a pod: an observation still moves the clock, and the workload's
        one its minReadySeconds (a pod observed before the tally is kept is tallied by ``refresh_all``)."""
        if isinstance(payload, ObjectObserved):
            if payload.kind == CLONESET_KIND:
                self.observe_workload(None if payload.change == "DELETED" else payload.object, at)
            elif payload.kind == "Pod":
                self.availability.advance(at.timestamp())
                self._held_to[payload.name] = self.min_ready_seconds

    def refresh(
        self,
        pods: dict[str, dict[str, Any]],
        name: str,
        at: datetime | None = None,
        min_ready_seconds: int | None = None,
    ) -> None:
        """Pod ``name`` as ``pods`` holds it now (after an event that observed it at ``at``; None: the
        latest observation's time), held to ``min_ready_seconds`` (None: the workload's now)."""
        pod = pods.get(name)
        old = self.facts.get(name)
        self.changed = []
        moment = self.availability.clock if at is None else at.timestamp()
        held_to = self.min_ready_seconds if min_ready_seconds is None else min_ready_seconds
        self.availability.observe(name, pod, held_to, moment)
        if (None if old is None else old.pod) is pod:
            return
        self.changed = [name]
        if old is not None:
            self._count(old, -1)
            del self.facts[name]
        if pod is not None:
            facts = PodFacts(pod, pod_summary(pod), _revision_hash_of(pod))
            self.facts[name] = facts
            self._count(facts, 1)

    def refresh_all(self, pods: dict[str, dict[str, Any]]) -> None:
        """Every pod as ``pods`` holds it now, and those gone since the tally was last kept; ``changed``
        then names them all. Each is counted at the latest observation's time, held to the workload's
        minReadySeconds when it was last observed."""
        changed: list[str] = []
        held_to, self._held_to = self._held_to, {}
        for name in [*self.facts.keys() - pods.keys(), *pods]:
            self.refresh(pods, name, None, held_to.get(name))
            changed += self.changed
        self.changed = changed

    def _count(self, facts: PodFacts, sign: int) -> None:
        self.ready += sign * facts.summary["ready"]
        self.by_revision[facts.revision] += sign

    def updated(self, update_revision: str | None) -> int:
        """Pods at ``update_revision`` (``updated_pods``)."""
        return self.by_revision[revision_hash(update_revision)] if update_revision else 0

    def summaries(self) -> dict[str, dict[str, Any]]:
        """Every pod's summary, by name in order (``summarise``'s ``pods``)."""
        return {name: self.facts[name].summary for name in sorted(self.facts)}


@dataclass(frozen=True)
class Step:
    """The state right after one event, and its pods summarised (``PodTally``)."""

    event: StoredEvent
    state: WorkloadState
    pods: PodTally


def fold_timeline(
    namespace: str, name: str, events: Iterable[StoredEvent], tally_from: int = 0
) -> Iterator[Step]:
    """Fold events in global order, yielding after each one. The state and the tally are shared and
    mutated: render them (``one_line``, ``summarise``) before asking for the next step.

    The tally is kept from global position ``tally_from`` on: a rollout's replay renders only its own
    span, so the pods observed before it are summarised once, at its first event (a 200-pod CloneSet's
    earlier rollouts observed its pods thousands of times). That first step's ``changed`` names every pod."""
    state = WorkloadState(namespace, name)
    tally = PodTally()
    tallied = False
    for stored in events:
        state.fold(stored.envelope)
        if not tallied:
            tally.observed(stored.envelope.payload, stored.envelope.occurred_at)
            if stored.global_position < tally_from:
                yield Step(stored, state, tally)
                continue
            tallied = True
            tally.refresh_all(state.pods)
            yield Step(stored, state, tally)
            continue
        payload = stored.envelope.payload
        # Only a pod's observation changes the folded pods (WorkloadState._fold_observed).
        if isinstance(payload, ObjectObserved) and payload.kind == "Pod":
            tally.refresh(state.pods, payload.name, stored.envelope.occurred_at)
        else:
            tally.changed = []
            tally.observed(payload, stored.envelope.occurred_at)  # the workload's own observation
        yield Step(stored, state, tally)


def state_at(
    namespace: str,
    name: str,
    events: Iterable[StoredEvent],
    *,
    at_time: datetime | None = None,
    at_position: int | None = None,
) -> tuple[WorkloadState, StoredEvent | None]:
    """The state after the last event recorded at or before ``at_time`` (recorded_at) and/or at or below
    ``at_position`` (global position); with neither, after the last event."""
    state = WorkloadState(namespace, name)
    last: StoredEvent | None = None
    for stored in _up_to(events, at_time, at_position):
        state.fold(stored.envelope)
        last = stored
    return state, last


def _up_to(
    events: Iterable[StoredEvent], at_time: datetime | None, at_position: int | None
) -> Iterator[StoredEvent]:
    """The events recorded at or before ``at_time`` and at or below ``at_position`` (either may be None),
    in order, up to the first that is not."""
    for stored in events:
        if at_position is not None and stored.global_position > at_position:
            return
        if at_time is not None and stored.recorded_at > at_time:
            return
        yield stored


def summary_at(
    namespace: str,
    name: str,
    events: Iterable[StoredEvent],
    *,
    at_time: datetime | None = None,
    at_position: int | None = None,
) -> tuple[dict[str, Any], StoredEvent | None]:
    """``summarise`` of the workload after the last event at or before ``at_time`` (recorded_at) and/or
    ``at_position`` (as ``state_at``), its pods counted along the way as replay and the views count them."""
    kept = _up_to(events, at_time, at_position)
    last = next(iter(deque(fold_timeline(namespace, name, kept), maxlen=1)), None)
    if last is None:
        return summarise(WorkloadState(namespace, name)), None
    return summarise(last.state, last.pods), last.event


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return {
        "uid": metadata.get("uid"),
        "revision": (metadata.get("labels") or {}).get(REVISION_LABEL),
        "images": [c.get("image") for c in spec.get("containers") or []],
        "phase": (pod.get("status") or {}).get("phase"),
        "ready": _condition(pod, "Ready") == "True",
        "available": pod_available(pod),
        "inPlaceUpdateReady": _condition(pod, "InPlaceUpdateReady"),
        "terminating": bool(metadata.get("deletionTimestamp")),
    }


def summarise(state: WorkloadState, pods: PodTally | None = None) -> dict[str, Any]:
    """A JSON-able picture of the workload as the planner knew it (its pods' summaries from ``pods`` when
    the fold kept them)."""
    cloneset = state.cloneset or {}
    spec = cloneset.get("spec") or {}
    failed = {a for a, outcome in state.outcomes.items() if outcome == "failed"}
    return {
        "workload": f"{state.namespace}/{state.name}",
        "through": state.through(),
        "now": state.now.isoformat() if state.now else None,
        "exists": state.cloneset is not None,
        "generation": (cloneset.get("metadata") or {}).get("generation"),
        "replicas": desired_replicas(state.cloneset) if state.cloneset is not None else None,
        "unavailable": (
            unavailable(desired_replicas(state.cloneset), state.pods.values())
            if pods is None
            else max(desired_replicas(state.cloneset) - pods.available, 0)
        ),
        "updated": updated_pods(state) if pods is None else pods.updated(state.update_revision),
        "updateStrategy": spec.get("updateStrategy"),
        "images": [
            c.get("image") for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        ],
        "updateRevision": state.update_revision,
        "activeRollout": state.active_rollout,
        "revisions": sorted(state.revisions),
        "pods": (
            {name: pod_summary(pod) for name, pod in sorted(state.pods.items())}
            if pods is None
            else pods.summaries()
        ),
        "pvcs": sorted(state.pvcs),
        "actions": {
            "requested": len(state.requested),
            "succeeded": sum(1 for o in state.outcomes.values() if o == "succeeded"),
            "failed": sorted(failed),
            "pending": sorted(p.event.action_id for p in pending(state)),
        },
        "status": state.last_status,
    }


def one_line(step: Step) -> str:
    """One line per event: what happened, and the workload right after it."""
    stored, state = step.event, step.state
    envelope = stored.envelope
    stream_kind = envelope.stream.rsplit("/", 1)[-1] if envelope.stream.count("/") > 2 else "decisions"
    what = event_text(envelope)
    pods = step.pods
    replicas = desired_replicas(state.cloneset)
    return (
        f"{stored.global_position:>8} {stored.recorded_at.isoformat(timespec='milliseconds')}"
        f" {stream_kind:<9} v{envelope.stream_version:<5} {what}"
        f"  | pods={len(state.pods)} ready={pods.ready} updated={pods.updated(state.update_revision)}"
        f" unavailable={max(replicas - pods.available, 0)} pending={len(pending(state))}"
    )


def pending(state: WorkloadState) -> list[Requested]:
    """``state.pending()``, without asking again after every event whether each unsettled action is in
    effect: ``pending_deadline`` settles the actions something folded since could have settled (the
    planner's own bookkeeping), so an action still unsettled is pending until its deadline. (Asking every
    one again made a line per event cost events x actions in flight: 200 creates of a scale-out.)"""
    state.pending_deadline()
    now = state.now
    return [r for r in state.unsettled.values() if now is None or now < state.expectation_deadline(r)]


def event_text(envelope: Envelope) -> str:
    """An event as a replay line names it: its type, then what it was about."""
    payload, what = envelope.payload, envelope.type
    if isinstance(payload, PodActionRequested):
        what += f" {payload.action} {payload.target}"
    elif isinstance(payload, PodActionFailed):
        what += f" {payload.action_id[:8]} ({payload.reason}, retryable={payload.retryable}){taken(payload)}"
    elif isinstance(payload, PodActionSucceeded):
        what += f" {payload.action_id[:8]}{taken(payload)}"
    elif isinstance(payload, PodActionStarted):
        what += f" {payload.action_id[:8]} by {payload.executor}"
    elif isinstance(payload, ObjectObserved):
        what += f" {payload.kind} {payload.name} {payload.change}"
    elif isinstance(payload, PodActionObserved):
        what += f" {payload.action} {payload.pod}"
    elif isinstance(payload, ShadowCompared):
        what += f" {payload.action} {payload.pod}: {payload.verdict}"
    elif isinstance(payload, PartitionStepPlanned):
        what += f" partition {payload.partition} expected updated {payload.expected_updated}"
    elif isinstance(payload, RolloutCompleted):
        what += f" {payload.outcome}"
    elif isinstance(payload, RolloutStarted):
        who = payload.changed_by.get("manager") if isinstance(payload.changed_by, dict) else None
        what += f" {payload.from_revision} -> {payload.to_revision}" + (f" by {who}" if who else "")
    elif isinstance(payload, RevisionCreated):
        what += f" {payload.name} #{payload.revision}"
    return what


def taken(outcome: PodActionSucceeded | PodActionFailed) -> str:
    """When and by whom the action was taken, as its outcome says (outcomes recorded before they carried
    it say nothing: their trail has a PodActionStarted line instead)."""
    if outcome.started_at is None:
        return ""
    return f" taken {outcome.started_at.isoformat(timespec='milliseconds')} by {outcome.executor}"


def updated_pods(state: WorkloadState) -> int:
    """Pods at the update revision (their revision label holds the full name or the hash alone)."""
    if not state.update_revision:
        return 0
    wanted = revision_hash(state.update_revision)
    return sum(1 for p in state.pods.values() if _revision_hash_of(p) == wanted)


def _revision_hash_of(pod: dict[str, Any]) -> str:
    return revision_hash(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL))
