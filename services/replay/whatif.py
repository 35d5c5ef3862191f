"""What-if: re-plan a recorded rollout with another update strategy against a model of the cluster driven
by the rollout's recorded pod timings, and measure both (docs/replay.md, "what-if").

Pure: recorded events in, two ``RolloutMetrics`` out; nothing is written anywhere.

- **Start**: the workload as the planner knew it just before the round that started the rollout.
- **Spec changes**: every later spec change the record holds (say partition 2 -> 0 an hour later) happens
  in the model at the same offset from the start, with the overrides applied on top, so a what-if of a
  rollout that an operator drove step by step still sees those steps.
- **Timings**: for each action kind, the median recorded delay from request to the action being seen in
  effect, and from then to the pod being available again (create, in-place update, recreate). Kinds the
  record never saw use ``DEFAULT_EFFECT_SECONDS`` / ``DEFAULT_READY_SECONDS``.
- **Planner**: the real decision function (``plan_json``); like the service, it does not plan again while
  an action it requested is not yet in effect.
- **Kubelet**: a pod whose container images changed restarts them and is unavailable until ready again
  (the recorded ready delay); a new pod starts and becomes ready after the recorded create delay.
"""

from __future__ import annotations

import copy
import heapq
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from services.domain.events import (
    ObjectObserved,
    PodActionRequested,
    RolloutCompleted,
    RolloutStarted,
    RoundPlanned,
)
from services.domain.store import StoredEvent
from services.domain.streams import ACTION_ID_ANNOTATION, WORKLOAD_KIND
from services.planner.names import REVISION_LABEL
from services.planner.plan import plan_json
from services.planner.workload_state import WorkloadState

DEFAULT_EFFECT_SECONDS = 0.5
DEFAULT_READY_SECONDS = 2.0
MAX_ROUNDS = 10_000
_plan_decoder = msgspec.json.Decoder(dict[str, Any])


class WhatIfError(ValueError):
    """The rollout cannot be re-planned (not in the log, bad override)."""


@dataclass
class RolloutMetrics:
    steps: int = 0  # rounds that requested pod actions
    actions: int = 0
    pods_touched: set[str] = field(default_factory=set)
    max_unavailable: int = 0  # most pods unavailable at one moment
    longest_unavailable_seconds: float = 0.0  # longest stretch one pod was unavailable
    duration_seconds: float = 0.0  # start to every pod updated and available (or the end of the record)
    completed: bool = False
    _down_since: dict[str, float] = field(default_factory=dict)

    def observe(self, moment: float, pods: dict[str, dict[str, Any]]) -> None:
        down = {name for name, pod in pods.items() if not available(pod)}
        self.max_unavailable = max(self.max_unavailable, len(down))
        for name in down:
            self._down_since.setdefault(name, moment)
        for name in list(self._down_since):
            if name not in down:
                self.longest_unavailable_seconds = max(
                    self.longest_unavailable_seconds, moment - self._down_since.pop(name)
                )

    def close(self, moment: float) -> None:
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


def _conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (pod.get("status") or {}).get("conditions") or []}


def available(pod: dict[str, Any]) -> bool:
    conditions = _conditions(pod)
    return (
        conditions.get("Ready") == "True"
        and conditions.get("InPlaceUpdateReady") != "False"
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    )


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


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``updateStrategy.partition=0`` / ``maxUnavailable=100%`` -> {"partition": 0, "maxUnavailable": "100%"}
    (paths under spec.updateStrategy; numbers become ints, anything else stays a string)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise WhatIfError(f"--set takes path=value, got {pair!r}")
        path = key.removeprefix("spec.").removeprefix("updateStrategy.")
        if not path or any(not part for part in path.split(".")):
            raise WhatIfError(f"bad path in --set {pair!r}")
        value: Any = int(raw) if raw.lstrip("-").isdigit() else raw
        overrides[path] = value
    return overrides


def _apply_overrides(cloneset: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(cloneset)
    strategy = result.setdefault("spec", {}).setdefault("updateStrategy", {})
    for path, value in overrides.items():
        target = strategy
        parts = path.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return result


# --- the record ------------------------------------------------------------------------------------


@dataclass
class _Recorded:
    start: StoredEvent  # the RoundPlanned that started the rollout
    state: WorkloadState  # folded up to that round's inputs
    spec_changes: list[tuple[float, dict[str, Any]]]  # (seconds after start, CloneSet object)
    metrics: RolloutMetrics
    timings: dict[str, dict[str, float]]


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier) / timedelta(seconds=1)


def read_record(namespace: str, name: str, events: list[StoredEvent], rollout_id: str) -> _Recorded:
    """The rollout as recorded: its starting state, later spec changes, timings and metrics."""
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
    if round_event is None or not isinstance(round_event.envelope.payload, RoundPlanned):
        raise WhatIfError(f"rollout {rollout_id!r}: the round that started it is not in the log")
    through = round_event.envelope.payload.through
    state = WorkloadState(namespace, name)
    for stored in events:
        if stored.global_position >= round_event.global_position:
            break
        if stored.envelope.stream_version <= through.get(stored.envelope.stream, 0):
            state.fold(stored.envelope)
    t0 = round_event.envelope.payload.now

    completed_at: datetime | None = None
    spec_changes: list[tuple[float, dict[str, Any]]] = []
    last_spec = (state.cloneset or {}).get("spec")
    metrics = RolloutMetrics()
    pods = {n: copy.deepcopy(p) for n, p in state.pods.items()}
    requested: dict[str, tuple[str, datetime, str]] = {}  # action id -> (kind, at, pod)
    effect_at: dict[str, datetime] = {}
    delays: dict[str, dict[str, list[float]]] = {}
    round_actions: dict[str, int] = {}
    last_moment = t0
    for stored in events:
        if stored.global_position <= round_event.global_position:
            continue
        envelope = stored.envelope
        payload = envelope.payload
        moment = envelope.occurred_at
        if completed_at is not None:
            break
        if isinstance(payload, PodActionRequested) and payload.rollout_id == rollout_id:
            metrics.actions += 1
            metrics.pods_touched.add(payload.pod)
            round_actions[str(envelope.causation_id)] = 1
            requested[payload.action_id] = (payload.action, moment, payload.pod)
        elif isinstance(payload, RolloutCompleted) and payload.rollout_id == rollout_id:
            completed_at = moment
            metrics.completed = payload.outcome == "succeeded"
        elif isinstance(payload, ObjectObserved):
            last_moment = max(last_moment, moment)
            if payload.kind == WORKLOAD_KIND:
                spec = payload.object.get("spec")
                if payload.change != "DELETED" and spec != last_spec:
                    spec_changes.append((_seconds(moment, t0), payload.object))
                    last_spec = spec
                continue
            if payload.kind != "Pod":
                continue
            if payload.change == "DELETED":
                pods.pop(payload.name, None)
                for action_id, (kind, at, pod) in requested.items():
                    if (
                        pod == payload.name
                        and kind in ("deletePod", "recreatePod")
                        and action_id not in effect_at
                    ):
                        effect_at[action_id] = moment
                        delays.setdefault(kind, {}).setdefault("effect", []).append(_seconds(moment, at))
            else:
                pods[payload.name] = payload.object
                annotations = (payload.object.get("metadata") or {}).get("annotations") or {}
                action_id = str(annotations.get(ACTION_ID_ANNOTATION, ""))
                if action_id in requested and action_id not in effect_at:
                    kind, at, _ = requested[action_id]
                    effect_at[action_id] = moment
                    delays.setdefault(kind, {}).setdefault("effect", []).append(_seconds(moment, at))
                if action_id in effect_at and _containers_current(payload.object):
                    kind = requested[action_id][0]
                    if kind in ("createPod", "updateInPlace") and f"ready:{action_id}" not in effect_at:
                        samples = delays.setdefault(kind, {}).setdefault("ready", [])
                        samples.append(_seconds(moment, effect_at[action_id]))
                        effect_at[f"ready:{action_id}"] = moment
            metrics.observe(_seconds(moment, t0), pods)
    metrics.steps = len(round_actions)
    end = completed_at or last_moment
    metrics.duration_seconds = _seconds(end, t0)
    metrics.close(metrics.duration_seconds)
    timings = {
        kind: {part: statistics.median(values) for part, values in parts.items() if values}
        for kind, parts in delays.items()
    }
    return _Recorded(round_event, state, spec_changes, metrics, timings)


# --- the model -------------------------------------------------------------------------------------


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """The strategic merge of the simple patches the planner writes (containers merged by name)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif key == "containers" and isinstance(value, list):
            by_name = {c.get("name"): c for c in target.get("containers", [])}
            for entry in value:
                container = by_name.get(entry.get("name"))
                if container is None:
                    target.setdefault("containers", []).append(copy.deepcopy(entry))
                else:
                    _merge(container, entry)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _set_condition(pod: dict[str, Any], condition: dict[str, Any]) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition.get("type"):
            conditions[index] = dict(condition)
            return
    conditions.append(dict(condition))


def _iso(moment: float, t0: datetime) -> str:
    return (t0 + timedelta(seconds=moment)).isoformat().replace("+00:00", "Z")


class _Model:
    def __init__(self, recorded: _Recorded, overrides: dict[str, Any]) -> None:
        state = recorded.state
        assert state.cloneset is not None and state.now is not None
        self.t0 = state.now
        self.overrides = overrides
        self.cloneset = _apply_overrides(state.cloneset, overrides)
        self.pods = copy.deepcopy(state.pods)
        self.pvcs = copy.deepcopy(state.pvcs)
        self.revisions = copy.deepcopy(state.revisions)
        self.timings = recorded.timings
        self.now = 0.0
        self.serial = 0
        self.queue: list[tuple[float, int, str, Any]] = []  # (time, seq, what, data)
        self.in_flight = 0
        self.restarting: set[str] = set()
        for offset, obj in recorded.spec_changes:
            self._at(max(offset, 0.0), "spec", obj)

    def _at(self, moment: float, what: str, data: Any) -> None:
        self.serial += 1
        heapq.heappush(self.queue, (moment, self.serial, what, data))

    def delay(self, kind: str, part: str) -> float:
        default = DEFAULT_EFFECT_SECONDS if part == "effect" else DEFAULT_READY_SECONDS
        return self.timings.get(kind, {}).get(part, default)

    def plan_input(self) -> bytes:
        return msgspec.json.encode(
            {
                "cloneSet": self.cloneset,
                "pods": [self.pods[n] for n in sorted(self.pods)],
                "pvcs": [self.pvcs[n] for n in sorted(self.pvcs)],
                "revisions": sorted(self.revisions.values(), key=lambda r: r.get("revision", 0)),
                "now": _iso(self.now, self.t0),
            }
        )

    def apply_plan(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        for record in plan.get("revisions") or []:
            self.revisions[record["metadata"]["name"]] = record
        for name in plan.get("revisionsToDelete") or []:
            self.revisions.pop(name, None)
        if plan.get("podsToDelete") is not None:
            self.cloneset["spec"].setdefault("scaleStrategy", {})["podsToDelete"] = plan["podsToDelete"]
        if plan.get("status") is not None:
            self.cloneset["status"] = plan["status"]
        actions = list(plan.get("actions") or [])
        for action in actions:
            self.in_flight += 1
            self._at(self.now + self.delay(str(action.get("action")), "effect"), "effect", action)
        if plan.get("requeueAfterSeconds"):
            self._at(self.now + float(plan["requeueAfterSeconds"]), "requeue", None)
        return actions

    def effect(self, action: dict[str, Any]) -> None:
        self.in_flight -= 1
        kind = action.get("action")
        pod_name = str(action.get("pod", ""))
        pod = self.pods.get(pod_name)
        if kind == "createPVC":
            claim = copy.deepcopy(action["object"])
            claim.setdefault("metadata", {})["uid"] = f"whatif-pvc-{self._next()}"
            claim["status"] = {"phase": "Bound"}
            self.pvcs[str(action["pvc"])] = claim
        elif kind == "createPod":
            created = copy.deepcopy(action["object"])
            metadata = created.setdefault("metadata", {})
            metadata["uid"] = f"whatif-{self._next()}"
            metadata["creationTimestamp"] = _iso(self.now, self.t0)
            created["status"] = {"phase": "Pending", "conditions": []}
            self.pods[pod_name] = created
            self._at(self.now + self.delay("createPod", "ready"), "start", pod_name)
        elif kind == "deletePod":
            self.pods.pop(pod_name, None)
            if action.get("withPVCs"):
                for claim in action.get("pvcs") or []:
                    self.pvcs.pop(claim, None)
        elif kind == "deletePVC":
            self.pvcs.pop(str(action.get("pvc")), None)
        elif pod is not None and kind in ("recreatePod", "updateInPlace"):
            _merge(pod, action.get("patch") or {})
            if kind == "updateInPlace":
                self.restarting.add(pod_name)
                self._set_ready(pod, False)
                self._at(self.now + self.delay("updateInPlace", "ready"), "restart", pod_name)
        elif pod is not None and kind in ("markNotReady", "markReady"):
            if action.get("patch"):
                _merge(pod, action["patch"])
            _set_condition(pod, action["condition"])

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    def _set_ready(self, pod: dict[str, Any], ready: bool) -> None:
        _set_condition(
            pod,
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": _iso(self.now, self.t0),
            },
        )

    def start(self, pod_name: str) -> None:
        pod = self.pods.get(pod_name)
        if pod is None:
            return
        pod.setdefault("spec", {}).setdefault("nodeName", f"node-{self._next() % 3}")
        status = pod.setdefault("status", {})
        status["phase"] = "Running"
        status["podIP"] = f"10.0.0.{self._next() % 250}"
        status["containerStatuses"] = [
            {
                "name": c.get("name"),
                "image": c.get("image"),
                "imageID": f"sha256:{c.get('image')}",
                "containerID": f"whatif://{self._next()}",
                "ready": True,
                "restartCount": 0,
                "started": True,
            }
            for c in pod["spec"].get("containers") or []
        ]
        self._ready_if_gates(pod)

    def restart(self, pod_name: str) -> None:
        pod = self.pods.get(pod_name)
        if pod is None:
            return
        by_name = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        for container in (pod.get("spec") or {}).get("containers") or []:
            status = by_name.get(container.get("name"))
            if status is not None and status.get("image") != container.get("image"):
                status.update(
                    image=container.get("image"),
                    imageID=f"sha256:{container.get('image')}",
                    containerID=f"whatif://{self._next()}",
                    restartCount=int(status.get("restartCount", 0)) + 1,
                )
        self._ready_if_gates(pod)

    def _ready_if_gates(self, pod: dict[str, Any]) -> None:
        self.restarting.discard(str((pod.get("metadata") or {}).get("name")))
        self.kubelet()

    def kubelet(self) -> None:
        """Ready follows the readiness gates for running pods that are not restarting containers."""
        for name, pod in self.pods.items():
            if name in self.restarting or not (pod.get("status") or {}).get("containerStatuses"):
                continue
            conditions = _conditions(pod)
            gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
            ready = all(conditions.get(g) == "True" for g in gates)
            if (conditions.get("Ready") == "True") != ready:
                self._set_ready(pod, ready)

    def run(self) -> RolloutMetrics:
        metrics = RolloutMetrics()
        metrics.observe(0.0, self.pods)
        target = None
        for _ in range(MAX_ROUNDS):
            if self.in_flight == 0:
                plan = _plan_decoder.decode(plan_json(self.plan_input()))
                if plan.get("rejected"):
                    raise WhatIfError(f"the planner rejects the overridden spec: {plan['rejected']}")
                target = plan.get("updateRevision")
                actions = self.apply_plan(plan)
                if actions:
                    metrics.steps += 1
                    metrics.actions += len(actions)
                    metrics.pods_touched.update(
                        str(a.get("pod")) for a in actions if a.get("action") != "createPVC"
                    )
                if self._done(target, plan):
                    metrics.completed = True
                    break
            if not self.queue:
                break
            moment, _, what, data = heapq.heappop(self.queue)
            self.now = max(self.now, moment)
            if what == "effect":
                self.effect(data)
            elif what == "start":
                self.start(data)
            elif what == "restart":
                self.restart(data)
            elif what == "requeue":
                pass
            elif what == "spec":
                spec = copy.deepcopy(data.get("spec") or {})
                status = self.cloneset.get("status")
                self.cloneset = _apply_overrides({**data, "spec": spec}, self.overrides)
                if status is not None:
                    self.cloneset["status"] = status
            self.kubelet()
            metrics.observe(self.now, self.pods)
        metrics.duration_seconds = self.now
        metrics.close(self.now)
        return metrics

    def _done(self, target: str | None, plan: dict[str, Any]) -> bool:
        if plan.get("actions") or any(what in ("effect", "start", "restart") for _, _, what, _ in self.queue):
            return False
        if any(what == "spec" for _, _, what, _ in self.queue):
            return False
        replicas = int((self.cloneset.get("spec") or {}).get("replicas", 1) or 0)
        hash_part = (target or "").rsplit("-", 1)[-1]
        updated = sum(
            1
            for pod in self.pods.values()
            if ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "").endswith(hash_part)
            and available(pod)
        )
        expected = plan.get("expectedUpdatedReplicas")
        expected = replicas if expected is None else int(expected)
        return (
            len(self.pods) == replicas
            and updated >= expected
            and all(available(p) for p in self.pods.values())
        )


def what_if(
    namespace: str, name: str, events: list[StoredEvent], rollout_id: str, overrides: dict[str, Any]
) -> WhatIfResult:
    recorded = read_record(namespace, name, events, rollout_id)
    replanned = _Model(recorded, overrides).run()
    return WhatIfResult(rollout_id, overrides, recorded.metrics, replanned, recorded.timings)
