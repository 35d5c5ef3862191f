"""A typed, defaulted view of the CloneSet spec (OpenKruise apis/apps/defaults/v1alpha1.go
``SetDefaultsCloneSet``). Built only after validation passed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.kinds.cloneset.rules.lifecycle import Lifecycle, read_lifecycle
from services.kinds.cloneset.rules.names import (
    EXCLUDE_PREPARING_DELETE_LABEL,
    INPLACE_MODE_ANNOTATION,
    INPLACE_MODE_EXTENDED,
)
from services.model import intorpercent
from services.model.cloneset import (  # noqa: F401 - the update types are the planner's vocabulary too
    DEFAULT_MAX_UNAVAILABLE,
    IN_PLACE_IF_POSSIBLE,
    IN_PLACE_ONLY,
    ON_DELETE,
    RECREATE,
    UPDATE_TYPES,
    desired_replicas,
)
from services.model.redaction import MARK

DEFAULT_REVISION_HISTORY_LIMIT = 10


@dataclass(frozen=True, slots=True)
class CloneSetSpec:
    name: str
    namespace: str
    uid: str
    generation: int
    replicas: int
    selector: dict[str, Any]
    template: dict[str, Any]
    volume_claim_templates: list[dict[str, Any]]
    update_type: str
    paused: bool
    partition: int  # resolved: pods kept at the old revision
    max_unavailable: int  # resolved (rounded up, down when maxSurge > 0)
    max_surge: int  # resolved; 0 while paused
    scale_max_unavailable: int | None  # None = unlimited
    grace_period_seconds: int
    min_ready_seconds: int
    revision_history_limit: int
    pods_to_delete: list[str]
    disable_pvc_reuse: bool
    extended_inplace: bool
    priority_strategy: dict[str, Any] | None
    scatter_strategy: list[dict[str, str]] | None = None
    lifecycle: Lifecycle | None = None
    progress_deadline_seconds: int | None = None
    exclude_preparing_delete: bool = False
    # The FNV of the real template's revision data, recorded beside a redacted template by the watcher
    # (docs/events.md, "Redaction"); None for a template recorded as it is (trails before redaction).
    template_fnv: int | None = None


def resolve(cloneset: dict[str, Any]) -> CloneSetSpec:
    metadata = cloneset.get("metadata") or {}
    spec = cloneset.get("spec") or {}
    strategy = spec.get("updateStrategy") or {}
    scale = spec.get("scaleStrategy") or {}
    replicas = desired_replicas(cloneset)
    paused = bool(strategy.get("paused", False))
    max_surge = intorpercent.scaled(strategy.get("maxSurge") or 0, replicas, round_up=True)
    if paused:
        max_surge = 0
    raw_unavailable = strategy.get("maxUnavailable")
    if raw_unavailable is None:
        raw_unavailable = DEFAULT_MAX_UNAVAILABLE
    # OnDelete without an explicit maxUnavailable: OpenKruise has no rollingUpdate block then and rounds
    # its default 20% down (calculateDiffsWithExpectation).
    on_delete_default = strategy.get("type") == ON_DELETE and strategy.get("maxUnavailable") is None
    max_unavailable = intorpercent.scaled(
        raw_unavailable, replicas, round_up=max_surge == 0 and not on_delete_default
    )
    raw_scale_unavailable = scale.get("maxUnavailable")
    scale_max_unavailable = (
        None
        if raw_scale_unavailable is None
        else intorpercent.scaled(raw_scale_unavailable, replicas, round_up=True)
    )
    inplace = strategy.get("inPlaceUpdateStrategy") or {}
    annotations = metadata.get("annotations") or {}
    history = spec.get("revisionHistoryLimit")
    return CloneSetSpec(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace") or "default",
        uid=metadata.get("uid") or "",
        generation=int(metadata.get("generation") or 0),
        replicas=replicas,
        selector=spec.get("selector") or {},
        template=spec.get("template") or {},
        volume_claim_templates=list(spec.get("volumeClaimTemplates") or []),
        update_type=strategy.get("type") or RECREATE,
        paused=paused,
        partition=intorpercent.partition_count(strategy.get("partition"), replicas),
        max_unavailable=max_unavailable,
        max_surge=max_surge,
        scale_max_unavailable=scale_max_unavailable,
        grace_period_seconds=int(inplace.get("gracePeriodSeconds") or 0),
        min_ready_seconds=int(spec.get("minReadySeconds") or 0),
        revision_history_limit=DEFAULT_REVISION_HISTORY_LIMIT if history is None else int(history),
        pods_to_delete=list(scale.get("podsToDelete") or []),
        disable_pvc_reuse=bool(scale.get("disablePVCReuse", False)),
        extended_inplace=annotations.get(INPLACE_MODE_ANNOTATION) == INPLACE_MODE_EXTENDED,
        priority_strategy=strategy.get("priorityStrategy"),
        scatter_strategy=strategy.get("scatterStrategy") or None,
        lifecycle=read_lifecycle(spec.get("lifecycle")),
        progress_deadline_seconds=(
            None if spec.get("progressDeadlineSeconds") is None else int(spec["progressDeadlineSeconds"])
        ),
        exclude_preparing_delete=(metadata.get("labels") or {}).get(EXCLUDE_PREPARING_DELETE_LABEL) == "true",
        template_fnv=_recorded_template_fnv(cloneset),
    )


def _recorded_template_fnv(cloneset: dict[str, Any]) -> int | None:
    mark = cloneset.get(MARK)
    fnv = mark.get("templateFnv") if isinstance(mark, dict) else None
    return fnv if isinstance(fnv, int) and not isinstance(fnv, bool) else None
