"""What "available" means, once, for everything that counts it: the CloneSet planner
(services/kinds/cloneset/rules/podstate.py), ``rollbook replay``, ``rollbook what-if``, the UI, the shadow
trail and the SQL (``pod_available`` and the view ``unavailability`` behind ``max_unavailable_exceeded``,
defined by migrations/versions/0032_openkruise_availability.py, which mirrors every rule below; the test
tests/infra/test_availability_sql.py holds the two to the same table of pods).

A pod is **available** as OpenKruise's ``IsPodAvailable`` has it (the CloneSet controller's count for
maxUnavailable), which is Kubernetes' pod availability plus two OpenKruise gates:

- its lifecycle state (label ``lifecycle.apps.kruise.io/state``) is absent, empty or ``Normal``: a pod in
  ``PreparingNormal``, ``PreparingUpdate``, ``Updating``, ``Updated`` or ``PreparingDelete`` is not
  available even when Ready, so deleting or updating it takes nothing more out of service (but for
  rollbook's resize that restarts nothing, below);
- its phase is ``Running``;
- the first ``Ready`` condition has status ``True``;
- the first ``InPlaceUpdateReady`` condition is absent or ``True`` (an in-place update marks the pod
  not-ready through that readiness gate before the kubelet's Ready catches up);
- with ``minReadySeconds`` > 0, the Ready condition's ``lastTransitionTime`` (an RFC 3339 time; anything
  else counts as absent) plus minReadySeconds is strictly before now;
- it is **not terminating** (no ``deletionTimestamp``). OpenKruise lists only active pods, so a terminating
  pod is not counted at all: against ``spec.replicas`` it is one pod short, exactly as an unavailable one.

The number of unavailable pods of a workload is ``max(spec.replicas - available pods, 0)``: a missing or
terminating pod counts as unavailable and a surplus pod (surge) makes up for one that is not available,
which is how OpenKruise budgets maxUnavailable (``deleteReadyLimit = maxUnavailable + pods - replicas -
unavailable``). Counting the pods that exist and are not available instead would count a recreated pod
twice (the old one terminating and its replacement starting). rollbook's one step beyond OpenKruise, a
resize that restarts nothing (docs/plan.md), keeps its pod Ready and in its Services while it is
``Updating``: such a pod (its in-place state records a resize, ``RESIZE_STATE_KEY``, and InPlaceUpdateReady
is not False) counts as available, in the planner's budget and in the audit alike.

minReadySeconds is part of the count because the planner counts with it: without it the audit could not
see a pod taken down before the previous one had been Ready for minReadySeconds, the very thing the field
asks for. A trail is a sequence of observations, and a pod becomes available minReadySeconds after its
Ready time with nothing observed then. So a trail is counted observation by observation
(``AvailabilityCount``, and the SQL view the same way): at each observation, a pod counts in its latest
observed state, held to the minReadySeconds its workload had when that state was observed, at the time of
the latest observation so far (the clock never goes back). A change of minReadySeconds therefore applies to
a pod from its next observation; OpenKruise applies it at once, which differs only for a pod that turned
Ready less than the old or new minReadySeconds before the change. The times compared are the kubelet's
(lastTransitionTime) and the observer's, as OpenKruise compares the kubelet's with its own.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.model.cloneset import INPLACE_STATE_ANNOTATION, INPLACE_STATE_ANNOTATION_OLD

READY_CONDITION = "Ready"
INPLACE_READY_CONDITION = "InPlaceUpdateReady"
LIFECYCLE_STATE_LABEL = "lifecycle.apps.kruise.io/state"
RUNNING = "Running"
# Lifecycle states in which a pod may count as available (OpenKruise: empty or Normal).
NORMAL_LIFECYCLE = ("", "Normal")
UPDATING_LIFECYCLE = "Updating"
# The in-place update state annotations (the first present is read) and the key under which rollbook
# records a resize's targets (container -> resources) in it.
INPLACE_STATE_ANNOTATIONS = (INPLACE_STATE_ANNOTATION, INPLACE_STATE_ANNOTATION_OLD)
RESIZE_STATE_KEY = "rollbookResize"

# RFC 3339 as Kubernetes writes times (``2026-11-30T12:00:00Z``; fractions and offsets allowed), within
# a range that neither Python's datetime nor Postgres' timestamptz can overflow. The SQL uses this pattern.
RFC3339_PATTERN = (
    r"^[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-4]):[0-5][0-9])$"
)
_RFC3339 = re.compile(RFC3339_PATTERN)


def condition_time(value: Any) -> float | None:
    """An RFC 3339 time as epoch seconds; None when absent, not RFC 3339 or not a calendar date."""
    return _rfc3339_time(value) if isinstance(value, str) else None


@functools.lru_cache(maxsize=4096)
def _rfc3339_time(value: str) -> float | None:
    # Memoised: the pods of one rollout become ready in bursts that share whole-second times.
    if _RFC3339.match(value) is None:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:  # 2026-02-30
        return None


def terminating(metadata: Mapping[str, Any]) -> bool:
    """A deletionTimestamp is set (null and the empty string are none)."""
    return metadata.get("deletionTimestamp") not in (None, "")


def condition_facts(status: Mapping[str, Any]) -> tuple[bool, Any, bool | None]:
    """``(ready, ready since, in-place ready)`` from the status' conditions, the first of each type (as
    Kubernetes' GetPodCondition reads them): Ready is True; its lastTransitionTime as written (None when not
    Ready); InPlaceUpdateReady True, False for any other status, None when absent."""
    ready: bool | None = None
    since: Any = None
    in_place: bool | None = None
    seen_in_place = False
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return False, None, None
    for condition in conditions:
        if not isinstance(condition, dict):
            continue
        kind = condition.get("type")
        if kind == READY_CONDITION and ready is None:
            ready = condition.get("status") == "True"
            if ready:
                since = condition.get("lastTransitionTime")
        elif kind == INPLACE_READY_CONDITION and not seen_in_place:
            seen_in_place = True
            in_place = condition.get("status") == "True"
    return bool(ready), since, in_place


def resizing_in_place(annotations: Mapping[str, Any]) -> bool:
    """The pod's in-place update state records a resize (its text names ``RESIZE_STATE_KEY``; the SQL
    reads it the same way, as text, so a state that is not JSON cannot fail a query)."""
    for name in INPLACE_STATE_ANNOTATIONS:
        value = annotations.get(name)
        if value is not None:
            return isinstance(value, str) and f'"{RESIZE_STATE_KEY}"' in value
    return False


def in_service(
    *,
    terminating: bool,
    lifecycle: Any,
    phase: Any,
    ready: bool,
    in_place_ready: bool | None,
    resizing: bool = False,
) -> bool:
    """Available with minReadySeconds 0 (OpenKruise's "ready": what a deletion may take without using up
    the budget), from the pod's facts."""
    return (
        ready
        and phase == RUNNING
        and in_place_ready is not False
        and (
            lifecycle is None
            or lifecycle in NORMAL_LIFECYCLE
            # rollbook's resize that restarts nothing: Updating, yet Ready with InPlaceUpdateReady not
            # False, so in its Services throughout (a resize that restarts a container is not-ready)
            or (lifecycle == UPDATING_LIFECYCLE and resizing)
        )
        and not terminating
    )


def ready_long_enough(ready_since: float | None, min_ready_seconds: int, now: float | None) -> bool:
    """Kubernetes' minReadySeconds rule: 0, or Ready since a known time more than that long before now."""
    if min_ready_seconds == 0:
        return True
    if now is None:
        raise ValueError("minReadySeconds > 0 needs the time to judge it at")
    return ready_since is not None and ready_since + min_ready_seconds < now


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What availability reads of one pod."""

    in_service: bool
    ready_since: float | None  # Ready=True's lastTransitionTime (None: not Ready, absent, not RFC 3339)

    def ready_at(self, min_ready_seconds: int) -> float | None:
        """The time after which the pod is available (-inf: at once; inf: never while Ready stays as it
        is); None when it is not in service."""
        if not self.in_service:
            return None
        if min_ready_seconds == 0:
            return -math.inf
        return math.inf if self.ready_since is None else self.ready_since + min_ready_seconds


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    metadata = _mapping(pod.get("metadata"))
    status = _mapping(pod.get("status"))
    ready, since, in_place = condition_facts(status)
    lifecycle = _mapping(metadata.get("labels")).get(LIFECYCLE_STATE_LABEL)
    serving = in_service(
        terminating=terminating(metadata),
        lifecycle=lifecycle,
        phase=status.get("phase"),
        ready=ready,
        in_place_ready=in_place,
        resizing=lifecycle == UPDATING_LIFECYCLE and resizing_in_place(_mapping(metadata.get("annotations"))),
    )
    return PodFacts(serving, condition_time(since))


def pod_available(pod: Mapping[str, Any], min_ready_seconds: int = 0, now: float | None = None) -> bool:
    """Available (the module's rules); ``now`` (epoch seconds) is needed when ``min_ready_seconds`` > 0."""
    facts = pod_facts(pod)
    return facts.in_service and ready_long_enough(facts.ready_since, min_ready_seconds, now)


def unavailable(
    replicas: int, pods: Iterable[Mapping[str, Any]], min_ready_seconds: int = 0, now: float | None = None
) -> int:
    """How many of the ``replicas`` wanted pods are not available at ``now``."""
    return max(replicas - sum(1 for pod in pods if pod_available(pod, min_ready_seconds, now)), 0)


def min_ready_seconds(workload: Mapping[str, Any] | None) -> int:
    """A workload's spec.minReadySeconds: 0 when absent or not an integer (the SQL reads it the same way)."""
    value = _mapping(_mapping(workload).get("spec")).get("minReadySeconds")
    if isinstance(value, int) and not isinstance(value, bool) and -(10**9) < value < 10**9:
        return value
    return 0


class AvailabilityCount:
    """The available pods of one workload along its trail, observation by observation, as the SQL view
    ``unavailability`` counts them: each pod in its latest observed state, held to the minReadySeconds of
    that observation, at the latest observation's time (``clock``)."""

    __slots__ = ("clock", "available", "_pods", "_waiting", "_serial")

    def __init__(self) -> None:
        self.clock = -math.inf
        self.available = 0
        # pod in service -> (the time after which it is available, the serial of its observation)
        self._pods: dict[str, tuple[float, int]] = {}
        self._waiting: list[tuple[float, int, str]] = []  # (ready at, serial, pod) not yet available: a heap
        self._serial = 0

    def observe(
        self, name: str, pod: Mapping[str, Any] | None, min_ready_seconds: int, at: float
    ) -> list[tuple[str, float]]:
        """Pod ``name`` as observed at ``at`` (epoch seconds; None: gone). Returns the other pods that became
        available since the last observation (their minReadySeconds passed) with the time they did, for a
        caller that times each pod's stretch out of service."""
        promoted = self.advance(at)
        old = self._pods.pop(name, None)
        if old is not None and old[0] < self.clock:
            self.available -= 1
        ready_at = None if pod is None else pod_facts(pod).ready_at(min_ready_seconds)
        if ready_at is not None:
            self._serial += 1
            self._pods[name] = (ready_at, self._serial)
            if ready_at < self.clock:
                self.available += 1
            elif ready_at < math.inf:
                heapq.heappush(self._waiting, (ready_at, self._serial, name))
        return [(p, when) for p, when in promoted if p != name]

    def advance(self, at: float) -> list[tuple[str, float]]:
        """Move the clock to ``at`` (never back): the pods whose minReadySeconds passed become available
        (returned with the time they did)."""
        self.clock = max(self.clock, at)
        promoted: list[tuple[str, float]] = []
        waiting = self._waiting
        while waiting and waiting[0][0] < self.clock:
            ready_at, serial, name = heapq.heappop(waiting)
            held = self._pods.get(name)
            if held is not None and held[1] == serial:  # else observed again since
                self.available += 1
                promoted.append((name, ready_at))
        return promoted

    def held(self) -> list[str]:
        """The pods in service (available or waiting out minReadySeconds)."""
        return list(self._pods)

    def is_available(self, name: str) -> bool:
        held = self._pods.get(name)
        return held is not None and held[0] < self.clock

    def unavailable(self, replicas: int) -> int:
        return max(replicas - self.available, 0)


def revision_hash(revision: str | None) -> str:
    """The hash part of a revision name or of a pod's controller-revision-hash label: the label may hold
    the full name (``sample-7656fc4998``) or the hash alone, so compare these, never the raw strings."""
    return (revision or "").rpartition("-")[2]
