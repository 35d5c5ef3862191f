"""A workload's history recorded through the planner's own code path, without services or a cluster: the
watcher's observations (diffs of the cluster model's objects), the planner's rounds (the CloneSet kind
planner and ``next_step``, as the planner service runs them: the same expectations, the same waits and
their timers), the executors' outcomes and the requeue timers. What it produces verifies clean; the replay
benchmark and tests use it.

    events = WorkloadSimulation("team-a", "web", replicas=4, start=T0).run()
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from services.kinds.cloneset.rules.decisions import decide
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.kinds.cloneset.rules.names import POD_TEMPLATE_HASH_LABEL, REVISION_LABEL
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import CLONESET
from services.model.actions import ActionKind
from services.model.events import (
    Envelope,
    ObjectObserved,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    RequeueDue,
    RequeueScheduled,
    new_event,
)
from services.model.streams import derived_id
from services.planner.kinds import CloneSetPlanner, Round, Wait, next_step
from services.replay.cluster_model import ClusterModel

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SIMULATED_EXECUTOR = "simulation"  # the executor named in the simulated outcomes
TIMINGS: dict[str, dict[str, float]] = {
    ActionKind.CREATE_POD: {"effect": 0.2, "ready": 3.0},
    ActionKind.UPDATE_IN_PLACE: {"effect": 0.2, "ready": 2.0},
    ActionKind.RESIZE: {"effect": 0.2, "ready": 2.0},
    ActionKind.MARK_NOT_READY: {"effect": 0.1},
    ActionKind.MARK_READY: {"effect": 0.1},
}


def base_cloneset(
    name: str, namespace: str, replicas: int | None, strategy: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": namespace, "uid": "", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]},
            },
            "updateStrategy": strategy,
        },
    }


class WorkloadSimulation:
    """One workload through the planner's code path and the cluster model: every event as recorded."""

    model: ClusterModel

    def __init__(
        self,
        namespace: str,
        name: str,
        replicas: int | None,
        start: datetime,
        strategy: dict[str, Any] | None = None,
        *,
        rollout: bool = True,
        handed_over: bool = False,
        foreign_pod_spec: dict[str, Any] | None = None,
        started_events: bool = False,
        volume_claim_templates: list[dict[str, Any]] | None = None,
        resize: tuple[dict[str, Any], dict[str, Any]] | None = None,
        min_ready_seconds: int = 0,
    ) -> None:
        """``rollout``: the template changes 30 s in (else the CloneSet is only scaled up). ``handed_over``:
        the CloneSet starts as another controller left it, its pods up and labelled with that controller's
        name for the revision (``<name>-foreign``), which its status reports, and nothing recorded;
        ``foreign_pod_spec``: pod spec fields that controller's revision set, which its pods keep; the
        CloneSet was edited to remove them after its status was last written (a generation later).
        ``started_events``: actions recorded as executors did before outcomes carried ``started_at``, a
        ``PodActionStarted`` before each outcome (today an outcome carries when its action was taken).
        ``volume_claim_templates``: the CloneSet's, a PVC per template and pod. ``resize``: the container's
        resources before and after, the rollout's change instead of its image (resized in place).
        ``min_ready_seconds``: the CloneSet's spec.minReadySeconds."""
        self.namespace, self.name = namespace, name
        v1 = base_cloneset(
            name, namespace, replicas, strategy or {"type": "InPlaceIfPossible", "maxUnavailable": 1}
        )
        v1["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))
        if volume_claim_templates:
            v1["spec"]["volumeClaimTemplates"] = copy.deepcopy(volume_claim_templates)
        if min_ready_seconds:
            v1["spec"]["minReadySeconds"] = min_ready_seconds
        if resize is not None:
            v1["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(resize[0])
        v2 = copy.deepcopy(v1)
        if resize is not None:
            v2["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(resize[1])
        else:
            v2["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:mainline"
        v2["metadata"]["generation"] = 2
        pods: dict[str, dict[str, Any]] = {}
        pvcs: dict[str, dict[str, Any]] = {}
        if handed_over:
            before = WorkloadSimulation(namespace, name, replicas, start, strategy, rollout=False)
            before.run()
            foreign = f"{name}-foreign"
            pods, pvcs = before.model.pods, before.model.pvcs
            for pod in pods.values():
                pod["metadata"]["labels"].update(
                    {REVISION_LABEL: foreign, POD_TEMPLATE_HASH_LABEL: "foreign"}
                )
                pod["spec"].update(copy.deepcopy(foreign_pod_spec or {}))
            v1["status"] = dict(
                before.model.cloneset["status"], updateRevision=foreign, currentRevision=foreign
            )
            if foreign_pod_spec:
                v1["metadata"]["generation"] = v1["status"]["observedGeneration"] + 1
                v2["metadata"]["generation"] = v1["metadata"]["generation"] + 1
        self.model = ClusterModel(
            v1, t0=start, pods=pods, pvcs=pvcs, timings=TIMINGS, uid_prefix=v1["metadata"]["uid"]
        )
        if rollout:
            self.model.schedule_spec(30.0, v2)
        self.state = WorkloadState(namespace, name)
        self.kind = CloneSetPlanner(self._decide)  # the planner's own decision function, its plan kept
        self.last_plan: Plan | None = None
        self.events: list[Envelope] = []
        self.versions: dict[str, int] = {}
        # RoundPlanned event id -> the input of that round, for each round that started a rollout
        self.rollout_inputs: dict[uuid.UUID, bytes] = {}
        self.emitted: dict[tuple[str, str], bytes] = {}  # (kind, name) -> the object as last observed
        self.resource_version = 0
        self.started_events = started_events

    def emit(self, payload: Any, stream: str, *, at: datetime, **ids: Any) -> Envelope:
        version = self.versions.get(stream, 0) + 1
        self.versions[stream] = version
        envelope = new_event(payload, stream=stream, stream_version=version, occurred_at=at, **ids)
        self.events.append(envelope)
        self.state.fold(envelope)
        return envelope

    def observe(self) -> None:
        model, now = self.model, self.model.moment()
        current: dict[tuple[str, str], dict[str, Any]] = {("CloneSet", self.name): model.cloneset}
        current.update({("Pod", n): p for n, p in model.pods.items()})
        current.update({("PersistentVolumeClaim", n): p for n, p in model.pvcs.items()})
        for key in sorted(set(self.emitted) | set(current)):
            obj = current.get(key)
            before = self.emitted.get(key)
            if obj is not None and before is not None and msgspec.json.encode(obj) == before:
                continue
            self.resource_version += 1
            kind, name = key
            change: Literal["ADDED", "MODIFIED", "DELETED"] = (
                "DELETED" if obj is None else "ADDED" if before is None else "MODIFIED"
            )
            shown = copy.deepcopy(obj) if obj is not None else msgspec.json.decode(before or b"{}")
            shown.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)
            uid = str(shown["metadata"].get("uid", ""))
            self.emit(
                ObjectObserved(
                    kind=kind,
                    namespace=self.namespace,
                    name=name,
                    uid=uid,
                    resource_version=str(self.resource_version),
                    change=change,
                    object=shown,
                ),
                CLONESET.observed_stream(self.namespace, self.name),
                at=now,
                event_id=derived_id(uid, self.resource_version, change),
            )
            if obj is None:
                self.emitted.pop(key, None)
            else:
                self.emitted[key] = msgspec.json.encode(obj)

    def outcomes(self) -> None:
        stream, now = CLONESET.actions_stream(self.namespace, self.name), self.model.moment()
        for action_id in self.model.applied:
            if self.started_events:
                self.emit(
                    PodActionStarted(action_id=action_id, executor=SIMULATED_EXECUTOR),
                    stream,
                    at=now,
                    event_id=derived_id("started", action_id),
                )
                outcome = PodActionSucceeded(action_id=action_id)
            else:
                outcome = PodActionSucceeded(action_id=action_id, started_at=now, executor=SIMULATED_EXECUTOR)
            self.emit(outcome, stream, at=now, event_id=derived_id("outcome", action_id))
        self.model.applied.clear()

    def _decide(self, plan_input: PlanInput) -> Plan:
        self.last_plan = decide(plan_input)
        return self.last_plan

    def plan_round(self) -> None:
        state = self.state
        step = next_step(self.kind, state)
        if isinstance(step, Wait):
            if step.timer is not None:
                self.record([step.timer])
                self.model.schedule_requeue((step.due - self.model.t0).total_seconds())
            return
        if not isinstance(step, Round):
            return
        envelopes = step.envelopes
        self.record(envelopes)
        if step.rollout_input is not None:  # as the planner service stores it (``round_inputs``)
            self.rollout_inputs[envelopes[0].event_id] = step.rollout_input
        plan = self.last_plan  # what the round's decisions carry out, for the cluster model's executors
        assert plan is not None
        requests = [e.payload for e in envelopes if isinstance(e.payload, PodActionRequested)]
        ids = [r.action_id for r in requests if r.action != ActionKind.SET_PODS_TO_DELETE]
        self.model.apply_plan(plan, ids, requeue=False)  # its requeue is the round's RequeueScheduled
        for envelope in envelopes:
            if isinstance(envelope.payload, RequeueScheduled):
                offset = (envelope.payload.due_at - self.model.t0).total_seconds()
                self.model.schedule_requeue(offset)

    def record(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self.events.append(envelope)
            self.state.fold(envelope)
        self.versions[envelopes[0].stream] = envelopes[-1].stream_version

    def fire_timers(self) -> None:
        now = self.model.moment()
        for scheduled, due in sorted(self.state.schedules.items(), key=lambda item: item[1]):
            if due <= now:
                self.emit(
                    RequeueDue(due_at=due, scheduled_by=uuid.UUID(scheduled)),
                    CLONESET.decisions_stream(self.namespace, self.name),
                    at=due,
                    event_id=derived_id("requeue-due", scheduled),
                )

    def run(self, limit: int = 2000) -> list[Envelope]:
        self.observe()
        self.plan_round()
        while len(self.events) < limit:
            what = self.model.step()
            if what is None:
                break
            self.observe()
            self.outcomes()
            if what == "requeue":
                self.fire_timers()
            self.plan_round()
        return self.events
