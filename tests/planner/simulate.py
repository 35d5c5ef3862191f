"""A small in-memory cluster that carries out plans: the convergence harness for planner tests.

The objects and what an action does to them are the cluster model's (services/replay/cluster_model.py,
which what-if and the replay simulation use): each plan is recorded on the CloneSet and its actions carried
out at once, as the executor and the API server would. What this harness adds is its clock: a kubelet
that moves one step per tick (schedule and start a new pod, restart a container whose image changed,
report Ready when containers and readiness gates are ready), so a test counts rounds, not seconds.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import msgspec

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.podstate import format_time
from services.model.availability import pod_available
from services.replay.cluster_model import ClusterModel

_T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
_START = _T0.timestamp()


class Cluster:
    def __init__(
        self,
        cloneset: dict[str, Any],
        pods: list[dict[str, Any]] | None = None,
        revisions: list[dict[str, Any]] | None = None,
        pvcs: list[dict[str, Any]] | None = None,
        tick_seconds: float = 5.0,
    ) -> None:
        # The objects and how actions change them: the cluster model what-if and the replay simulation use.
        self.model = ClusterModel(
            cloneset,
            t0=_T0,
            pods={p["metadata"]["name"]: p for p in pods or []},
            pvcs={p["metadata"]["name"]: p for p in pvcs or []},
            revisions={r["metadata"]["name"]: r for r in revisions or []},
            uid_prefix="uid",
        )
        self.tick_seconds = tick_seconds
        self.serial = 0
        self.history: list[model.Plan] = []

    @property
    def cloneset(self) -> dict[str, Any]:
        return self.model.cloneset

    @cloneset.setter
    def cloneset(self, value: dict[str, Any]) -> None:
        self.model.cloneset = value

    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        return self.model.pods

    @property
    def pvcs(self) -> dict[str, dict[str, Any]]:
        return self.model.pvcs

    @property
    def revisions(self) -> dict[str, dict[str, Any]]:
        return self.model.revisions

    @property
    def now(self) -> float:
        """The clock, in epoch seconds."""
        return _START + self.model.now

    @now.setter
    def now(self, value: float) -> None:
        self.model.now = value - _START

    # --- planning -------------------------------------------------------------------------------------

    def plan_input(self) -> model.PlanInput:
        """The input as the API would return it: decoded JSON, so a plan kept in ``history`` shares nothing
        with the objects the kubelet changes later."""
        return msgspec.json.decode(msgspec.json.encode(self.model.plan_input()), type=model.PlanInput)

    def step(self) -> model.Plan:
        """Plan one round, carry it out, then let time pass and the kubelet act."""
        result = plan(self.plan_input())
        self.history.append(result)
        self.apply(result)
        self.now += self.tick_seconds
        self.kubelet()
        return result

    def apply(self, result: model.Plan) -> None:
        """Carry a plan out at once (the harness's executor takes no time)."""
        if result.rejected is not None:
            return
        self.model.record_plan(copy.deepcopy(result))
        for action in result.actions:
            if isinstance(action, model.CreatePod):
                assert action.pod not in self.pods, f"pod {action.pod} exists"
                for claim in action.pvcs:
                    assert claim["metadata"]["name"] not in self.pvcs, (
                        f"PVC {claim['metadata']['name']} exists"
                    )
            elif isinstance(action, model.CreatePVC):
                assert action.pvc not in self.pvcs, f"PVC {action.pvc} exists"
            elif not isinstance(action, model.DeletePVC):
                assert action.pod in self.pods, f"pod {action.pod} is gone"
            self.model.carry_out(action)

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

    def kruise_available(self) -> int:
        """Pods OpenKruise counts as available (services/model/availability.py: lifecycle state empty or
        Normal, Running, Ready, InPlaceUpdateReady not False, not terminating): the pods maxUnavailable
        protects. A Ready pod in another lifecycle state (PreparingNormal, waiting for its preNormal hook) is
        not one, and scale-in may delete it without using up the budget."""
        return sum(1 for p in self.pods.values() if pod_available(p))

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
