"""What-if: re-plan a recorded rollout with another update strategy against a model of the cluster driven
by the rollout's recorded pod timings, and measure both (docs/replay.md, "what-if").

Pure: recorded events in, two ``RolloutMetrics`` out; nothing is written anywhere.

- **Start**: the workload as the planner knew it just before the round that started the rollout; for a
  rollout observed in shadow mode (docs/shadow.md), as observed when its controller reported it.
- **Spec changes**: every later spec change the record holds (say partition 2 -> 0 an hour later) happens
  in the model at the same offset from the start, with the overrides applied on top, so a what-if of a
  rollout that an operator drove step by step still sees those steps.
- **Timings**: for each action kind, the median recorded delay from request to the action being seen in
  effect, and from then to the pod being available again (create, in-place update, recreate). Kinds the
  record never saw use ``DEFAULT_EFFECT_SECONDS`` / ``DEFAULT_READY_SECONDS``.
- **Planner**: the real decision function (``plan``); like the service, it does not plan again while
  an action it requested is not yet in effect.
- **Kubelet**: a pod whose container images changed restarts them and is unavailable until ready again
  (the recorded ready delay); a new pod starts and becomes ready after the recorded create delay.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from services.kinds.cloneset.rules import plan as planning
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.kinds.cloneset.rules.names import REVISION_LABEL
from services.kinds.cloneset.rules.workload_state import WorkloadState, object_name
from services.kinds.registry import CLONESET
from services.model.actions import BECAME_READY, ActionKind
from services.model.availability import AvailabilityCount, min_ready_seconds, revision_hash
from services.model.availability import pod_available as available
from services.model.cloneset import desired_replicas
from services.model.event_store import StoredEvent
from services.model.events import (
    ObjectObserved,
    PodActionObserved,
    PodActionRequested,
    RolloutCompleted,
    RolloutStarted,
    RoundPlanned,
)
from services.model.json_copy import json_copy
from services.model.streams import ACTION_ID_ANNOTATION, rollout_revision
from services.replay.cluster_model import ClusterModel

MAX_ROUNDS = 10_000


class WhatIfError(ValueError):
    """The rollout cannot be re-planned (not in the log, bad override)."""


@dataclass
class RolloutMetrics:
    origin: float = 0.0  # epoch seconds of moment 0 (a pod's Ready time is absolute)
    steps: int = 0  # rounds that requested pod actions
    actions: int = 0
    pods_touched: set[str] = field(default_factory=set)
    max_unavailable: int = 0  # most pods unavailable at one moment (services/model/availability.py)
    longest_unavailable_seconds: float = 0.0  # longest stretch one pod was unavailable
    # start to every pod updated and available (after RolloutCompleted in the record), or the record's end
    duration_seconds: float = 0.0
    completed: bool = False
    # The count's working state, not a metric: two runs with the same figures compare equal.
    _down_since: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    # Available pods counted as the view ``unavailability`` counts them (minReadySeconds included).
    _count: AvailabilityCount = field(default_factory=AvailabilityCount, compare=False, repr=False)

    def observe(
        self,
        moment: float,
        pods: dict[str, dict[str, Any]],
        replicas: int,
        changed: Iterable[str] | None = None,
        min_ready_seconds: int = 0,
    ) -> None:
        """The pods at ``moment``; ``changed``: the only pods that changed since the last call (None: any
        may have). Looking at those alone keeps a 200-pod rollout from costing events x pods.
        ``min_ready_seconds``: the workload's now."""
        at = self.origin + moment
        names = (
            sorted(pods.keys() | self._count.held() | self._down_since.keys()) if changed is None else changed
        )
        for name, when in self._count.advance(at):
            if name in self._down_since:
                self._up(name, when - self.origin)
        for name in names:
            pod = pods.get(name)
            for other, when in self._count.observe(name, pod, min_ready_seconds, at):
                if other in self._down_since:
                    self._up(other, when - self.origin)
            if pod is not None and not self._count.is_available(name):
                self._down_since.setdefault(name, moment)
            elif name in self._down_since:
                self._up(name, moment)
        # ``unavailable``: replicas - available pods (the pods down are the ones _down_since holds).
        self.max_unavailable = max(self.max_unavailable, self._count.unavailable(replicas))

    def _up(self, name: str, moment: float) -> None:
        """Pod ``name`` is available again (or gone): the longest stretch is per pod, how long one pod was
        out of service."""
        self.longest_unavailable_seconds = max(
            self.longest_unavailable_seconds, moment - self._down_since.pop(name)
        )

    def close(self, moment: float) -> None:
        for name, when in self._count.advance(self.origin + moment):
            if name in self._down_since:
                self._up(name, when - self.origin)
        for since in self._down_since.values():
            self.longest_unavailable_seconds = max(self.longest_unavailable_seconds, moment - since)
        self._down_since.clear()

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "actions": self.actions,
            "podsTouched": len(self.pods_touched),
            "maxUnavailable": self.max_unavailable,
            "longestUnavailableSeconds": round(self.longest_unavailable_seconds, 3),
            "durationSeconds": round(self.duration_seconds, 3),
            "completed": self.completed,
        }


@dataclass
class WhatIfResult:
    rollout_id: str
    overrides: dict[str, Any]
    recorded: RolloutMetrics
    replanned: RolloutMetrics
    timings: dict[str, dict[str, float]]


def _containers_current(pod: dict[str, Any]) -> bool:
    """Every container runs the image its spec asks for and is ready (the kubelet's part is done)."""
    statuses = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
    containers = (pod.get("spec") or {}).get("containers") or []
    return bool(containers) and all(
        (status := statuses.get(c.get("name"))) is not None
        and status.get("image") == c.get("image")
        and status.get("ready") is True
        for c in containers
    )


# The fields of a v1alpha1 CloneSet's spec.updateStrategy a what-if can change: anything else would be
# written where the planner never reads it and "predict" the recorded rollout under another name.
STRATEGY_FIELDS = (
    "type",
    "partition",
    "maxUnavailable",
    "maxSurge",
    "paused",
    "priorityStrategy",
    "scatterStrategy",
    "inPlaceUpdateStrategy",
)


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``updateStrategy.partition=0`` / ``maxUnavailable=100%`` -> {"partition": 0, "maxUnavailable": "100%"}
    (paths under spec.updateStrategy, first part one of ``STRATEGY_FIELDS``; numbers become ints, anything
    else stays a string)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise WhatIfError(f"--set takes path=value, got {pair!r}")
        path = key.removeprefix("spec.").removeprefix("updateStrategy.")
        if not path or any(not part for part in path.split(".")):
            raise WhatIfError(f"bad path in --set {pair!r}")
        if path.split(".")[0] not in STRATEGY_FIELDS:
            raise WhatIfError(
                f"--set {pair!r}: {key} is not an updateStrategy field; known: {', '.join(STRATEGY_FIELDS)}"
            )
        value: Any = int(raw) if raw.lstrip("-").isdigit() else raw
        overrides[path] = value
    return overrides


# --- the record ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartState:
    """The workload as the planner knew it at the round that started the rollout: its decision input."""

    cloneset: dict[str, Any] | None
    now: datetime | None
    pods: dict[str, dict[str, Any]]
    pvcs: dict[str, dict[str, Any]]
    revisions: dict[str, dict[str, Any]]

    @classmethod
    def of(cls, state: WorkloadState) -> StartState:
        return cls(state.cloneset, state.now, state.pods, state.pvcs, state.revisions)

    @classmethod
    def from_input(cls, plan_input: PlanInput) -> StartState:
        """The same from a round's stored input (its lists keyed by name, as the fold keys them)."""
        return cls(
            plan_input.clone_set,
            plan_input.now,
            {object_name(pod): pod for pod in plan_input.pods},
            {object_name(pvc): pvc for pvc in plan_input.pvcs},
            {object_name(revision): revision for revision in plan_input.revisions},
        )


def checked_input(input_json: bytes | None, round_planned: RoundPlanned) -> PlanInput | None:
    """A stored round input, decoded, when its SHA-256 is the one the round recorded (the hash chain
    vouches for the round); None when there is none or it does not match (then the events are folded)."""
    if input_json is None or hashlib.sha256(input_json).hexdigest() != round_planned.input_sha256:
        return None
    try:
        return _plan_input.decode(input_json)
    except msgspec.ValidationError:  # a hash match of something that is not an input: not ours
        return None


_plan_input = msgspec.json.Decoder(PlanInput)


@dataclass
class RecordedRollout:
    start: StoredEvent  # the RoundPlanned that started the rollout
    state: StartState  # folded up to that round's inputs
    spec_changes: list[tuple[float, dict[str, Any]]]  # (seconds after start, CloneSet object)
    metrics: RolloutMetrics
    timings: dict[str, dict[str, float]]
    # Its end was among the events read; False: the last of them closed it, so more events may move it.
    ended: bool = True


def _pod_revision_hash(pod: dict[str, Any]) -> str:
    return revision_hash(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL))


def _all_updated(pods: dict[str, dict[str, Any]], target_hash: str, replicas: int) -> bool:
    """Every pod at the rollout's revision and available (the end of a rollout, in both columns)."""
    return len(pods) == replicas and all(
        _pod_revision_hash(pod) == target_hash and available(pod) for pod in pods.values()
    )


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier) / timedelta(seconds=1)


def read_record(namespace: str, name: str, events: list[StoredEvent], rollout_id: str) -> RecordedRollout:
    """The rollout as recorded: its starting state (folded from every event before it), later spec
    changes, timings and metrics."""
    started = next(
        (
            e
            for e in events
            if isinstance(e.envelope.payload, RolloutStarted) and e.envelope.payload.rollout_id == rollout_id
        ),
        None,
    )
    if started is None:
        raise WhatIfError(f"rollout {rollout_id!r} has no RolloutStarted in the log")
    round_event = next((e for e in events if e.envelope.event_id == started.envelope.causation_id), None)
    if round_event is None:
        raise WhatIfError(f"rollout {rollout_id!r}: the round that started it is not in the log")
    cause = round_event.envelope.payload
    if isinstance(cause, RoundPlanned):
        # rollbook's rollout: the state the round that started it folded.
        through, t0, last = cause.through, cause.now, round_event.global_position - 1
    elif isinstance(cause, ObjectObserved):
        # An observed rollout (shadow mode, docs/shadow.md): the state through the observation showing it.
        envelope = round_event.envelope
        through, t0, last = (
            {envelope.stream: envelope.stream_version},
            envelope.occurred_at,
            round_event.global_position,
        )
    else:
        raise WhatIfError(f"rollout {rollout_id!r}: the round that started it is not in the log")
    state = WorkloadState(namespace, name)
    for stored in events:
        if stored.global_position > last:
            break
        if stored.envelope.stream_version <= through.get(stored.envelope.stream, 0):
            state.fold(stored.envelope)
    return record_from(round_event, t0, StartState.of(state), events, rollout_id)


def record_from(
    round_event: StoredEvent, t0: datetime, state: StartState, events: list[StoredEvent], rollout_id: str
) -> RecordedRollout:
    """The rollout as recorded from its starting ``state`` at ``round_event`` (the round that started it,
    at ``t0``): the events after that round (``events`` may hold earlier ones too) give its later spec
    changes, timings and metrics."""
    completed = False  # RolloutCompleted(succeeded) seen
    done_at: datetime | None = None  # ... and then every pod updated and available: the model's end too
    target_hash = revision_hash(rollout_revision(rollout_id))
    replicas = desired_replicas(state.cloneset)
    spec_changes: list[tuple[float, dict[str, Any]]] = []
    last_spec = (state.cloneset or {}).get("spec")
    min_ready = min_ready_seconds(state.cloneset)
    metrics = RolloutMetrics(origin=t0.timestamp())
    pods = json_copy(state.pods)
    requested: dict[str, tuple[str, datetime, str]] = {}  # action id -> (kind, at, pod)
    effect_at: dict[str, datetime] = {}
    awaiting_ready: dict[str, tuple[str, str, datetime]] = {}  # pod -> (action kind, uid, in effect at)
    delays: dict[str, dict[str, list[float]]] = {}
    round_actions: dict[str, int] = {}
    observed_at: dict[str, tuple[str, datetime]] = {}  # observed action id -> (kind, when observed)
    last_moment = t0
    first = True  # the first observation looks at every pod; the later ones at the pod observed
    for stored in events:
        if stored.global_position <= round_event.global_position:
            continue
        envelope = stored.envelope
        payload = envelope.payload
        moment = envelope.occurred_at
        if done_at is not None:
            break
        if isinstance(payload, PodActionRequested) and payload.rollout_id == rollout_id:
            metrics.actions += 1
            metrics.pods_touched.add(payload.target)
            round_actions[str(envelope.causation_id)] = 1
            requested[payload.action_id] = (payload.action, moment, payload.target)
        elif isinstance(payload, PodActionObserved) and payload.rollout_id == rollout_id:
            # Someone else's action (shadow mode): in effect when observed, ready at its becameReady.
            kind = ActionKind.CREATE_POD if payload.action == ActionKind.RECREATE_POD else payload.action
            if payload.action == BECAME_READY:
                opened = observed_at.pop(payload.completes or "", None)
                if opened is not None:
                    delays.setdefault(opened[0], {}).setdefault("ready", []).append(
                        _seconds(moment, opened[1])
                    )
            else:
                metrics.actions += 1
                metrics.pods_touched.add(payload.pod)
                round_actions[str(envelope.causation_id)] = 1
                delays.setdefault(kind, {}).setdefault("effect", []).append(
                    _seconds(moment, payload.started_at)
                )
                observed_at[payload.action_id] = (kind, moment)
        elif isinstance(payload, RolloutCompleted) and payload.rollout_id == rollout_id:
            metrics.completed = completed = payload.outcome == "succeeded"
            if not completed:  # superseded or failed: it ends here
                done_at = moment
            elif _all_updated(pods, target_hash, replicas):
                # Completed with every pod already observed updated: it ends here, not at whatever the
                # log observes next (a later status write, a timer firing).
                done_at = moment
        elif isinstance(payload, ObjectObserved):
            last_moment = max(last_moment, moment)
            if payload.kind == CLONESET.name:
                spec = payload.object.get("spec")
                if payload.change != "DELETED" and spec != last_spec:
                    spec_changes.append((_seconds(moment, t0), payload.object))
                    last_spec = spec
                    replicas = desired_replicas(payload.object)
                    min_ready = min_ready_seconds(payload.object)
                continue
            if payload.kind != "Pod":
                continue
            if payload.change == "DELETED":
                pods.pop(payload.name, None)
                for action_id, (kind, at, pod) in requested.items():
                    if (
                        pod == payload.name
                        and kind in (ActionKind.DELETE_POD, ActionKind.RECREATE_POD)
                        and action_id not in effect_at
                    ):
                        effect_at[action_id] = moment
                        delays.setdefault(kind, {}).setdefault("effect", []).append(_seconds(moment, at))
            else:
                pods[payload.name] = payload.object
                metadata = payload.object.get("metadata") or {}
                action_id = str((metadata.get("annotations") or {}).get(ACTION_ID_ANNOTATION, ""))
                if action_id in requested and action_id not in effect_at:
                    kind, at, _ = requested[action_id]
                    effect_at[action_id] = moment
                    delays.setdefault(kind, {}).setdefault("effect", []).append(_seconds(moment, at))
                    if kind in (ActionKind.CREATE_POD, ActionKind.UPDATE_IN_PLACE):
                        # Ready again is followed by pod (uid), not action id: later actions re-annotate it.
                        awaiting_ready[payload.name] = (kind, str(metadata.get("uid", "")), moment)
                waiting = awaiting_ready.get(payload.name)
                if (
                    waiting is not None
                    and waiting[1] == str(metadata.get("uid", ""))
                    and _containers_current(payload.object)
                ):
                    kind, _, since = awaiting_ready.pop(payload.name)
                    delays.setdefault(kind, {}).setdefault("ready", []).append(_seconds(moment, since))
            metrics.observe(
                _seconds(moment, t0), pods, replicas, None if first else (payload.name,), min_ready
            )
            first = False
            if completed and _all_updated(pods, target_hash, replicas):
                done_at = moment
    metrics.steps = len(round_actions)
    end = done_at or last_moment
    metrics.duration_seconds = _seconds(end, t0)
    metrics.close(metrics.duration_seconds)
    timings = {
        kind: {part: statistics.median(values) for part, values in parts.items() if values}
        for kind, parts in delays.items()
    }
    return RecordedRollout(round_event, state, spec_changes, metrics, timings, done_at is not None)


# --- the model -------------------------------------------------------------------------------------


def _replan(model: ClusterModel) -> RolloutMetrics:
    """Plan, carry out, repeat: like the planner service, no new round while an action is in flight."""
    metrics = RolloutMetrics(origin=model.t0.timestamp())
    metrics.observe(
        0.0, model.pods, desired_replicas(model.cloneset), None, min_ready_seconds(model.cloneset)
    )
    model.changed_pods.clear()
    for _ in range(MAX_ROUNDS):
        if model.in_flight == 0:
            plan = planning.plan(model.plan_input(), views=model.pod_views)
            if plan.rejected is not None:
                rejected = msgspec.to_builtins(plan.rejected)
                raise WhatIfError(f"the planner rejects the overridden spec: {rejected}")
            actions = model.apply_plan(plan)
            if actions:
                metrics.steps += 1
                metrics.actions += len(actions)
                metrics.pods_touched.update(a.pod for a in actions)
            if _done(model, plan):
                metrics.completed = True
                break
        if model.step() is None:
            break
        replicas = desired_replicas(model.cloneset)
        metrics.observe(
            model.now, model.pods, replicas, model.changed_pods, min_ready_seconds(model.cloneset)
        )
        model.changed_pods.clear()
    metrics.duration_seconds = model.now
    metrics.close(model.now)
    return metrics


def _done(model: ClusterModel, plan: Plan) -> bool:
    if plan.actions or model.busy() or any(what == "spec" for _, _, what, _ in model.queue):
        return False
    replicas = desired_replicas(model.cloneset)
    hash_part = revision_hash(plan.update_revision)
    expected = plan.expected_updated_replicas
    if expected is not None and expected < replicas:  # a partition holds some pods back: enough updated
        updated = sum(
            1 for pod in model.pods.values() if _pod_revision_hash(pod) == hash_part and available(pod)
        )
        return updated >= int(expected) and all(available(p) for p in model.pods.values())
    return _all_updated(model.pods, hash_part, replicas)


def what_if(
    namespace: str, name: str, events: list[StoredEvent], rollout_id: str, overrides: dict[str, Any]
) -> WhatIfResult:
    return replan(read_record(namespace, name, events, rollout_id), rollout_id, overrides)


def replan(recorded: RecordedRollout, rollout_id: str, overrides: dict[str, Any]) -> WhatIfResult:
    """The recorded rollout re-planned from its starting state with ``overrides``, beside its record."""
    state = recorded.state
    assert state.cloneset is not None and state.now is not None
    model = ClusterModel(
        state.cloneset,
        t0=state.now,
        pods=state.pods,
        pvcs=state.pvcs,
        revisions=state.revisions,
        timings=recorded.timings,
        overrides=overrides,
    )
    for offset, obj in recorded.spec_changes:
        model.schedule_spec(offset, obj)
    replanned = _replan(model)
    return WhatIfResult(rollout_id, overrides, recorded.metrics, replanned, recorded.timings)
