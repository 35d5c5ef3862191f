"""What the planner reads from a pod: readiness, availability, revision, order (Kubernetes' pod readiness
helpers and ``controller.ActivePods`` order; OpenKruise pkg/controller/cloneset/sync/cloneset_sync_utils.go).

Each pod is read once into a ``PodView``; everything later works on views.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

from services.kinds.cloneset.rules.names import (
    DELETION_COST_ANNOTATION,
    INPLACE_GRACE_ANNOTATION,
    INPLACE_GRACE_ANNOTATION_OLD,
    INPLACE_READY_CONDITION,
    INPLACE_STATE_ANNOTATION,
    INPLACE_STATE_ANNOTATION_OLD,
    INSTANCE_ID_LABEL,
    KRUISE_POD_READY_CONDITION,
    LIFECYCLE_STATE_LABEL,
    REVISION_LABEL,
    SPECIFIED_DELETE_LABEL,
)
from services.model.availability import (
    UPDATING_LIFECYCLE,
    condition_facts,
    condition_time,
    in_service,
    ready_long_enough,
    resizing_in_place,
    terminating,
)

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def parse_time(value: Any) -> float | None:
    """RFC 3339 to epoch seconds; None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> float | None:
    # Memoised: pods created or made ready in one burst share their (whole-second) timestamps, and every
    # round reads the same pods again.
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_time(epoch: float) -> str:
    """Whole seconds, as Kubernetes writes condition and status times."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _deletion_cost(value: Any) -> int:
    # Kubernetes accepts only canonical int32 text: "+5" and "007" are malformed and count as 0.
    if not isinstance(value, str) or not value:
        return 0
    text = value[1:] if value.startswith("-") else value
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or text != value.lstrip("-"):
        return 0
    number = int(value)
    return number if -(2**31) <= number < 2**31 else 0


def _json_annotation(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


_UNSET: Any = object()
_MINUS_INF = float("-inf")


class PodView:
    """One pod, read once. Fields every round needs are read eagerly; sort-only fields lazily."""

    __slots__ = (
        "obj",
        "name",
        "labels",
        "annotations",
        "instance_id",
        "revision_hash",
        "node",
        "phase",
        "active",
        "ready",
        "inplace_ready",
        "lifecycle",
        "specified_delete",
        "sole_controller_uid",
        "_normal_running",
        "_ready_since_text",
        "_available_since",
        "_created_text",
        "_statuses",
        "_ready_since",
        "_created",
        "_restarts",
        "_grace",
        "_state",
    )

    def __init__(self, pod: dict[str, Any]) -> None:
        # Hot path (every pod, every round): locals first, each attribute stored once.
        metadata = pod["metadata"]
        status = pod.get("status") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        name = metadata["name"]
        if type(name) is not str:
            raise TypeError("pod name must be a string")
        if type(labels) is not dict or type(annotations) is not dict:
            raise TypeError("labels and annotations must be maps")
        self.obj = pod
        self.name: str = name
        self.labels: dict[str, str] = labels
        self.annotations: dict[str, str] = annotations
        self.instance_id: str = labels.get(INSTANCE_ID_LABEL, "")
        self.revision_hash: str = labels.get(REVISION_LABEL, "").rpartition("-")[2]
        self.node: str = (pod.get("spec") or {}).get("nodeName") or ""
        phase = status.get("phase") or ""
        self.phase: str = phase
        deleting = terminating(metadata)
        self.active: bool = phase != "Succeeded" and phase != "Failed" and not deleting
        # The conditions as services/model/availability.py reads them (the first of each type).
        ready, ready_since_text, inplace_ready = condition_facts(status)
        self.ready: bool = ready
        self.inplace_ready: bool | None = inplace_ready  # None when the condition is absent
        lifecycle = labels.get(LIFECYCLE_STATE_LABEL, "")
        self.lifecycle: str = lifecycle
        self.specified_delete: bool = SPECIFIED_DELETE_LABEL in labels
        # The usual pod's one owner reference, its controller: whose it is, read once (a round asks).
        refs = metadata.get("ownerReferences")
        sole = refs[0] if type(refs) is list and len(refs) == 1 else None
        self.sole_controller_uid: str | None = (
            sole.get("uid") if type(sole) is dict and sole.get("controller") else None
        )
        # Available at minReadySeconds 0, by the one definition (services/model/availability.py).
        self._normal_running = in_service(
            terminating=deleting,
            lifecycle=lifecycle,
            phase=phase,
            ready=ready,
            in_place_ready=inplace_ready,
            resizing=lifecycle == UPDATING_LIFECYCLE and resizing_in_place(annotations),
        )
        self._ready_since_text = ready_since_text
        self._available_since: Any = _UNSET
        # Read now, parsed later: the metadata is in the CPU cache now, and may not be when sorting.
        self._created_text = metadata.get("creationTimestamp")
        self._statuses = status.get("containerStatuses")
        self._ready_since: Any = _UNSET
        self._created: Any = _UNSET
        self._restarts: Any = _UNSET
        self._grace: Any = _UNSET
        self._state: Any = _UNSET

    @classmethod
    def read(cls, pod: dict[str, Any]) -> PodView:
        return cls(pod)

    @property
    def ready_since(self) -> float | None:
        """lastTransitionTime of Ready=True."""
        if self._ready_since is _UNSET:
            self._ready_since = parse_time(self._ready_since_text)
        return self._ready_since  # type: ignore[no-any-return]

    @property
    def created(self) -> float | None:
        if self._created is _UNSET:
            self._created = parse_time(self._created_text)
        return self._created  # type: ignore[no-any-return]

    @property
    def restarts(self) -> int:
        if self._restarts is _UNSET:
            statuses = self._statuses
            if not statuses:
                self._restarts = 0
            elif len(statuses) == 1:  # the usual pod: skip the loop
                self._restarts = int(max(statuses[0].get("restartCount") or 0, 0))
            else:
                self._restarts = int(max(0, *(c.get("restartCount") or 0 for c in statuses)))
        return self._restarts  # type: ignore[no-any-return]

    @property
    def deletion_cost(self) -> int:
        return _deletion_cost(self.annotations.get(DELETION_COST_ANNOTATION))

    @property
    def has_inplace_gate(self) -> bool:
        return self.has_gate(INPLACE_READY_CONDITION)

    def has_gate(self, condition_type: str) -> bool:
        gates = (self.obj.get("spec") or {}).get("readinessGates") or ()
        return any(g.get("conditionType") == condition_type for g in gates)

    def condition(self, condition_type: str) -> dict[str, Any] | None:
        for condition in (self.obj.get("status") or {}).get("conditions") or ():
            if condition.get("type") == condition_type:
                return condition  # type: ignore[no-any-return]
        return None

    @property
    def kruise_pod_ready(self) -> dict[str, Any] | None:
        return self.condition(KRUISE_POD_READY_CONDITION)

    @property
    def finalizers(self) -> list[str]:
        return list(self.obj["metadata"].get("finalizers") or ())

    # --- readiness vocabulary -------------------------------------------------------------------------

    def available(self, min_ready_seconds: int, now: float) -> bool:
        """Ready, and ready for longer than minReadySeconds (strictly)."""
        if not self.ready:
            return False
        if min_ready_seconds == 0:
            return True
        return self.ready_since is not None and self.ready_since + min_ready_seconds < now

    def cs_available(self, min_ready_seconds: int, now: float) -> bool:
        """Available as services/model/availability.py defines it (OpenKruise's ``IsPodAvailable``,
        pkg/controller/cloneset/sync/cloneset_sync_utils.go): lifecycle empty or Normal, Running, Ready,
        InPlaceUpdateReady not False, Ready for longer than minReadySeconds."""
        if not self._normal_running:
            return False
        if min_ready_seconds == 0:
            return True
        since = self._available_since
        if since is _UNSET:
            since = self._available_since = condition_time(self._ready_since_text)
        return ready_long_enough(since, min_ready_seconds, now)

    def counts_ready(self) -> bool:
        """status.readyReplicas: Running, Ready and InPlaceUpdateReady not False (lifecycle ignored)."""
        return self.phase == "Running" and self.ready and self.inplace_ready is not False

    @property
    def pre_deleting(self) -> bool:
        return self.lifecycle == "PreparingDelete"

    @property
    def inplace_state(self) -> dict[str, Any] | None:
        if self._state is _UNSET:
            annotations = self.annotations
            value = annotations.get(INPLACE_STATE_ANNOTATION, annotations.get(INPLACE_STATE_ANNOTATION_OLD))
            self._state = _json_annotation(value)
        return self._state  # type: ignore[no-any-return]

    @property
    def inplace_grace(self) -> dict[str, Any] | None:
        if self._grace is _UNSET:
            annotations = self.annotations
            value = annotations.get(INPLACE_GRACE_ANNOTATION, annotations.get(INPLACE_GRACE_ANNOTATION_OLD))
            self._grace = _json_annotation(value)
        return self._grace  # type: ignore[no-any-return]

    # --- orderings ------------------------------------------------------------------------------------

    def _ready_recency(self) -> float:
        # Both ready: the one that became ready more recently first; a missing time counts as most recent.
        if not self.ready:
            return 0.0
        return -(self.ready_since if self.ready_since else float("inf"))

    def _newness(self) -> float:
        return -(self.created if self.created else float("inf"))

    def active_order_key(self) -> tuple[Any, ...]:
        """Kubernetes' "least valuable first" (``controller.ActivePods``), for update candidates; the pod
        name breaks full ties (determinism).

        Hot path (every update candidate, every round): the lazy fields are read inline, and the three
        small leading criteria (scheduled, phase, ready) are packed into one int (same order, fewer tuple
        element comparisons while sorting)."""
        ready = self.ready
        recency = 0.0
        if ready:
            since = self._ready_since
            if since is _UNSET:
                since = self._ready_since = parse_time(self._ready_since_text)
            recency = -since if since else _MINUS_INF
        created = self._created
        if created is _UNSET:
            created = self._created = parse_time(self._created_text)
        restarts = self._restarts
        if restarts is _UNSET:
            statuses = self._statuses
            if statuses and len(statuses) == 1:  # the usual pod, inline
                restarts = self._restarts = int(max(statuses[0].get("restartCount") or 0, 0))
            else:
                restarts = self.restarts
        return (
            (6 if self.node else 0) + 2 * _PHASE_RANK.get(self.phase, 0) + (1 if ready else 0),
            recency,
            -restarts,
            -created if created else _MINUS_INF,
            self.name,
        )

    def scale_in_key(self, min_ready_seconds: int, now: float, spread_rank: int) -> tuple[Any, ...]:
        """Scale-in order (OpenKruise pkg/controller/cloneset/utils/pod_sorter.go): first = deleted first."""
        return (
            1 if self.node else 0,
            _PHASE_RANK.get(self.phase, 0),
            1 if self.cs_available(min_ready_seconds, now) else 0,
            1 if self.ready else 0,
            self.deletion_cost,
            -spread_rank,
            self._ready_recency(),
            -self.restarts,
            self._newness(),
            self.name,
        )

    def same_node_key(self, min_ready_seconds: int, now: float) -> tuple[Any, ...]:
        key = self.scale_in_key(min_ready_seconds, now, 0)
        return key[:5] + key[6:]


def container_statuses(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("name", ""): c for c in (pod.get("status") or {}).get("containerStatuses") or ()}


class PodViews:
    """The views of one workload's pods, kept from one round to the next for every pod that is still the
    same object: a workload planned round after round over mostly unchanged pods (the planner service,
    what-if) reads only the pods that changed. Valid only while the caller never changes a pod object it
    planned on in place: it replaces a changed pod with a new object, or ``forget``s it."""

    __slots__ = ("_views",)

    def __init__(self) -> None:
        self._views: dict[int, tuple[dict[str, Any], PodView]] = {}  # id(pod) -> (pod, its view)

    def view(self, pod: dict[str, Any], seen: dict[int, tuple[dict[str, Any], PodView]]) -> PodView:
        """``pod``'s view, the kept one while it is the same object; recorded in ``seen``, the next
        round's keep (the object is held there, so its id is not reused by another)."""
        key = id(pod)
        entry = self._views.get(key)
        if entry is None or entry[0] is not pod:
            entry = (pod, PodView(pod))
        seen[key] = entry
        return entry[1]

    def keep(self, seen: dict[int, tuple[dict[str, Any], PodView]]) -> None:
        """Keep the views of this round's pods, and only those."""
        self._views = seen

    def forget(self, pod: dict[str, Any]) -> None:
        """``pod`` was changed in place: read it again next round."""
        self._views.pop(id(pod), None)
