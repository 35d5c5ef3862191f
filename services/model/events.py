"""The event model: immutable msgspec Structs, one per event type, in a tagged union, inside an envelope.

The envelope carries identity and ordering (event_id, stream, stream_version), the payload carries
meaning. ``payload.type`` (the msgspec tag) and ``Envelope.type`` are the same string; ``new_event``
keeps them in step. Every type is documented in docs/events.md.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 1  # the version of every event type that has never changed


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=False):
    """Base of every payload; the class name is the tag written to ``type``."""


# --- observations (watcher) -------------------------------------------------------------------------


class ObjectObserved(_Event, frozen=True, kw_only=True):
    """The watcher saw a real change of a Kubernetes object (added, modified, deleted)."""

    kind: str  # CloneSet, SidecarSet, Pod, PersistentVolumeClaim
    namespace: str
    name: str
    uid: str
    resource_version: str
    change: Literal["ADDED", "MODIFIED", "DELETED"]
    object: dict[str, Any]  # the object exactly as the API returned it
    # True: this is the watch's ADDED, the API server telling of the object's creation after the watcher
    # began watching (not a list, nor an object held until its workload's opt-in was known). Absent
    # otherwise, and in every observation stored before the field (services/kinds/recorded/rules.py,
    # ``existed_before``).
    born: bool | msgspec.UnsetType = msgspec.UNSET


class ObservationRejected(_Event, frozen=True, kw_only=True):
    """The watcher saw an object whose observation would exceed the event ceiling
    (``settings.max_event_bytes``) or that nests deeper than ``settings.max_object_depth`` (or than a
    JSON decoder takes): it stores this instead, so the refusal is on record and the
    services go on. The object is not observed until a change brings it under the ceiling."""

    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    change: Literal["ADDED", "MODIFIED", "DELETED"]
    size_bytes: int  # of the observation that was refused
    limit_bytes: int
    reason: str
    # Set when it was refused for its nesting rather than its size: how deep the object nests, and the
    # deepest the watcher records (settings.max_object_depth). 0 in events of either kind before.
    depth: int = 0
    depth_limit: int = 0


# --- decisions (planner) ----------------------------------------------------------------------------


class RevisionCreated(_Event, frozen=True, kw_only=True):
    name: str  # revision name, e.g. sample-7656fc4998
    revision: int  # ControllerRevision number
    hash: str
    template: dict[str, Any]
    # The ControllerRevision exactly as the decision function built it (what the next rounds get back as
    # their "revisions" input). A RevisionCreated for an existing name re-numbers it (a rollback).
    object: dict[str, Any] = {}
    # A recorded kind's revision (a Deployment's ReplicaSet, a StatefulSet's ControllerRevision): how its
    # template differs from the revision before it, ``[{path, from, to}]`` (services/kinds/recorded/rules.py).
    # Absent (left out of the JSON) in rollbook's own revisions, so their record is as before.
    diff: list[dict[str, Any]] | msgspec.UnsetType = msgspec.UNSET


class RevisionsPruned(_Event, frozen=True, kw_only=True):
    """Revisions dropped from the history (beyond revisionHistoryLimit)."""

    names: list[str]


class RolloutStarted(_Event, frozen=True, kw_only=True):
    rollout_id: str
    from_revision: str
    to_revision: str
    strategy: dict[str, Any]  # the updateStrategy in force when it started
    replicas: int
    # A recorded kind's rollout: who changed the spec, from the workload's managedFields
    # ({manager, operation, time}; services/kinds/recorded/rules.py). Absent in rollbook's own rollouts.
    changed_by: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


class RolloutPaused(_Event, frozen=True, kw_only=True):
    rollout_id: str
    reason: str


class RolloutResumed(_Event, frozen=True, kw_only=True):
    rollout_id: str


class RolloutCompleted(_Event, frozen=True, kw_only=True):
    rollout_id: str
    revision: str
    # "rolled back": a recorded rollout undone before it finished (its from revision rolled out again).
    outcome: Literal["succeeded", "superseded", "failed", "rolled back"] = "succeeded"


class RolloutProgressDeadlineExceeded(_Event, frozen=True, kw_only=True):
    """The CloneSet's Progressing condition turned False/ProgressDeadlineExceeded: the rollout made no
    progress within ``spec.progressDeadlineSeconds`` (informational: the rollout goes on)."""

    rollout_id: str | None  # the active rollout, if any
    revision: str  # the update revision
    progress_deadline_seconds: int
    progressing_since: str  # the Progressing condition's lastUpdateTime before it timed out


class PartitionStepPlanned(_Event, frozen=True, kw_only=True):
    rollout_id: str
    partition: int  # resolved count of pods kept at the old revision
    replicas: int
    expected_updated: int
    max_unavailable: int
    max_surge: int


class PodActionRequested(_Event, frozen=True, kw_only=True):
    """An action the planner asks the executor to carry out: on a pod (or a PVC of one), or on the workload
    itself (``workload``, e.g. setPodsToDelete on the CloneSet).

    Schema v2: ``workload`` added; a v1 setPodsToDelete named its CloneSet in ``pod`` (upcast on read)."""

    action_id: str  # deterministic id; recorded on the object so a redelivery is a no-op
    action: str  # an ActionKind (services/model/actions.py): createPod, deletePod, updateInPlace, ...
    namespace: str
    pod: str = ""  # the pod acted on (for a PVC action, the pod it belongs to); "" for a workload action
    rollout_id: str | None = None
    revision: str | None = None
    details: dict[str, Any] = {}  # the plan's action as JSON (object, patch, withPVCs, ...)
    # The workload acted on itself (setPodsToDelete: the CloneSet's name); absent (left out of the JSON,
    # so a pod action's record is as before) for an action on a pod.
    workload: str | msgspec.UnsetType = msgspec.UNSET

    @property
    def target(self) -> str:
        """The name of what the action acts on: the workload for a workload action, else the pod."""
        return self.pod if isinstance(self.workload, msgspec.UnsetType) else self.workload


class StatusPlanned(_Event, frozen=True, kw_only=True):
    """The status the workload should report; the executor writes it through the status subresource."""

    kind: str
    namespace: str
    name: str
    status: dict[str, Any]
    # A round whose only decision is this status is stored as this one event (an idle cluster's readiness
    # flap: one row, not two): ``round`` is its ``RoundPlanned`` and the event's id is the round's id
    # (services/model/rounds.py ``round_envelopes``). Absent (left out of the JSON, so other statuses are
    # recorded as before) when the status is one decision among others of a round recorded on its own.
    # Additive with a default that means what an older row meant: no schema_version bump, and an older
    # reader ignores it.
    round: RoundPlanned | msgspec.UnsetType = msgspec.UNSET


class RequeueScheduled(_Event, frozen=True, kw_only=True):
    """The planner wants to be asked again at ``due_at`` (a grace period ends then)."""

    due_at: datetime
    reason: str = "grace"  # grace: the plan asked for it; expectations: pending actions may have timed out


class RequeueDue(_Event, frozen=True, kw_only=True):
    """A scheduled requeue fired: an input of the next round, whose ``now`` is at least ``due_at``."""

    due_at: datetime
    scheduled_by: uuid.UUID  # the RequeueScheduled event


class RoundPlanned(_Event, frozen=True, kw_only=True):
    """The planner ran the decision function once for a workload. The decisions that follow it carry its
    event id as causation_id. ``through`` names exactly which inputs were folded (every event of each
    stream up to that version), so a replay rebuilds the same input; ``input_sha256`` checks it."""

    through: dict[str, int]  # input stream -> last stream_version folded
    now: datetime  # the round's clock: the latest occurred_at (or due_at) among the folded inputs
    input_sha256: str  # of the canonical planner input JSON
    # The planner rules that decided the round: the deciding planner's RULES_VERSION (CloneSet:
    # services/kinds/cloneset/rules/decisions.py, SidecarSet: services/kinds/sidecarset/rules/decisions.py).
    # A round stored before rules were versioned has no field and reads as 1. Additive with a default, so no
    # schema_version bump: old rows decode as they are, and an older reader ignores the field.
    rules: int = 1


class PodHookHeld(_Event, frozen=True, kw_only=True):
    """A CloneSet lifecycle hook started holding a pod: the round that first saw it waiting in ``state``
    (PreparingDelete: preDelete; PreparingUpdate or Updated: inPlaceUpdate; PreparingNormal: preNormal)."""

    pod: str
    hook: Literal["preDelete", "inPlaceUpdate", "preNormal"]
    state: str  # the pod's lifecycle.apps.kruise.io/state


class PodHookReleased(_Event, frozen=True, kw_only=True):
    """The hook no longer holds the pod (released, or the pod is gone): how long it held it."""

    pod: str
    hook: Literal["preDelete", "inPlaceUpdate", "preNormal"]
    state: str  # the state it was held in
    held_since: datetime  # the PodHookHeld round's time
    held_seconds: float


class SpecRejected(_Event, frozen=True, kw_only=True):
    field: str
    reason: str
    generation: int | None = None


# --- outcomes (executor) ----------------------------------------------------------------------------


class PodActionStarted(_Event, frozen=True, kw_only=True):
    """An executor took the action and has to wait (an API retry, a hand-back to the bus): the trail shows
    it in hand meanwhile. An action completed within one delivery has none: its outcome's ``started_at``
    says when it was taken. Trails recorded before hold one for every action taken."""

    action_id: str
    executor: str


# ``started_at`` and ``executor`` were added without a schema_version bump: additive, with defaults that
# say what an older row said (nothing about the taking), so old rows decode as stored with no upcaster.


class PodActionSucceeded(_Event, frozen=True, kw_only=True):
    action_id: str
    pod_uid: str | None = None
    already_applied: bool = False  # a redelivery found the action id on the object
    started_at: datetime | None = None  # when the executor that wrote it took the action
    executor: str | None = None  # which executor wrote it (<hostname>/<pid>)


class PodActionFailed(_Event, frozen=True, kw_only=True):
    action_id: str
    reason: str
    retryable: bool = False
    started_at: datetime | None = None  # None: never taken (its earlier actions never settled)
    executor: str | None = None


# --- shadow mode (planner: a CloneSet rollbook observes but does not drive; docs/shadow.md) ---------


class PodActionObserved(_Event, frozen=True, kw_only=True):
    """A pod action someone else took (OpenKruise, a person with kubectl), derived from two consecutive
    observations of the pod. On ``CloneSet/<ns>/<name>/shadow``; nothing executes it."""

    action_id: str  # deterministic: derived from the observation that showed it
    action: str  # createPod, recreatePod, deletePod, updateInPlace, becameReady
    namespace: str
    pod: str
    pod_uid: str
    observation: uuid.UUID  # the ObjectObserved event that showed it
    started_at: datetime  # when the pod first showed it (an in-place update: when it left service)
    rollout_id: str | None = None
    revision: str | None = None  # the pod's revision label after the action
    from_revision: str | None = None  # ... and before it (updateInPlace)
    completes: str | None = None  # becameReady: the action id of the create/update it completes
    details: dict[str, Any] = {}  # images before and after


class ShadowPlanned(_Event, frozen=True, kw_only=True):
    """What rollbook would have done on an observed state of a CloneSet it does not drive. Recorded when
    the decision changes (the same decision on later states is not repeated); never executed."""

    through: int  # version of the workload's observed stream the state folds
    now: datetime
    update_revision: str | None = None  # rollbook's name for the template's revision
    partition: int | None = None
    max_unavailable: int = 0
    max_surge: int = 0
    actions: list[dict[str, Any]] = []  # [{action, pod, revision}], the plan's pod actions
    rejected: dict[str, Any] | None = None  # the spec rollbook would have rejected, and why
    rules: int = 1  # the planner rules that decided (RoundPlanned.rules)


class ShadowCompared(_Event, frozen=True, kw_only=True):
    """One observed pod action compared with rollbook's decision on the state the controller acted on
    (docs/shadow.md, "Agreement")."""

    action_id: str  # the PodActionObserved
    action: str
    pod: str
    verdict: Literal["agree", "differ", "unknown"]
    reason: str
    rollout_id: str | None = None
    decision: uuid.UUID | None = None  # the ShadowPlanned compared with (None: rollbook had no decision)
    rollbook: list[dict[str, Any]] = []  # rollbook's pod actions in that decision
    unavailable: int = 0  # pods unavailable once the controller acted
    max_unavailable: int | None = None  # the rollout's resolved maxUnavailable
    pattern: str | None = None  # a known way to differ: "above maxUnavailable", "surge thrash"


# --- SidecarSet (webhook) ---------------------------------------------------------------------------


class SidecarInjected(_Event, frozen=True, kw_only=True):
    namespace: str
    pod: str
    sidecarset: str
    revision: str
    containers: list[str]


# --- audit (rollbook audit redact) ------------------------------------------------------------------

REDACTION_STREAM = "Audit//redaction"  # the stream of TrailRedacted records


class TrailRedacted(_Event, frozen=True, kw_only=True):
    """``rollbook audit redact`` rewrote recorded values under the redaction policy ``policy`` and re-chained
    the log (on ``Audit//redaction``). ``positions``: the events rewritten (``rounds_resealed`` of them
    rounds whose input digest changed with their redacted input); ``chain_before`` / ``chain_after``: the
    global chain hash at ``head`` before and after; ``checkpoints_before``: the chain hash each checkpoint
    position had, so a checkpoint kept elsewhere before the rewrite is recognised, and nothing else is.
    ``tree_size_before`` / ``root_before``: the Merkle tree head of the whole log before the rewrite;
    ``signed_superseded``: tree size -> root (hex) of every signed checkpoint the rewrite superseded (those
    covering a rewritten position). ``rollbook audit verify`` accepts such a checkpoint, wherever it is
    kept, only while a signed checkpoint taken after the rewrite covers this record (records made before
    signed checkpoints existed carry none of the three)."""

    policy: str
    redacted_at: datetime
    positions: list[int]
    rounds_resealed: int
    head: int
    chain_before: str  # hex
    chain_after: str  # hex
    checkpoints_before: dict[str, str]  # position -> chain hash (hex) before the rewrite
    tree_size_before: int = 0
    root_before: str = ""  # hex
    signed_superseded: dict[str, str] = {}  # tree size -> root hash (hex) of a superseded checkpoint


STORE_LOSS_STREAM = "Audit//store-loss"  # the stream of StoreLossDetected records


class StoreLossDetected(_Event, frozen=True, kw_only=True):
    """The auditor's relay found events it had published that the store no longer holds (a failover to a
    standby without the old primary's last commits): one per workload, on a CloneSet's actions stream, else
    on ``Audit//store-loss``. ``recovered``: those it put back from the bus as themselves (same id, stream,
    version, type, payload and times), each ``{event_id, stream, version, type, rollout_id,
    position_before, position}``; ``unrecoverable``: those it could not, each ``{event_id, stream, version,
    type, rollout_id, position_before, reason}`` (``reason``: the version is held by another event now, an
    earlier lost event could not go back, an earlier version of its stream is missing, or the bus no longer
    holds the body); ``actions_applied``: pod actions carried out whose outcome is among the
    unrecoverable, each ``{action_id, action, pod, pod_uid, rollout_id, event_id}``; ``workloads``: the
    workload stream (``Kind/namespace/name``)."""

    detected_at: datetime
    recovered: list[dict[str, Any]] = []
    unrecoverable: list[dict[str, Any]] = []
    actions_applied: list[dict[str, Any]] = []
    workloads: list[str] = []


Event = (
    ObjectObserved
    | ObservationRejected
    | RevisionCreated
    | RevisionsPruned
    | RolloutStarted
    | RolloutPaused
    | RolloutResumed
    | RolloutCompleted
    | RolloutProgressDeadlineExceeded
    | PartitionStepPlanned
    | PodActionRequested
    | StatusPlanned
    | RequeueScheduled
    | RequeueDue
    | RoundPlanned
    | SpecRejected
    | PodHookHeld
    | PodHookReleased
    | PodActionStarted
    | PodActionSucceeded
    | PodActionFailed
    | SidecarInjected
    | PodActionObserved
    | ShadowPlanned
    | ShadowCompared
    | TrailRedacted
    | StoreLossDetected
)

EVENT_TYPES: dict[str, type[_Event]] = {cls.__name__: cls for cls in Event.__args__}  # type: ignore[attr-defined]

# The current schema_version of each event type. Raise a type's entry when its Struct changes shape, and
# register an upcaster from the old version in services/model/upcasting.py (old rows are read through it).
SCHEMA_VERSIONS: dict[str, int] = {
    **dict.fromkeys(EVENT_TYPES, SCHEMA_VERSION),
    "PodActionRequested": 2,  # v2: ``workload`` (services/model/upcasting.py reads v1)
}


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    event_id: uuid.UUID  # also the NATS Nats-Msg-Id
    stream: str  # e.g. CloneSet/<namespace>/<name>
    stream_version: int  # 1-based sequence within the stream
    type: str  # == payload's tag
    schema_version: int
    occurred_at: datetime
    payload: Event
    causation_id: uuid.UUID | None = None  # the event that caused this one
    correlation_id: str | None = None  # the rollout this event belongs to


def new_event(
    payload: Event,
    *,
    stream: str,
    stream_version: int,
    occurred_at: datetime,
    event_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
    correlation_id: str | None = None,
) -> Envelope:
    """Wrap a payload in an envelope; pass ``event_id`` for deterministic ids (the planner derives them)."""
    return Envelope(
        event_id=event_id or uuid.uuid4(),
        stream=stream,
        stream_version=stream_version,
        type=type(payload).__name__,
        schema_version=SCHEMA_VERSIONS.get(type(payload).__name__, SCHEMA_VERSION),
        occurred_at=occurred_at,
        payload=payload,
        causation_id=causation_id,
        correlation_id=correlation_id,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Envelope)


def encode(envelope: Envelope) -> bytes:
    return _encoder.encode(envelope)


def decode(data: bytes) -> Envelope:
    """Decode and validate one envelope; raises msgspec.ValidationError / DecodeError on bad input."""
    return _decoder.decode(data)
