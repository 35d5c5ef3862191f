"""A small in-memory cluster that carries out plans: the convergence harness for planner tests.

It applies each action the way the executor and the API server would (strategic merge for the simple
patches the planner writes), and a kubelet that moves one step per tick: schedule and start a new pod,
restart a container whose image changed, report Ready when containers and readiness gates are ready.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.planner import model
from services.planner.plan import plan
from services.planner.podstate import format_time

_START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif key == "containers" and isinstance(value, list):
            by_name = {c["name"]: c for c in target.get("containers", [])}
            for entry in value:
                container = by_name.get(entry["name"])
                if container is not None:
                    for k, v in entry.items():
                        if v is None:
                            container.pop(k, None)
                        else:
                            container[k] = copy.deepcopy(v)
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
    for i, existing in enumerate(conditions):
        if existing["type"] == condition["type"]:
            conditions[i] = dict(condition)
            return
    conditions.append(dict(condition))


class Cluster:
    def __init__(
        self,
        cloneset: dict[str, Any],
        pods: list[dict[str, Any]] | None = None,
        revisions: list[dict[str, Any]] | None = None,
        pvcs: list[dict[str, Any]] | None = None,
        tick_seconds: float = 5.0,
    ) -> None:
        self.cloneset = copy.deepcopy(cloneset)
        self.pods = {p["metadata"]["name"]: copy.deepcopy(p) for p in pods or []}
        self.pvcs = {p["metadata"]["name"]: copy.deepcopy(p) for p in pvcs or []}
        self.revisions = {r["metadata"]["name"]: copy.deepcopy(r) for r in revisions or []}
        self.now = _START
        self.tick_seconds = tick_seconds
        self.serial = 0
        self.history: list[model.Plan] = []

    # --- planning -------------------------------------------------------------------------------------

    def plan_input(self) -> model.PlanInput:
        raw = {
            "cloneSet": self.cloneset,
            "pods": sorted(self.pods.values(), key=lambda p: p["metadata"]["name"]),
            "pvcs": sorted(self.pvcs.values(), key=lambda p: p["metadata"]["name"]),
            "revisions": list(self.revisions.values()),
            "now": format_time(self.now),
        }
        return msgspec.json.decode(msgspec.json.encode(raw), type=model.PlanInput)

    def step(self) -> model.Plan:
        """Plan one round, carry it out, then let time pass and the kubelet act."""
        result = plan(self.plan_input())
        self.history.append(result)
        self.apply(result)
        self.now += self.tick_seconds
        self.kubelet()
        return result

    def apply(self, result: model.Plan) -> None:
        if result.rejected is not None:
            return
        for record in result.revisions:
            self.revisions[record["metadata"]["name"]] = copy.deepcopy(record)
        for name in result.revisions_to_delete:
            self.revisions.pop(name, None)
        if result.pods_to_delete is not None:
            self.cloneset["spec"].setdefault("scaleStrategy", {})["podsToDelete"] = list(
                result.pods_to_delete
            )
        if result.status is not None:
            self.cloneset["status"] = copy.deepcopy(result.status)
        for action in result.actions:
            self.carry_out(action)

    def carry_out(self, action: model.Action) -> None:
        now_text = format_time(self.now)
        if isinstance(action, model.CreatePVC):
            claim = copy.deepcopy(action.object)
            claim["status"] = {"phase": "Bound"}
            assert action.pvc not in self.pvcs, f"PVC {action.pvc} exists"
            self.pvcs[action.pvc] = claim
        elif isinstance(action, model.CreatePod):
            assert action.pod not in self.pods, f"pod {action.pod} exists"
            pod = copy.deepcopy(action.object)
            pod["metadata"]["creationTimestamp"] = now_text
            pod["metadata"]["uid"] = f"uid-{action.pod}"
            pod["status"] = {"phase": "Pending", "conditions": []}
            self.pods[action.pod] = pod
        elif isinstance(action, model.DeletePod):
            self.pods.pop(action.pod)
            for name in action.pvcs:
                self.pvcs.pop(name, None)
        elif isinstance(action, model.DeletePVC):
            self.pvcs.pop(action.pvc, None)
        elif isinstance(action, model.RecreatePod | model.UpdateInPlace | model.PatchPod):
            _merge(self.pods[action.pod], action.patch)
        elif isinstance(action, model.MarkNotReady | model.MarkReady):
            pod = self.pods[action.pod]
            if action.patch:
                _merge(pod, action.patch)
            _set_condition(pod, action.condition)
            if isinstance(action, model.MarkNotReady):
                self._set_ready(pod, False)

    # --- kubelet --------------------------------------------------------------------------------------

    def _set_ready(self, pod: dict[str, Any], ready: bool) -> None:
        for condition in pod["status"].get("conditions", []):
            if condition["type"] == "Ready":
                if (condition["status"] == "True") != ready:
                    condition["status"] = "True" if ready else "False"
                    condition["lastTransitionTime"] = format_time(self.now)
                return
        pod["status"].setdefault("conditions", []).append(
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": format_time(self.now),
            }
        )

    def kubelet(self) -> None:
        for name in sorted(self.pods):
            pod = self.pods[name]
            status = pod["status"]
            if not pod["spec"].get("nodeName"):
                pod["spec"]["nodeName"] = f"node-{self.serial % 3}"
                self.serial += 1
                status["phase"] = "Running"
                status["containerStatuses"] = [
                    {
                        "name": c["name"],
                        "image": c["image"],
                        "imageID": f"sha256:{c['image']}",
                        "containerID": f"cid-{self.next_serial()}",
                        "ready": True,
                        "restartCount": 0,
                    }
                    for c in pod["spec"]["containers"]
                ]
                self._set_ready(pod, False)
                continue
            restarted = False
            by_name = {c["name"]: c for c in status.get("containerStatuses", [])}
            for container in pod["spec"]["containers"]:
                cs = by_name[container["name"]]
                if cs["image"] != container["image"]:
                    cs.update(
                        image=container["image"],
                        imageID=f"sha256:{container['image']}",
                        containerID=f"cid-{self.next_serial()}",
                        restartCount=cs["restartCount"] + 1,
                    )
                    restarted = True
            if restarted:
                self._set_ready(pod, False)
                continue
            gates = {g["conditionType"] for g in pod["spec"].get("readinessGates", [])}
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            self._set_ready(pod, all(conditions.get(g) == "True" for g in gates))

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial

    # --- observations ---------------------------------------------------------------------------------

    def available(self) -> int:
        return sum(
            1
            for p in self.pods.values()
            if p["status"].get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
            and not any(
                c["type"] == "InPlaceUpdateReady" and c["status"] == "False"
                for c in p["status"].get("conditions", [])
            )
        )

    def revision_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pod in self.pods.values():
            label = pod["metadata"]["labels"].get("controller-revision-hash", "")
            counts[label] = counts.get(label, 0) + 1
        return counts

    def run(self, max_steps: int = 200) -> int:
        """Step until a round plans nothing and asks for no requeue; return the number of steps."""
        for step in range(1, max_steps + 1):
            settled = self.settled()
            result = self.step()
            if result.rejected is not None:
                return step
            if not result.actions and result.requeue_after_seconds is None and settled:
                return step
        raise AssertionError(f"no convergence in {max_steps} steps: {self.revision_counts()}")

    def settled(self) -> bool:
        """Every pod scheduled, running, ready and not in an in-place update: nothing left for the kubelet."""
        return self.available() == len(self.pods) and all(
            p["spec"].get("nodeName") for p in self.pods.values()
        )
