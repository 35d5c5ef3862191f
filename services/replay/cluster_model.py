"""A model of a cluster carrying out plans on a virtual clock, with per-action-kind delays: what-if re-plans
against it, the replay simulation (and its benchmark) generates realistic histories with it, and the
planner tests' convergence harness (tests/planner/simulate.py) carries plans out through ``carry_out``
on its own per-tick clock. Nothing here talks to Kubernetes. Pods are plain dicts shaped as the API
returns them, so the real planner reads them.

- An action takes its kind's ``effect`` delay to be applied (the executor and API server); applied, it
  carries its action id in the ``rollbook.io/action-id`` annotation, as the executor writes it.
- A new pod starts after the ``createPod`` ready delay; an in-place update restarts the changed containers
  and the pod is ready again after the ``updateInPlace`` ready delay; Ready follows the readiness gates.
- The kubelet resizes pods in place (Kubernetes 1.33+): it reports container ``resources`` in status, a
  ``resize`` action changes them in the spec and the status when it takes effect (actuated at once; the
  model has no node capacity, so nothing is Deferred or Infeasible), and restarts the containers it names
  (``restartContainers``), the pod ready again after the ``resize`` ready delay.
"""

from __future__ import annotations

import copy
import heapq
from datetime import datetime, timedelta
from typing import Any

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.model import Action, Plan, PlanInput, action_kind
from services.kinds.cloneset.rules.podstate import PodViews
from services.model.actions import ActionKind
from services.model.json_copy import json_copy
from services.model.streams import ACTION_ID_ANNOTATION

DEFAULT_EFFECT_SECONDS = 0.5
DEFAULT_READY_SECONDS = 2.0


def conditions_of(pod: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (pod.get("status") or {}).get("conditions") or []}


def apply_overrides(cloneset: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The CloneSet with fields under spec.updateStrategy replaced (dotted paths); a copy."""
    result = copy.deepcopy(cloneset)
    if not overrides:
        return result
    strategy = result.setdefault("spec", {}).setdefault("updateStrategy", {})
    for path, value in overrides.items():
        target = strategy
        parts = path.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return result


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
        elif key == "finalizers" and isinstance(value, list):
            # Finalizers merge as a set (strategic merge patch, patchStrategy "merge").
            existing = target.setdefault("finalizers", [])
            existing.extend(f for f in value if f not in existing)
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


class ClusterModel:
    def __init__(
        self,
        cloneset: dict[str, Any],
        *,
        t0: datetime,
        pods: dict[str, dict[str, Any]] | None = None,
        pvcs: dict[str, dict[str, Any]] | None = None,
        revisions: dict[str, dict[str, Any]] | None = None,
        timings: dict[str, dict[str, float]] | None = None,
        overrides: dict[str, Any] | None = None,
        uid_prefix: str = "whatif",
    ) -> None:
        self.t0 = t0
        self.uid_prefix = uid_prefix  # new objects get uids <prefix>-<n>
        self.overrides = overrides or {}
        self.cloneset = apply_overrides(cloneset, self.overrides)
        self.pods = json_copy(pods or {})
        self.pvcs = json_copy(pvcs or {})
        self.revisions = json_copy(revisions or {})
        self.timings = timings or {}
        self.applied: list[str] = []  # action ids applied since the caller last cleared it
        # The planner's views of the pods, kept between rounds: a pod changed in place is forgotten there.
        self.pod_views = PodViews()
        self.changed_pods: set[str] = set(self.pods)  # pods made, changed or gone since the caller cleared it
        # Pods the kubelet has to look at again: only a change to a pod (or to whether it restarts) can
        # make its Ready differ from its gates, so a pass need not walk every pod after every event.
        self.kubelet_due: set[str] = set(self.pods)
        self.now = 0.0
        self.serial = 0
        self.queue: list[tuple[float, int, str, Any]] = []  # (time, seq, what, data)
        self.in_flight = 0
        self.restarting: set[str] = set()
        self.resize_restarts: dict[str, list[str]] = {}  # pod -> containers a resize restarts

    def schedule_spec(self, offset: float, cloneset: dict[str, Any]) -> None:
        """A spec change (the CloneSet as observed) at ``offset`` seconds; the overrides apply on top."""
        self._at(max(offset, 0.0), "spec", cloneset)

    def schedule_requeue(self, offset: float) -> None:
        """Wake the caller at ``offset`` seconds (``step`` returns "requeue" then)."""
        self._at(offset, "requeue", None)

    def moment(self) -> datetime:
        return self.t0 + timedelta(seconds=self.now)

    def touched(self, pod_name: str) -> None:
        """Pod ``pod_name`` was made, changed or deleted (the kubelet and the caller look at it again)."""
        self.changed_pods.add(pod_name)
        self.kubelet_due.add(pod_name)
        pod = self.pods.get(pod_name)
        if pod is not None:
            self.pod_views.forget(pod)  # changed in place

    def _at(self, moment: float, what: str, data: Any) -> None:
        self.serial += 1
        heapq.heappush(self.queue, (moment, self.serial, what, data))

    def delay(self, kind: str, part: str) -> float:
        default = DEFAULT_EFFECT_SECONDS if part == "effect" else DEFAULT_READY_SECONDS
        return self.timings.get(kind, {}).get(part, default)

    def plan_input(self) -> PlanInput:
        return PlanInput(
            clone_set=self.cloneset,
            pods=[self.pods[n] for n in sorted(self.pods)],
            pvcs=[self.pvcs[n] for n in sorted(self.pvcs)],
            revisions=sorted(self.revisions.values(), key=lambda r: r.get("revision", 0)),
            now=self.moment(),
        )

    def apply_plan(
        self, plan: Plan, action_ids: list[str] | None = None, *, requeue: bool = True
    ) -> list[Action]:
        """Record the plan on the CloneSet (``record_plan``) and schedule its actions' effects (and, with
        ``requeue``, its requeue); returns the actions."""
        self.record_plan(plan)
        for index, action in enumerate(plan.actions):
            self.in_flight += 1
            action_id = action_ids[index] if action_ids else None
            self._at(self.now + self.delay(action_kind(action), "effect"), "effect", (action, action_id))
        if requeue and plan.requeue_after_seconds:
            self._at(self.now + float(plan.requeue_after_seconds), "requeue", None)
        return list(plan.actions)

    def record_plan(self, plan: Plan) -> None:
        """What the executor writes to the CloneSet itself: the plan's revisions (and pruned history), its
        podsToDelete write-back and its status."""
        for record in plan.revisions:
            self.revisions[record["metadata"]["name"]] = record
        for name in plan.revisions_to_delete:
            self.revisions.pop(name, None)
        if plan.pods_to_delete is not None:
            self.cloneset["spec"].setdefault("scaleStrategy", {})["podsToDelete"] = plan.pods_to_delete
        if plan.status is not None:
            self.cloneset["status"] = plan.status

    def effect(self, action: Action, action_id: str | None = None) -> None:
        """An action takes effect (its ``effect`` delay passed): the objects change as the executor and the
        API server change them, and the kubelet's follow-ups are scheduled."""
        self.in_flight -= 1
        if action_id is not None:
            self.applied.append(action_id)
        changed = self.carry_out(action, action_id)
        if not isinstance(action, model.ResizePod):  # pods/resize keeps no annotation of the write
            self._annotate(changed, action_id)
        if isinstance(action, model.CreatePod):
            self._at(self.now + self.delay(ActionKind.CREATE_POD, "ready"), "start", action.pod)
        elif (
            isinstance(action, model.UpdateInPlace)
            and changed is not None
            and (action.restart_containers or action.not_ready is not None or action.change != "Resize")
        ):
            # An update that only resizes (restarting nothing) keeps the pod in service.
            self.restarting.add(action.pod)
            self._set_ready(changed, False)
            self.touched(action.pod)
            self._at(self.now + self.delay(ActionKind.UPDATE_IN_PLACE, "ready"), "restart", action.pod)
        elif isinstance(action, model.ResizePod) and changed is not None and action.restart_containers:
            self.restarting.add(action.pod)
            self.resize_restarts[action.pod] = list(action.restart_containers)
            self._set_ready(changed, False)
            self.touched(action.pod)
            self._at(self.now + self.delay(ActionKind.RESIZE, "ready"), "restart", action.pod)

    def carry_out(self, action: Action, action_id: str | None = None) -> dict[str, Any] | None:
        """Apply one action to the objects now, as the executor and the API server would (strategic merge
        for the simple patches the planner writes); returns the object it created or changed (None for a
        delete, or an action on a pod that is gone). A createPod's claims carry ``action_id`` as well."""
        self.touched(action.pod)
        pod = self.pods.get(action.pod)
        if isinstance(action, model.CreatePVC):  # trails of CloneSet rules before 11
            return self._create_claim(action.object)
        if isinstance(action, model.CreatePod):
            # Its claims first; one already there (kept from an earlier pod of the instance) is kept, and
            # takes the action's id as a created one does (the executor's patch).
            for claim in action.pvcs:
                name = claim["metadata"]["name"]
                self._annotate(self.pvcs.get(name) or self._create_claim(claim), action_id)
            created = copy.deepcopy(action.object)
            metadata = created.setdefault("metadata", {})
            metadata["uid"] = f"{self.uid_prefix}-{self._next()}"
            metadata["creationTimestamp"] = _iso(self.now, self.t0)
            created["status"] = {"phase": "Pending", "conditions": []}
            self.pods[action.pod] = created
            return created
        if isinstance(action, model.DeletePod):
            self.pods.pop(action.pod, None)
            if action.with_pvcs:
                for claim_name in action.pvcs:
                    self.pvcs.pop(claim_name, None)
            return None
        if isinstance(action, model.DeletePVC):
            self.pvcs.pop(action.pvc, None)
            return None
        if pod is None:
            return None
        if isinstance(action, model.UpdateInPlace) and action.not_ready is not None:
            _set_condition(pod, action.not_ready)  # the executor's pods/status write, before the patch
        if isinstance(action, model.RecreatePod | model.UpdateInPlace | model.PatchPod):
            _merge(pod, action.patch)
        elif isinstance(action, model.ResizePod):
            # pods/resize writes no action id: the caller's annotation is the model's bookkeeping only.
            for container in (pod.get("spec") or {}).get("containers") or []:
                if container.get("name") in action.resources:
                    container["resources"] = copy.deepcopy(action.resources[container["name"]])
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status.get("name") in action.resources:
                    status["resources"] = copy.deepcopy(action.resources[status["name"]])
        elif isinstance(action, model.MarkNotReady | model.MarkReady):
            if action.patch:
                _merge(pod, action.patch)
            _set_condition(pod, action.condition)
        return pod

    def _create_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        claim = copy.deepcopy(obj)
        claim.setdefault("metadata", {})["uid"] = f"{self.uid_prefix}-pvc-{self._next()}"
        claim["status"] = {"phase": "Bound"}
        self.pvcs[claim["metadata"]["name"]] = claim
        return claim

    @staticmethod
    def _annotate(obj: dict[str, Any] | None, action_id: str | None) -> None:
        if obj is not None and action_id is not None:
            obj.setdefault("metadata", {}).setdefault("annotations", {})[ACTION_ID_ANNOTATION] = action_id

    def step(self) -> str | None:
        """Carry out the next scheduled event (advancing the clock); its kind, or None when idle."""
        if not self.queue:
            return None
        moment, _, what, data = heapq.heappop(self.queue)
        self.now = max(self.now, moment)
        if what == "effect":
            self.effect(*data)
        elif what == "start":
            self.start(data)
        elif what == "restart":
            self.restart(data)
        elif what == "spec":
            spec = copy.deepcopy(data.get("spec") or {})
            status = self.cloneset.get("status")
            self.cloneset = apply_overrides({**data, "spec": spec}, self.overrides)
            if status is not None:
                self.cloneset["status"] = status
        self.kubelet()
        return what

    def busy(self) -> bool:
        """Actions or kubelet work still scheduled (not requeues or spec changes)."""
        return any(what in ("effect", "start", "restart") for _, _, what, _ in self.queue)

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
        self.touched(pod_name)
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
                "resources": copy.deepcopy(c.get("resources") or {}),
            }
            for c in pod["spec"].get("containers") or []
        ]
        self._ready_if_gates(pod)

    def restart(self, pod_name: str) -> None:
        pod = self.pods.get(pod_name)
        if pod is None:
            return
        self.touched(pod_name)
        by_name = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        resized = self.resize_restarts.pop(pod_name, [])
        for container in (pod.get("spec") or {}).get("containers") or []:
            status = by_name.get(container.get("name"))
            if status is not None and (
                status.get("image") != container.get("image") or container.get("name") in resized
            ):
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
        """Ready follows the readiness gates for running pods that are not restarting containers (the
        pods changed since the last pass: ``kubelet_due``)."""
        due, self.kubelet_due = self.kubelet_due, set()
        for name in due:
            pod = self.pods.get(name)
            if (
                pod is None
                or name in self.restarting
                or not (pod.get("status") or {}).get("containerStatuses")
            ):
                continue
            conditions = conditions_of(pod)
            gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
            ready = all(conditions.get(g) == "True" for g in gates)
            if (conditions.get("Ready") == "True") != ready:
                self._set_ready(pod, ready)
                self.changed_pods.add(name)
                self.pod_views.forget(pod)
