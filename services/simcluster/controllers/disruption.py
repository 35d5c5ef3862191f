"""The disruption controller (PodDisruptionBudget status) and the eviction decision the ``pods/eviction``
subresource makes with it, as kube-controller-manager and kube-apiserver do.

Status: ``expectedPods``, ``currentHealthy`` (ready pods not being deleted), ``desiredHealthy`` (from
``minAvailable`` or ``maxUnavailable``, an int or a percentage of the expected pods, rounded up),
``disruptionsAllowed``, ``disruptedPods`` (evictions the controller has not yet seen go through),
``observedGeneration`` and the ``DisruptionAllowed`` condition. With a percentage or ``maxUnavailable`` the
expected pods are the scale of the pods' controllers (a Deployment through its ReplicaSet, a ReplicaSet,
a StatefulSet, or any resource with ``spec.replicas`` such as a CloneSet); with an integer
``minAvailable``, the pods themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.model.labels import matches

from ..errors import ApiError
from ..resources import PDBS, PODS
from ..store import Key, Obj, Store, WatchEvent, key_of
from .base import (
    Controller,
    controller_ref,
    iso,
    parse_time,
    pod_ready,
    pod_terminal,
    put_condition,
    scaled_value,
)

DELETION_TIMEOUT = timedelta(minutes=2)  # a disrupted pod not deleted by then counts again
MAX_DISRUPTED_PODS = 2000
EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass(frozen=True)
class Budget:
    expected: int
    desired_healthy: int


def budget(spec: dict[str, Any], pods: int, expected_scale: Callable[[], int]) -> Budget:
    """getExpectedPodCount: the pods expected and how many must stay healthy."""
    if spec.get("maxUnavailable") is not None:
        expected = expected_scale()
        unavailable = scaled_value(spec["maxUnavailable"], expected, round_up=True)
        return Budget(expected, max(expected - unavailable, 0))
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int):
        return Budget(pods, min_available)
    if min_available is not None:
        expected = expected_scale()
        return Budget(expected, scaled_value(min_available, expected, round_up=True))
    return Budget(pods, 0)


def healthy(pod: Obj) -> bool:
    return pod_ready(pod) and not pod["metadata"].get("deletionTimestamp")


def pdb_status(
    pdb: Obj, pods: list[Obj], expected_scale: Callable[[], int], now: datetime
) -> tuple[dict[str, Any], float | None]:
    """The PDB's status, and when a disrupted pod's entry times out."""
    pods = [p for p in pods if not pod_terminal(p)]
    b = budget(pdb.get("spec") or {}, len(pods), expected_scale)
    status = dict(pdb.get("status") or {})
    names = {p["metadata"]["name"]: p for p in pods}
    disrupted: dict[str, str] = {}
    recheck: float | None = None
    for name, when in (status.get("disruptedPods") or {}).items():
        pod = names.get(name)
        since = parse_time(when)
        if pod is None or pod["metadata"].get("deletionTimestamp") or since is None:
            continue  # it went (or is going): the eviction is done
        left = (since + DELETION_TIMEOUT - now).total_seconds()
        if left <= 0:
            continue
        disrupted[name] = when
        recheck = left if recheck is None else min(recheck, left)
    current = sum(1 for p in pods if healthy(p) and p["metadata"]["name"] not in disrupted)
    allowed = max(current - b.desired_healthy, 0) if b.expected > 0 else 0
    status.update(
        {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "expectedPods": b.expected,
            "currentHealthy": current,
            "desiredHealthy": b.desired_healthy,
            "disruptionsAllowed": allowed,
        }
    )
    if disrupted:
        status["disruptedPods"] = disrupted
    else:
        status.pop("disruptedPods", None)
    status["conditions"] = put_condition(status.get("conditions"), allowed_condition(allowed, pdb, now))
    return status, recheck


def allowed_condition(allowed: int, pdb: Obj, now: datetime) -> dict[str, Any]:
    return {
        "type": "DisruptionAllowed",
        "status": "True" if allowed > 0 else "False",
        "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
        "message": "",
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "lastTransitionTime": iso(now),
    }


def _too_many(message: str) -> ApiError:
    return ApiError(
        429,
        EVICTION_REFUSED,
        "TooManyRequests",
        {"causes": [{"reason": "DisruptionBudget", "message": message}]},
    )


def evict(pod: Obj, pdbs: list[Obj], now: datetime) -> dict[str, Any] | None:
    """Whether the eviction of ``pod`` may go ahead, as kube-apiserver's eviction REST does: None to
    delete it without touching a budget, the PDB's new status to write (then delete), or an ApiError
    raised (429 when the budget allows no disruption)."""
    if pod["metadata"].get("deletionTimestamp") or pod_terminal(pod):
        return None
    if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
        return None
    if not pdbs:
        return None
    if len(pdbs) > 1:
        raise ApiError(
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
            "support.",
        )
    pdb = pdbs[0]
    status = dict(pdb.get("status") or {})
    name = pdb["metadata"]["name"]
    if not pod_ready(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow":
            return None
        desired = int(status.get("desiredHealthy") or 0)
        if int(status.get("currentHealthy") or 0) >= desired and desired > 0:
            return None
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 1):
        raise _too_many(f"The disruption budget {name} is still being processed by the server.")
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise ApiError(403, "pdb disruptions allowed is negative", "Forbidden")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise ApiError(
            403, "DisruptedPods map too big - too many evictions not confirmed by PDB controller", "Forbidden"
        )
    if allowed == 0:
        raise _too_many(
            f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} healthy pods "
            f"and has {int(status.get('currentHealthy') or 0)} currently"
        )
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        status["conditions"] = put_condition(status.get("conditions"), allowed_condition(0, pdb, now))
    status["disruptedPods"] = dict(status.get("disruptedPods") or {}, **{pod["metadata"]["name"]: iso(now)})
    return status


class DisruptionController(Controller):
    name = "disruption-controller"
    watches = (PDBS, PODS)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is PDBS:
            return [key_of(event.obj)]
        namespace = key_of(event.obj)[0]
        out = []
        for (ns, _), pdb in self.store.objects[PDBS].items():
            if ns != namespace:
                continue
            selector = (pdb.get("spec") or {}).get("selector")
            labels = [event.obj["metadata"].get("labels")]
            if event.prev is not None:
                labels.append(event.prev["metadata"].get("labels"))
            if any(matches(selector, lab) for lab in labels):
                out.append(key_of(pdb))
        return out

    async def sync(self, key: Key) -> float | None:
        pdb = self.store.find(PDBS, *key)
        if pdb is None or pdb["metadata"].get("deletionTimestamp"):
            return None
        pods = matching_pods(self.store.list(PODS, key[0])[0], pdb)
        now = self.now()
        try:
            status, recheck = pdb_status(pdb, pods, lambda: self._expected_scale(pods), now)
        except ApiError as exc:  # fail safe: no disruption allowed while the budget cannot be computed
            status = dict(pdb.get("status") or {}, disruptionsAllowed=0)
            failed = dict(allowed_condition(0, pdb, now), reason="SyncFailed", message=exc.message)
            status["conditions"] = put_condition(status.get("conditions"), failed)
            recheck = 1.0
        self.write_status(PDBS, pdb, status)
        return recheck

    def _expected_scale(self, pods: list[Obj]) -> int:
        """The sum of the replicas of the pods' controllers, each counted once (getExpectedScale)."""
        seen: dict[str, int] = {}
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                raise ApiError(500, f"found no controller ref for pod {pod['metadata']['name']}")
            owner = self.store.by_uid(ref.get("uid", ""))
            if owner is None:
                continue
            if owner.get("kind") == "ReplicaSet":
                parent = controller_ref(owner)
                if parent is not None and parent.get("kind") == "Deployment":
                    deployment = self.store.by_uid(parent.get("uid", ""))
                    if deployment is not None:
                        owner = deployment
            replicas = (owner.get("spec") or {}).get("replicas")
            seen[owner["metadata"]["uid"]] = int(replicas if replicas is not None else 1)
        return sum(seen.values())


def matching_pods(pods: list[Obj], pdb: Obj) -> list[Obj]:
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return []  # policy/v1: a null selector selects nothing, an empty one everything
    return [p for p in pods if matches(selector, p["metadata"].get("labels"))]


def matching_pods_budgets(store: Store, pod: Obj) -> list[Obj]:
    """The PodDisruptionBudgets of the pod's namespace whose selector selects it."""
    namespace = pod["metadata"].get("namespace", "")
    labels = pod["metadata"].get("labels") or {}
    out = []
    for (ns, _), pdb in sorted(store.objects[PDBS].items()):
        selector = (pdb.get("spec") or {}).get("selector")
        if ns == namespace and selector is not None and matches(selector, labels):
            out.append(pdb)
    return out
