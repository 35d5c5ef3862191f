"""A workload's state, folded from its three event streams (docs/services.md, "planner").

The fold is order-independent across streams (within a stream, events fold in version order): objects
are the latest observation per name; expectations are sets of facts that only grow (action ids seen on
objects, uids seen gone, terminal outcomes). So the state after a round is a pure function of
``through`` (the last version folded of each stream), which is what makes replay exact.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from services.kinds.cloneset import KIND as CLONESET
from services.kinds.cloneset.rules.input_digest import PlanInputDigest
from services.kinds.cloneset.rules.model import PlanInput
from services.kinds.cloneset.rules.names import INSTANCE_ID_LABEL
from services.kinds.cloneset.rules.podstate import PodViews
from services.kinds.cloneset.rules.status import ActionOutcome
from services.model import pod_resize, rounds
from services.model.actions import PVC_ACTIONS, ActionKind
from services.model.events import (
    Envelope,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionFailed,
    PodActionRequested,
    PodActionSucceeded,
    PodHookHeld,
    PodHookReleased,
    RequeueDue,
    RequeueScheduled,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    RoundPlanned,
    SpecRejected,
    StatusPlanned,
    StoreLossDetected,
)
from services.model.rounds import EXPECTATION_TIMEOUT, UNREPORTED_TIMEOUT
from services.model.streams import ACTION_ID_ANNOTATION
from services.model.timestamps import parse_kube_time
from services.model.upcasting import numbered


@dataclass
class Requested:
    event: PodActionRequested
    requested_at: datetime
    round_id: Any = None  # the RoundPlanned that planned it (the request's causation id)


@dataclass(frozen=True)
class Outcome:
    """A terminal outcome's details: where it is in the actions stream, when, and why it failed."""

    version: int  # in the actions stream
    at: datetime  # occurred_at
    failed: bool
    reason: str


@dataclass
class WorkloadState:
    namespace: str
    name: str
    versions: dict[str, int] = field(default_factory=dict)  # stream -> last version folded
    now: datetime | None = None
    cloneset: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    pvcs: dict[str, dict[str, Any]] = field(default_factory=dict)
    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # expectations
    seen_action_ids: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (kind, name) -> ids
    gone_uids: set[str] = field(default_factory=set)
    requested: dict[str, Requested] = field(default_factory=dict)
    # (round, pod) -> the action ids that round planned for that pod, in order (the executor applies them
    # in that order, each only after the ones before have a terminal outcome)
    round_pod_actions: dict[tuple[Any, str], list[str]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)  # action id -> succeeded | failed
    outcome_log: dict[str, Outcome] = field(default_factory=dict)  # action id -> details, stream order
    # Requested actions not yet known to be settled (failed or in effect: both monotone), in request
    # order: what ``pending`` looks at, so a round does not walk every action of the workload's life.
    unsettled: dict[str, Requested] = field(default_factory=dict, compare=False, repr=False)
    settled: set[str] = field(default_factory=set, compare=False, repr=False)
    # What ``pending_deadline`` keeps so a wake-up does not re-examine every unsettled action: the ones
    # something folded since could have settled (their object observed, their round's later action
    # requested, their failure), the unsettled actions by the objects they wait on, and their deadlines
    # (a heap; an entry is stale once its action settled or got a later deadline from its outcome).
    recheck: set[str] = field(default_factory=set, compare=False, repr=False)
    waiting_on: dict[tuple[str, str], set[str]] = field(default_factory=dict, compare=False, repr=False)
    deadlines: list[tuple[datetime, str]] = field(default_factory=list, compare=False, repr=False)
    # the planner's own record
    last_status: dict[str, Any] | None = None
    update_revision: str | None = None
    active_rollout: str | None = None
    rollouts_started: int = 0  # RolloutStarted events so far: the last rollout's sequence (its id's #N)
    paused: bool = False  # the active rollout is halted (RolloutPaused without a RolloutResumed since)
    last_step: rounds.StepKey | None = None
    last_rejection: tuple[Any, ...] | None = None
    schedules: dict[str, datetime] = field(default_factory=dict)  # RequeueScheduled id -> due, not yet fired
    last_input_id: Any = None
    # The pods' views kept between rounds: a folded pod is replaced, never changed, when observed again.
    pod_views: PodViews = field(default_factory=PodViews, compare=False, repr=False)
    round_through: dict[str, int] = field(default_factory=dict)  # ``through`` of the last round folded
    # (pod, hook) -> (lifecycle state, since): pods a lifecycle hook holds (PodHookHeld not yet released)
    hook_holds: dict[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    # StoreLossDetected records on the actions stream naming events lost for good (a database failover)
    store_losses: list[StoreLossDetected] = field(default_factory=list)
    # the encodings of the last recorded round's pods and PVCs, reused for the input's hash
    input_digest: PlanInputDigest = field(default_factory=PlanInputDigest, compare=False, repr=False)

    @property
    def streams(self) -> tuple[str, str, str]:
        return CLONESET.planned_streams(self.namespace, self.name)

    def through(self) -> dict[str, int]:
        return {stream: self.versions.get(stream, 0) for stream in self.streams}

    # --- folding -------------------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> None:
        if not rounds.advance(self, envelope, CLONESET.decisions_stream(self.namespace, self.name)):
            return
        payload = envelope.payload
        if isinstance(payload, RolloutStarted):
            self.rollouts_started += 1
        # a rollout id recorded before rollouts were numbered reads as numbered (services/model/upcasting.py)
        payload = numbered(payload, self.rollouts_started)
        if isinstance(payload, ObjectObserved):
            self._fold_observed(payload)
        elif isinstance(payload, PodActionSucceeded):
            self.outcomes[payload.action_id] = "succeeded"
            # The first outcome only (there is one per action), so the log stays in stream order.
            self.outcome_log.setdefault(
                payload.action_id, Outcome(envelope.stream_version, envelope.occurred_at, False, "")
            )
            self._deadline_moved(payload.action_id)
        elif isinstance(payload, PodActionFailed):
            self.outcomes[payload.action_id] = "failed"
            self.outcome_log.setdefault(
                payload.action_id,
                Outcome(envelope.stream_version, envelope.occurred_at, True, payload.reason),
            )
            self.recheck.add(payload.action_id)
        elif isinstance(payload, PodActionRequested):
            round_id = envelope.causation_id
            action_id = payload.action_id
            if round_id is not None and action_id not in self.requested:
                in_round = self.round_pod_actions.setdefault((round_id, payload.pod), [])
                in_round.append(action_id)
                self.recheck.update(in_round)  # an earlier one is in effect once this one is seen
            self.requested[action_id] = Requested(_as_expected(payload), envelope.occurred_at, round_id)
            if action_id not in self.settled:
                self.unsettled[action_id] = self.requested[action_id]
                self.recheck.add(action_id)
                for target in _waits_on(payload, self.name):
                    self.waiting_on.setdefault(target, set()).add(action_id)
                self._deadline_moved(action_id)
        elif isinstance(payload, RevisionCreated):
            self.revisions[payload.name] = payload.object or {
                "metadata": {"name": payload.name},
                "revision": payload.revision,
            }
        elif isinstance(payload, RevisionsPruned):
            for name in payload.names:
                self.revisions.pop(name, None)
        elif isinstance(payload, RoundPlanned):
            self.round_through = payload.through
        elif isinstance(payload, StatusPlanned):
            self.last_status = payload.status
            if isinstance(payload.round, RoundPlanned):  # a status round, recorded as this one event
                self.round_through = payload.round.through
        elif isinstance(payload, RolloutStarted):
            self.active_rollout = payload.rollout_id
            self.update_revision = payload.to_revision
            self.paused = False
        elif isinstance(payload, RolloutCompleted):
            if self.active_rollout == payload.rollout_id:
                self.active_rollout = None
                self.paused = False
            self.update_revision = payload.revision
        elif isinstance(payload, RolloutPaused):
            self.paused = True
        elif isinstance(payload, RolloutResumed):
            self.paused = False
        elif isinstance(payload, PartitionStepPlanned):
            self.last_step = rounds.step_key(payload)
        elif isinstance(payload, SpecRejected):
            self.last_rejection = (payload.field, payload.reason)
        elif isinstance(payload, PodHookHeld):
            self.hook_holds[(payload.pod, payload.hook)] = (payload.state, envelope.occurred_at)
        elif isinstance(payload, PodHookReleased):
            self.hook_holds.pop((payload.pod, payload.hook), None)
        elif isinstance(payload, RequeueScheduled):
            self.schedules[str(envelope.event_id)] = payload.due_at
        elif isinstance(payload, StoreLossDetected):
            if payload.unrecoverable:
                self.store_losses.append(payload)
        elif isinstance(payload, RequeueDue):
            self.schedules.pop(str(payload.scheduled_by), None)
            if self.now is None or payload.due_at > self.now:
                self.now = payload.due_at

    def _fold_observed(self, observed: ObjectObserved) -> None:
        waiting = self.waiting_on.get((observed.kind, observed.name))
        if waiting:
            self.recheck.update(waiting)
        obj = observed.object
        metadata = obj.get("metadata") or {}
        action_id = (metadata.get("annotations") or {}).get(ACTION_ID_ANNOTATION)
        if action_id:
            self.seen_action_ids.setdefault((observed.kind, observed.name), set()).add(action_id)
        if observed.change == "DELETED" or metadata.get("deletionTimestamp"):
            self.gone_uids.add(observed.uid)
        table: dict[str, dict[str, Any]] | None
        if observed.kind == CLONESET.name:
            self.cloneset = None if observed.change == "DELETED" else obj
            return
        table = (
            self.pods
            if observed.kind == "Pod"
            else self.pvcs
            if observed.kind == "PersistentVolumeClaim"
            else None
        )
        if table is None:
            return
        current = table.get(observed.name)
        if observed.change == "DELETED":
            # A late DELETED of an older incarnation must not remove the pod that reuses its name.
            if current is not None and (current.get("metadata") or {}).get("uid") == observed.uid:
                del table[observed.name]
        else:
            table[observed.name] = obj

    # --- expectations --------------------------------------------------------------------------------

    def in_effect(self, requested: PodActionRequested) -> bool:
        """Monotone: once true for an action it stays true, whatever is folded later (replay relies on it).
        Deletes name the uids they target (recorded at request time), so a new object reusing the name
        does not make an old delete pending again."""
        action = requested.action
        details = requested.details
        if action == ActionKind.DELETE_POD:
            targets = [("Pod", requested.pod, details.get("uid"))]
            targets += [("PersistentVolumeClaim", n, u) for n, u in (details.get("pvcUids") or {}).items()]
            return all(self._gone(kind, name, uid) for kind, name, uid in targets)
        if action == ActionKind.DELETE_PVC:
            return self._gone("PersistentVolumeClaim", str(details.get("pvc")), details.get("uid"))
        if action == ActionKind.CREATE_PVC:
            return requested.action_id in self.seen_action_ids.get(
                ("PersistentVolumeClaim", str(details.get("pvc"))), set()
            )
        if action == ActionKind.SET_PODS_TO_DELETE:
            return requested.action_id in self.seen_action_ids.get((CLONESET.name, self.name), set())
        if action == ActionKind.RESIZE:
            # pods/resize writes no annotation: in effect once the pod's spec has the resources (or the
            # pod the action targeted is gone). Only checked while unsettled, so it stays true once seen.
            if self._gone("Pod", requested.pod, details.get("uid")):
                return True
            wanted = details.get("resources")
            pod = self.pods.get(requested.pod)
            return isinstance(wanted, dict) and pod is not None and pod_resize.spec_matches(pod, wanted)
        if action == ActionKind.CREATE_POD and not all(
            requested.action_id in self.seen_action_ids.get(("PersistentVolumeClaim", name), set())
            for name in created_claims(details)
        ):
            # The pod's own claims are observed too before its create stops blocking: planning on a view
            # with the pod but not yet its claims could delete the pod without them (``DeletePod.pvcs``).
            # Each claim carries this action's id (the executor writes it on a claim it found already
            # there, too), so an observation of an older claim of the same name does not count, and one
            # seen only as it is deleted does.
            return False
        seen = self.seen_action_ids.get(("Pod", requested.pod), set())
        return requested.action_id in seen or self._later_in_round_seen(requested.action_id, seen)

    def _later_in_round_seen(self, action_id: str, seen_on_pod: set[str]) -> bool:
        """An action its round planned later for the same pod is seen on the pod. The executor applies a
        round's actions for one pod in order, each once the ones before have a terminal outcome, so the
        later one's observation shows this one's effect (or it failed): the pod's annotation carries only
        the last action id, and an observer that missed the state in between (a watcher restarted, a
        relist) never sees this one's id."""
        if not seen_on_pod:
            return False
        requested = self.requested.get(action_id)
        if requested is None or requested.round_id is None:
            return False
        ids = self.round_pod_actions.get((requested.round_id, requested.event.pod), [])
        return any(later in seen_on_pod for later in ids[ids.index(action_id) + 1 :])

    def _gone(self, kind: str, name: str, uid: str | None) -> bool:
        if not uid or uid in self.gone_uids:
            return True
        table = self.pods if kind == "Pod" else self.pvcs
        current = table.get(name)
        return current is None or (current.get("metadata") or {}).get("uid") != uid

    def uid_of(self, kind: str, name: str) -> str | None:
        table = self.pods if kind == "Pod" else self.pvcs
        current = table.get(name)
        return None if current is None else (current.get("metadata") or {}).get("uid")

    def leaving_with_claims(self) -> dict[str, datetime]:
        """Pods deleted by someone else that are still terminating while their PVCs stay.

        Their replacement must reuse the instance id and PVCs, which it can only do once the old
        pod (same name) is gone; planning meanwhile would pick a new id and orphan the PVCs. So the
        planner waits for them, at most EXPECTATION_TIMEOUT past the deletion time (a pod stuck on a
        finalizer must not wedge the workload)."""
        leaving: dict[str, datetime] = {}
        if self.now is None or not self.pvcs:
            return leaving
        # Every round with nothing pending asks, so the usual answer (no pod terminating) costs one pass
        # over the pods, no sort and no index of the claims.
        deleting = []
        for name, pod in self.pods.items():
            deleted_at = parse_kube_time((pod.get("metadata") or {}).get("deletionTimestamp"))
            if deleted_at is not None and self.now - deleted_at < EXPECTATION_TIMEOUT:
                deleting.append((name, pod, deleted_at))
        if not deleting:
            return leaving
        claims_by_id: dict[str, list[dict[str, Any]]] = {}
        for pvc in self.pvcs.values():
            labels = (pvc.get("metadata") or {}).get("labels") or {}
            claims_by_id.setdefault(str(labels.get(INSTANCE_ID_LABEL, "")), []).append(pvc)
        for name, pod, deleted_at in sorted(deleting, key=lambda item: item[0]):
            metadata = pod.get("metadata") or {}
            claims = claims_by_id.get(str((metadata.get("labels") or {}).get(INSTANCE_ID_LABEL, "")), [])
            if claims and all(not (c.get("metadata") or {}).get("deletionTimestamp") for c in claims):
                leaving[name] = deleted_at
        return leaving

    def pending(self) -> list[Requested]:
        """Requested actions neither failed nor seen in effect nor timed out at the round's ``now``."""
        result = []
        for action_id, requested in list(self.unsettled.items()):
            if self.outcomes.get(action_id) == "failed" or self.in_effect(requested.event):
                self._settle(action_id)
                continue
            if self.now is not None and self.now >= self.expectation_deadline(requested):
                continue
            result.append(requested)
        return result

    def pending_deadline(self) -> datetime | None:
        """``min(expectation_deadline(p) for p in pending())``, None when nothing is pending, without
        walking every unsettled action: only those something folded since the last call could have
        settled are examined again (a scale-out from 0 has every pod's create unsettled, and each wake-up
        until they are all seen would otherwise walk them all)."""
        for action_id in self.recheck:
            requested = self.unsettled.get(action_id)
            if requested is not None and (
                self.outcomes.get(action_id) == "failed" or self.in_effect(requested.event)
            ):
                self._settle(action_id)
        self.recheck.clear()
        deadlines = self.deadlines
        while deadlines:
            due, action_id = deadlines[0]
            requested = self.unsettled.get(action_id)
            # Stale (settled, or its outcome moved its deadline: a newer entry exists), or timed out for
            # good (``now`` only moves forward; a later outcome pushes a new entry).
            if (
                requested is None
                or self.expectation_deadline(requested) != due
                or (self.now is not None and self.now >= due)
            ):
                heapq.heappop(deadlines)
                continue
            return due
        return None

    def _settle(self, action_id: str) -> None:
        """Failed or in effect: settled for good, never pending again."""
        requested = self.unsettled.pop(action_id)
        self.settled.add(action_id)
        for target in _waits_on(requested.event, self.name):
            waiting = self.waiting_on.get(target)
            if waiting is not None:
                waiting.discard(action_id)
                if not waiting:
                    del self.waiting_on[target]

    def _deadline_moved(self, action_id: str) -> None:
        requested = self.unsettled.get(action_id)
        if requested is not None:
            heapq.heappush(self.deadlines, (self.expectation_deadline(requested), action_id))

    def expectation_deadline(self, requested: Requested) -> datetime:
        """When a requested action not seen in effect stops blocking planning (round time)."""
        outcome = self.outcome_log.get(requested.event.action_id)
        if outcome is None:
            return requested.requested_at + UNREPORTED_TIMEOUT
        return max(requested.requested_at, outcome.at) + EXPECTATION_TIMEOUT

    def outcomes_since_last_round(self) -> list[ActionOutcome]:
        """Terminal outcomes folded after the last recorded round's ``through`` (actions stream order):
        what the failure conditions of this round's status react to. A function of the folded state."""
        seen = self.round_through.get(CLONESET.actions_stream(self.namespace, self.name), 0)
        fresh: list[ActionOutcome] = []
        for action_id in reversed(self.outcome_log):
            outcome = self.outcome_log[action_id]
            if outcome.version <= seen:
                break
            requested = self.requested.get(action_id)
            if requested is None:
                continue  # an outcome without its request (not ours): nothing to attribute it to
            event = requested.event
            target = event.target
            if event.action in PVC_ACTIONS:
                target = str(event.details.get("pvc") or target)
            fresh.append(ActionOutcome(event.action, target, outcome.failed, outcome.at, outcome.reason))
        fresh.reverse()
        return fresh

    # --- the decision function's input ---------------------------------------------------------------

    def plan_input(self) -> PlanInput:
        """The decision input, holding the folded objects themselves (the planner reads, never writes
        them)."""
        assert self.cloneset is not None and self.now is not None
        return PlanInput(
            clone_set=self.cloneset,
            pods=[self.pods[name] for name in sorted(self.pods)],
            pvcs=[self.pvcs[name] for name in sorted(self.pvcs)],
            revisions=sorted(self.revisions.values(), key=lambda r: (r.get("revision", 0), object_name(r))),
            now=self.now,
        )


# What the expectations read of a request's details (``in_effect``, ``outcomes_since_last_round``).
_EXPECTED_DETAILS = frozenset({"uid", "pvcUids", "pvc"})


def created_claims(details: dict[str, Any]) -> list[str]:
    """The names of the claims a createPod creates before its pod (its ``pvcs``: the claim objects as
    requested, or their names as the state keeps them); none in a createPod of CloneSet rules before 11,
    whose claims were createPVC actions of their own."""
    return [
        str((c.get("metadata") or {}).get("name")) if isinstance(c, dict) else str(c)
        for c in details.get("pvcs") or []
    ]


def _as_expected(requested: PodActionRequested) -> PodActionRequested:
    """The request as the state keeps it: without the rest of its details (a createPod carries the whole
    pod and its claims, an in-place update its patch), which nothing folded reads again; 5,000 creates
    would otherwise keep 5,000 more copies of the pods for the workload's life. A createPod keeps the
    names of its claims."""
    details = requested.details
    if details.keys() <= _EXPECTED_DETAILS:
        return requested
    kept = {key: value for key, value in details.items() if key in _EXPECTED_DETAILS}
    if requested.action == ActionKind.CREATE_POD and details.get("pvcs"):
        kept["pvcs"] = created_claims(details)
    if requested.action == ActionKind.RESIZE and "resources" in details:
        kept["resources"] = details["resources"]  # what its expectation compares the pod's spec with
    return msgspec.structs.replace(requested, details=kept)


def _waits_on(requested: PodActionRequested, workload: str) -> list[tuple[str, str]]:
    """The objects (kind, name) whose observation can put the action in effect (``in_effect``)."""
    action = requested.action
    details = requested.details
    if action == ActionKind.DELETE_POD:
        return [("Pod", requested.pod)] + [("PersistentVolumeClaim", n) for n in details.get("pvcUids") or {}]
    if action in (ActionKind.DELETE_PVC, ActionKind.CREATE_PVC):
        return [("PersistentVolumeClaim", str(details.get("pvc")))]
    if action == ActionKind.SET_PODS_TO_DELETE:
        return [(CLONESET.name, workload)]
    if action == ActionKind.CREATE_POD:
        return [("Pod", requested.pod)] + [("PersistentVolumeClaim", n) for n in created_claims(details)]
    return [("Pod", requested.pod)]


def object_name(obj: dict[str, Any]) -> str:
    """The object's metadata.name ("" when it has none)."""
    return str((obj.get("metadata") or {}).get("name", ""))
