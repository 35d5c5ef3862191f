"""How a StatefulSet's observations read as a rollout (pure; the fold is services/kinds/recorded/rules.py).

- Its revisions are its ControllerRevisions: number ``revision``, hash the ``controller.kubernetes.io/hash``
  label, the pod template of ``data.spec.template``.
- The status names the update and current revisions (``updateRevision``, ``currentRevision``), once it
  reflects the spec (``observedGeneration``). It is complete when they are the same and every replica is
  updated and ready.
- A step is the partition: ``spec.updateStrategy.rollingUpdate.partition`` pods (the lowest ordinals) stay
  at the current revision, the others are updated from the highest ordinal down; ``maxUnavailable``
  (default 1) resolved against ``spec.replicas``, no surge. ``OnDelete``: no step (pods change only
  when someone deletes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.kinds.recorded.rules import RecordedTrail, Step, Target
from services.model.intorpercent import IntOrPercentError, expected_updated, scaled

KIND = "StatefulSet"
REVISION_KIND = "ControllerRevision"
REVISION_LABEL = "controller-revision-hash"
HASH_LABEL = "controller.kubernetes.io/hash"


def desired(obj: Mapping[str, Any] | None) -> int:
    value = (obj or {}).get("spec", {}).get("replicas")
    return int(value) if value is not None else 1


@dataclass
class StatefulSetTrail(RecordedTrail):
    workload_kind = KIND
    revision_kind = REVISION_KIND
    revision_label = REVISION_LABEL

    def revision_of(self, obj: Mapping[str, Any]) -> tuple[int, str, dict[str, Any]] | None:
        number = obj.get("revision")
        if not isinstance(number, int):
            return None
        labels = (obj.get("metadata") or {}).get("labels") or {}
        template = dict(((obj.get("data") or {}).get("spec") or {}).get("template") or {})
        return number, str(labels.get(HASH_LABEL, "")), template

    def target(self) -> Target | None:
        sts = self.workload or {}
        metadata, spec, status = sts.get("metadata") or {}, sts.get("spec") or {}, sts.get("status") or {}
        if int(status.get("observedGeneration") or 0) < int(metadata.get("generation") or 0):
            return None
        update = status.get("updateRevision")
        if not update:
            return None
        current = status.get("currentRevision") or None
        replicas = desired(sts)
        complete = (
            current == update
            and int(status.get("updatedReplicas") or 0) == replicas
            and int(status.get("readyReplicas") or 0) == replicas
        )
        return Target(
            update=str(update),
            current=str(current) if current else None,
            complete=complete,
            replicas=replicas,
            strategy=dict(spec.get("updateStrategy") or {}),
        )

    def step(self, target: Target) -> Step | None:
        if target.strategy.get("type") == "OnDelete":
            return None
        rolling = target.strategy.get("rollingUpdate") or {}
        partition = min(max(int(rolling.get("partition") or 0), 0), target.replicas)
        try:
            unavailable = max(scaled(rolling.get("maxUnavailable", 1), target.replicas, round_up=False), 1)
        except IntOrPercentError:
            unavailable = 1
        return Step(
            partition=partition,
            replicas=target.replicas,
            expected_updated=expected_updated(target.replicas, partition),
            max_unavailable=unavailable,
            max_surge=0,
        )
