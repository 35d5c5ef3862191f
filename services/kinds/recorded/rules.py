"""The flight recorder's shared fold (docs/kinds.md, "Recorded kinds"). Pure: each observation of a recorded
workload in (its ``<Kind>/<ns>/<name>/observed`` stream, in order), the events it means out, for
``<Kind>/<ns>/<name>/recorded``. rollbook decides nothing for these workloads; it only says what their
controller did, in the same events its own rollouts record, so the SQL views, ``rollbook history``, replay
and the timeline read them as they read a CloneSet's.

Per observation:

1. a revision object (a Deployment's ReplicaSet, a StatefulSet's ControllerRevision) new or re-numbered is
   a ``RevisionCreated`` with the template's ``diff`` against the revision before it;
2. the workload's status is read by its kind (``RecordedTrail.target``): a new update revision starts a
   rollout (``RolloutStarted`` with ``changed_by`` from managedFields, ending an unfinished one as
   ``superseded``, or ``rolled back`` when the new one goes back to its from revision); a finished one is a
   ``RolloutCompleted``; a step (ReplicaSet scaled, StatefulSet partition) a ``PartitionStepPlanned``;
   paused, resumed and past the progress deadline their events;
3. a pod observation is compared with the pod's previous observation (``changes``): each change is a
   ``PodActionObserved`` (createPod, recreatePod, deletePod, evictPod, updateInPlace, becameReady). The first
   sight of a pod there before the trail started (``existed_before``) is none: nothing the trail saw happen.

Event ids derive from the observation, so a trail re-derived after a restart is the trail recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from services.model.actions import BECAME_READY, ActionKind
from services.model.availability import READY_CONDITION, pod_available
from services.model.events import (
    Envelope,
    Event,
    ObjectObserved,
    PartitionStepPlanned,
    PodActionObserved,
    RevisionCreated,
    RolloutCompleted,
    RolloutPaused,
    RolloutProgressDeadlineExceeded,
    RolloutResumed,
    RolloutStarted,
    new_event,
)
from services.model.streams import derived_id, rollout_id
from services.model.timestamps import parse_kube_time

# A workload carrying this label is recorded (ROLLBOOK_RECORD=label or a namespace list).
RECORD_LABEL = "rollbook.io/record"
EVICT_POD = "evictPod"  # an observed deletion the eviction API made (the DisruptionTarget condition)
# Added by the watcher to an observed recorded workload (managedFields themselves are not stored): the
# managers whose last write touched the spec, [{manager, operation, time, subresource}].
SPEC_MANAGERS = "rollbook.io/specManagers"


# --- opt-in ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordScope:
    """Which workloads of the recorded kinds are recorded (``ROLLBOOK_RECORD``): none (``off``), those
    labelled ``rollbook.io/record=true`` (``label``), all (``all``), or those in the listed namespaces
    (``ns1,ns2``) and labelled ones anywhere."""

    on: bool = False
    everything: bool = False
    namespaces: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, setting: str) -> RecordScope:
        value = setting.strip()
        if value in ("", "off"):
            return cls()
        if value == "all":
            return cls(on=True, everything=True)
        if value == "label":
            return cls(on=True)
        names = frozenset(n.strip() for n in value.split(",") if n.strip())
        return cls(on=True, namespaces=names)

    def records(self, namespace: str, labels: Mapping[str, str] | None) -> bool | None:
        """Whether a workload is recorded: True/False, or None when only its label decides and it is not
        known (``labels`` None: a pod or revision whose workload was not observed yet)."""
        if not self.on:
            return False
        if self.everything or namespace in self.namespaces:
            return True
        if labels is None:
            return None
        return labels.get(RECORD_LABEL) == "true"


# --- who changed the spec --------------------------------------------------------------------------------


def spec_managers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries whose fields include the spec (status writes left out), newest first,
    without their field sets: who last wrote the spec and how."""
    entries = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, Mapping) or entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1") or {}
        if not isinstance(fields, Mapping) or "f:spec" not in fields:
            continue
        entries.append(
            {
                "manager": str(entry.get("manager", "")),
                "operation": str(entry.get("operation", "")),
                "time": str(entry.get("time", "")),
            }
        )
    return sorted(entries, key=lambda e: e["time"], reverse=True)


# --- template diffs --------------------------------------------------------------------------------------


def template_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """``[{path, from, to}]`` of every leaf that differs (lists of named items, such as containers, are
    matched by name; other lists compared whole). A missing side is None."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after)):
            out += template_diff(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))
        return out
    if _named(before) and _named(after):
        old = {item["name"]: item for item in before}
        new = {item["name"]: item for item in after}
        out = []
        for name in sorted(set(old) | set(new)):
            out += template_diff(old.get(name), new.get(name), f"{path}[{name}]")
        return out
    if before == after:
        return []
    return [{"path": path, "from": before, "to": after}]


def _named(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, Mapping) and "name" in i for i in value)


# --- pods --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodView:
    uid: str
    revision: str | None
    images: tuple[tuple[str, str], ...]  # (container, image) of spec.containers
    ready: bool  # Ready condition True
    in_service: bool  # available at minReadySeconds 0 (services/model/availability.py)
    terminating: bool
    evicted: bool = False  # the eviction API deleted it (DisruptionTarget True, EvictionByEvictionAPI)


@dataclass(frozen=True)
class Change:
    action: str  # createPod, recreatePod, deletePod, evictPod, updateInPlace, becameReady, leftService
    uid: str
    revision: str | None = None  # the pod's revision after the change
    from_revision: str | None = None
    images: tuple[tuple[str, str], ...] = ()
    from_images: tuple[tuple[str, str], ...] = ()


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def pod_view(obj: Mapping[str, Any], revision_label: str, *, evictions: bool = True) -> PodView:
    """What tells a pod's actions apart. ``evictions``: an eviction is told from a deletion (a CloneSet's
    shadow trail records both as deletePod, as it always has)."""
    metadata = obj.get("metadata") or {}
    containers = (obj.get("spec") or {}).get("containers") or []
    ready = _condition(obj, READY_CONDITION)
    disruption = _condition(obj, "DisruptionTarget")
    return PodView(
        uid=str(metadata.get("uid", "")),
        revision=(metadata.get("labels") or {}).get(revision_label),
        images=tuple((str(c.get("name", "")), str(c.get("image", ""))) for c in containers),
        ready=ready is not None and str(ready.get("status")) == "True",
        in_service=pod_available(obj),
        terminating=bool(metadata.get("deletionTimestamp")),
        evicted=evictions
        and disruption is not None
        and str(disruption.get("status")) == "True"
        and disruption.get("reason") == "EvictionByEvictionAPI",
    )


def _deleted(view: PodView) -> str:
    return EVICT_POD if view.evicted else ActionKind.DELETE_POD


def _appeared(after: PodView, *, name_used: bool) -> list[Change]:
    changes = [
        Change(
            ActionKind.RECREATE_POD if name_used else ActionKind.CREATE_POD,
            after.uid,
            after.revision,
            images=after.images,
        )
    ]
    if after.terminating:
        changes.append(Change(_deleted(after), after.uid, after.revision))
    elif after.ready:
        changes.append(Change(BECAME_READY, after.uid, after.revision))
    return changes


def changes(before: PodView | None, after: PodView | None, *, name_used: bool = False) -> list[Change]:
    """What happened to a pod between two consecutive observations of it (None: no pod under that name).
    ``name_used``: an earlier pod had this name (its replacement is a recreate).

    - none -> present: ``createPod`` (``recreatePod`` if an earlier pod had the name), then ``becameReady``
      if it is Ready;
    - present -> terminating or gone: ``deletePod`` (``evictPod`` when the eviction API did it), once;
    - present -> another uid: the old pod's deletion (unless already terminating), then as above;
    - same pod, revision label or images changed: ``updateInPlace``, then ``becameReady`` if Ready now;
    - same pod, in service -> not, no update: ``leftService`` (not recorded: when an in-place update starts);
    - same pod, not Ready -> Ready: ``becameReady``.
    """
    if after is None:
        if before is None or before.terminating:
            return []
        return [Change(_deleted(before), before.uid, before.revision)]
    if before is None:
        return _appeared(after, name_used=name_used)
    if before.uid != after.uid:
        gone = [] if before.terminating else [Change(_deleted(before), before.uid, before.revision)]
        return gone + _appeared(after, name_used=True)
    if after.terminating:
        return [] if before.terminating else [Change(_deleted(after), after.uid, after.revision)]
    result: list[Change] = []
    if before.revision != after.revision or before.images != after.images:
        result.append(
            Change(
                ActionKind.UPDATE_IN_PLACE,
                after.uid,
                after.revision,
                before.revision,
                images=after.images,
                from_images=before.images,
            )
        )
    elif before.in_service and not after.in_service:
        result.append(Change("leftService", after.uid, after.revision))
    if after.ready and not before.ready:
        result.append(Change(BECAME_READY, after.uid, after.revision))
    return result


def existed_before(
    observed: ObjectObserved, first_seen: datetime | None, workload_born: datetime | None = None
) -> bool:
    """Whether a pod a trail sees for the first time was there before the trail started (``first_seen``: its
    first observation), so that its creation is nothing the trail saw happen. ``workload_born``: the
    workload's creationTimestamp when the trail saw it born (the watch's ADDED), else None."""
    # A born pod, or one no older than a workload seen born (its pods held until the workload showed its
    # opt-in), was created while rollbook watched, however late its observation came. Otherwise only the
    # timestamps tell, and they cannot tell the trail's own first observation apart: a creationTimestamp
    # has whole seconds and is before the observation of it anyway. Only a pod created in an earlier second
    # than the first observation surely predates the trail. Observations stored before ``born`` existed
    # carry none, so a trail recorded then folds again as it was recorded.
    created = _created_at(observed.object)
    if observed.born is True or created is None or first_seen is None:
        return False
    if workload_born is not None and created >= workload_born:
        return False
    return created < first_seen.replace(microsecond=0)


# --- the trail -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a recorded workload's latest observation says of its rollout (its kind reads it)."""

    update: str  # the revision the controller rolls to
    current: str | None  # the revision it rolls from (None: not known)
    complete: bool  # every replica updated and available at ``update``
    replicas: int
    strategy: dict[str, Any]
    paused: bool = False
    deadline_exceeded: bool = False
    progress_deadline_seconds: int = 0
    progressing_since: str = ""
    settled: bool = True  # the workload's own record names ``update`` (its spec's writer is known)


@dataclass(frozen=True)
class Step:
    partition: int  # replicas kept at the old revision
    replicas: int
    expected_updated: int
    max_unavailable: int
    max_surge: int


@dataclass
class RecordedTrail:
    """The recorded trail of one workload. A kind subclasses it with ``workload_kind``, ``revision_kind``,
    ``revision_label`` and the readings ``target``, ``step`` and ``revision_of``."""

    namespace: str
    name: str
    workload_kind = ""
    revision_kind = ""  # ReplicaSet, ControllerRevision
    revision_label = ""  # the pod label naming its revision
    workload: dict[str, Any] | None = None
    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> object (not deleted)
    numbers: dict[str, int] = field(default_factory=dict)  # revision name -> number recorded
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # revision name -> template
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    observed_version: int = 0
    version: int = 0  # of the recorded stream, as produced
    update_revision: str | None = None
    active_rollout: str | None = None
    active_from: str | None = None
    last_rollout: str | None = None
    rollouts_started: int = 0
    last_step: Step | None = None
    paused: bool = False
    deadline_reported: bool = False
    progressing_since: str = ""
    first_seen: datetime | None = None
    workload_born: datetime | None = None  # its creationTimestamp, once an observation of it is born
    awaiting_ready: dict[str, str] = field(default_factory=dict)  # pod uid -> action id it completes
    names_used: set[str] = field(default_factory=set)
    spec_writer: dict[str, Any] | None = None  # the last manager that wrote the spec (managedFields)
    # A rollout seen starting (its revision object came first) before the workload's record names it: its
    # id is known (pods created for it are its actions), its RolloutStarted waits for the spec's writer.
    pending_start: RolloutStarted | None = None
    waiting: list[PodActionObserved] = field(default_factory=list)  # pod actions not yet attributed

    # --- the kind's readings (overridden) ----------------------------------------------------------------

    def target(self) -> Target | None:
        raise NotImplementedError

    def step(self, target: Target) -> Step | None:
        raise NotImplementedError

    def revision_of(self, obj: Mapping[str, Any]) -> tuple[int, str, dict[str, Any]] | None:
        """(number, hash, template) of a revision object."""
        raise NotImplementedError

    # --- streams -----------------------------------------------------------------------------------------

    @property
    def observed(self) -> str:
        return f"{self.workload_kind}/{self.namespace}/{self.name}/observed"

    @property
    def stream(self) -> str:
        return f"{self.workload_kind}/{self.namespace}/{self.name}/recorded"

    # --- one observation ---------------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> list[Envelope]:
        """The recorded events one observation of the workload means (none for repeats or other events)."""
        payload = envelope.payload
        if envelope.stream != self.observed or envelope.stream_version <= self.observed_version:
            return []
        self.observed_version = envelope.stream_version
        if not isinstance(payload, ObjectObserved):
            return []
        if self.first_seen is None:
            self.first_seen = envelope.occurred_at
        events: list[Event] = []
        gone = payload.change == "DELETED"
        if payload.kind == self.workload_kind:
            if payload.born is True:
                self.workload_born = _created_at(payload.object)
            self._note_spec_writer(payload.object)
            self.workload = None if gone else payload.object
        elif payload.kind == self.revision_kind:
            events += self._revision_events(payload)
        elif payload.kind == "Pod":
            self.waiting += self._pod_events(envelope, payload)
        events += self._rollout_events()
        events += self._attributed(workload_seen=payload.kind == self.workload_kind)
        return self._envelopes(envelope, events)

    def _attributed(self, *, workload_seen: bool) -> list[Event]:
        """The pod actions waiting for their rollout, once the workload's record is settled: the watches of
        pods, revisions and the workload are separate streams, so a rollback's first pods can be observed
        before the re-numbered revision or the workload that says a rollout began. A pod created at another
        revision than the update one, with no rollout under way, is such a sign: it waits for the next
        settled observation of the workload itself."""
        if not self.waiting or not self.settled():
            return []
        early = any(
            a.action in (ActionKind.CREATE_POD, ActionKind.RECREATE_POD) and not self._at_update(a.revision)
            for a in self.waiting
        )
        if early and self.active_rollout is None and not workload_seen:
            return []
        rollout = self._rollout_of_now()
        waiting, self.waiting = self.waiting, []
        return [msgspec.structs.replace(a, rollout_id=rollout) for a in waiting]

    def _at_update(self, revision: str | None) -> bool:
        """Whether a pod's revision label names the update revision (a Deployment's pods carry the hash its
        ReplicaSet's name ends with; a StatefulSet's, the ControllerRevision's name)."""
        update = self.update_revision
        return revision is not None and update is not None and update in (revision, f"{self.name}-{revision}")

    def settled(self) -> bool:
        """Whether the workload's latest record reflects its spec (a kind may ask for more)."""
        workload = self.workload or {}
        generation = int((workload.get("metadata") or {}).get("generation") or 0)
        return int((workload.get("status") or {}).get("observedGeneration") or 0) >= generation

    def _note_spec_writer(self, obj: Mapping[str, Any]) -> None:
        """Who wrote the spec last: the manager whose entry is new or newer than in the previous
        observation (managedFields times have whole seconds, so two writes in one second tie on time)."""
        managers = obj.get(SPEC_MANAGERS)
        if not isinstance(managers, list):
            return
        before = (self.workload or {}).get(SPEC_MANAGERS) or []
        fresh = [m for m in managers if m not in before]
        if fresh:
            self.spec_writer = dict(fresh[0])
        elif self.spec_writer is None and managers:
            self.spec_writer = dict(managers[0])

    # --- revisions ---------------------------------------------------------------------------------------

    def _revision_events(self, observed: ObjectObserved) -> list[Event]:
        if observed.change == "DELETED":
            self.revisions.pop(observed.name, None)
            return []
        self.revisions[observed.name] = observed.object
        read = self.revision_of(observed.object)
        if read is None:
            return []
        number, hash_, template = read
        if self.numbers.get(observed.name) == number:
            return []
        earlier = [
            n for n, k in self.numbers.items() if k < number and n != observed.name and n in self.templates
        ]
        before = self.templates[max(earlier, key=lambda n: self.numbers[n])] if earlier else None
        self.numbers[observed.name] = number
        self.templates[observed.name] = template
        return [
            RevisionCreated(
                name=observed.name,
                revision=number,
                hash=hash_,
                template=template,
                diff=template_diff(before, template) if before is not None else [],
            )
        ]

    # --- rollouts ----------------------------------------------------------------------------------------

    def _rollout_events(self) -> list[Event]:
        if self.workload is None:
            return []
        target = self.target()
        if target is None:
            return []
        events: list[Event] = []
        if target.update != self.update_revision:
            first = self.update_revision is None
            current = target.current if first else self.update_revision
            if self.active_rollout:
                undone = target.update == self.active_from
                events += self._start_pending()
                events.append(
                    RolloutCompleted(
                        rollout_id=self.active_rollout,
                        revision=target.update,
                        outcome="rolled back" if undone else "superseded",
                    )
                )
                self.active_rollout = None
            self.update_revision = target.update
            if current and current != target.update and not (first and target.complete):
                self.rollouts_started += 1
                self.active_rollout = rollout_id(
                    self.namespace, self.name, target.update, self.rollouts_started
                )
                self.active_from = current
                self.last_rollout = self.active_rollout
                self.last_step = None
                self.deadline_reported = False
                self.pending_start = RolloutStarted(
                    rollout_id=self.active_rollout,
                    from_revision=current,
                    to_revision=target.update,
                    strategy=target.strategy,
                    replicas=target.replicas,
                )
        if target.settled:
            events += self._start_pending()
        rollout = self.active_rollout or self.last_rollout
        if rollout is not None and target.paused != self.paused and self.pending_start is None:
            events.append(
                RolloutPaused(rollout_id=rollout, reason="spec.paused")
                if target.paused
                else RolloutResumed(rollout_id=rollout)
            )
            self.paused = target.paused
        if self.active_rollout and self.pending_start is None:
            step = self.step(target)
            if step is not None and step != self.last_step:
                self.last_step = step
                events.append(PartitionStepPlanned(rollout_id=self.active_rollout, **_fields(step)))
            if target.deadline_exceeded and not self.deadline_reported:
                self.deadline_reported = True
                events.append(
                    RolloutProgressDeadlineExceeded(
                        rollout_id=self.active_rollout,
                        revision=target.update,
                        progress_deadline_seconds=target.progress_deadline_seconds,
                        progressing_since=self.progressing_since or target.progressing_since,
                    )
                )
            if target.complete:
                events.append(RolloutCompleted(rollout_id=self.active_rollout, revision=target.update))
                self.active_rollout = None
        if not target.deadline_exceeded:
            self.progressing_since = target.progressing_since
        return events

    def _start_pending(self) -> list[Event]:
        """The started rollout's ``RolloutStarted``, once the workload's own record names its revision (so
        the spec's writer is known), or when it ends before that."""
        started, self.pending_start = self.pending_start, None
        if started is None:
            return []
        if self.spec_writer is not None:
            started = RolloutStarted(**{**_fields(started), "changed_by": self.spec_writer})
        return [started]

    def _rollout_of_now(self) -> str | None:
        if self.active_rollout:
            return self.active_rollout
        last = self.last_rollout
        if (
            last is not None
            and self.update_revision
            and last.partition("@")[2].startswith(self.update_revision + "#")
        ):
            return last
        return None

    # --- pods --------------------------------------------------------------------------------------------

    def _pod_events(self, envelope: Envelope, observed: ObjectObserved) -> list[PodActionObserved]:
        previous = self.pods.get(observed.name)
        before = pod_view(previous, self.revision_label) if previous is not None else None
        if observed.change == "DELETED":
            self.pods.pop(observed.name, None)
            after = None
        else:
            self.pods[observed.name] = observed.object
            after = pod_view(observed.object, self.revision_label)
        found = changes(before, after, name_used=observed.name in self.names_used)
        if after is None or (before is not None and before.uid != after.uid):
            self.names_used.add(observed.name)
        if before is None and existed_before(observed, self.first_seen, self.workload_born):
            return []  # there before the trail started: nothing we saw happen
        events: list[PodActionObserved] = []
        for index, change in enumerate(found):
            if change.action == "leftService":
                continue
            action_id = str(derived_id("recorded-action", envelope.event_id, index))
            completes = None
            if change.action in (ActionKind.CREATE_POD, ActionKind.RECREATE_POD, ActionKind.UPDATE_IN_PLACE):
                self.awaiting_ready[change.uid] = action_id
            elif change.action == BECAME_READY:
                completes = self.awaiting_ready.pop(change.uid, None)
            details: dict[str, Any] = {}
            if change.images:
                details["images"] = dict(change.images)
            if change.from_images:
                details["fromImages"] = dict(change.from_images)
            events.append(
                PodActionObserved(
                    action_id=action_id,
                    action=change.action,
                    namespace=self.namespace,
                    pod=observed.name,
                    pod_uid=change.uid,
                    observation=envelope.event_id,
                    started_at=envelope.occurred_at,
                    rollout_id=None,  # set when attributed (``_attributed``)
                    revision=change.revision,
                    from_revision=change.from_revision,
                    completes=completes,
                    details=details,
                )
            )
        return events

    # --- envelopes ---------------------------------------------------------------------------------------

    def _envelopes(self, cause: Envelope, events: Iterable[Event]) -> list[Envelope]:
        result = []
        for index, payload in enumerate(events):
            self.version += 1
            result.append(
                new_event(
                    payload,
                    stream=self.stream,
                    stream_version=self.version,
                    occurred_at=cause.occurred_at,
                    event_id=derived_id("recorded", cause.event_id, index),
                    causation_id=cause.event_id,
                    correlation_id=getattr(payload, "rollout_id", None) or self._rollout_of_now(),
                )
            )
        return result


def _fields(value: Any) -> dict[str, Any]:
    names = getattr(value, "__struct_fields__", None)
    if names is not None:
        return {n: getattr(value, n) for n in names}
    return dict(value.__dict__)


def _created_at(obj: Mapping[str, Any]) -> datetime | None:
    return parse_kube_time((obj.get("metadata") or {}).get("creationTimestamp"))


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    """A status condition of an object, by type."""
    return _condition(obj or {}, kind)
