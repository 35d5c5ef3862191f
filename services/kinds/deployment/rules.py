"""How a Deployment's observations read as a rollout (pure; the fold is services/kinds/recorded/rules.py).

- Its revisions are its ReplicaSets: number ``deployment.kubernetes.io/revision``, hash the
  ``pod-template-hash`` label, the pod template. ``kubectl rollout undo`` re-numbers an old ReplicaSet:
  a ``RevisionCreated`` for an existing name, as a CloneSet rollback records.
- The update revision is the ReplicaSet with the highest revision number: the controller creates a new
  template's ReplicaSet, or re-numbers an old one, before it scales anything or writes the Deployment's
  annotation, so the rollout starts before its first pod shows. A rollout goes from the previous update
  revision, or, when the trail starts mid-rollout, from the old ReplicaSet holding most replicas.
- It is complete as ``kubectl rollout status`` says, once the status reflects the spec and names that
  revision: every replica updated, no old one left, all available.
- A step is the new ReplicaSet's desired replicas changing: ``expected_updated`` those, ``partition`` the
  rest of ``spec.replicas``, maxSurge (rounded up) and maxUnavailable (down) resolved against
  ``spec.replicas`` as the Deployment controller resolves them (both 0: maxUnavailable 1). Recreate: all
  unavailable, no surge.
- Paused is ``spec.paused``; past the deadline is ``Progressing`` False, ``ProgressDeadlineExceeded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.kinds.recorded.rules import RecordedTrail, Step, Target, condition
from services.model.intorpercent import IntOrPercentError, scaled

KIND = "Deployment"
REVISION_KIND = "ReplicaSet"
HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
DEFAULT_PROGRESS_DEADLINE_SECONDS = 600


def revision_number(obj: Mapping[str, Any]) -> int | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def surge_and_unavailable(strategy: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against ``replicas``."""
    if strategy.get("type") == "Recreate":
        return 0, replicas
    rolling = strategy.get("rollingUpdate") or {}
    try:
        surge = scaled(rolling.get("maxSurge", "25%"), replicas, round_up=True)
        unavailable = scaled(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    except IntOrPercentError:
        return 0, 0
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def desired(obj: Mapping[str, Any] | None) -> int:
    value = (obj or {}).get("spec", {}).get("replicas")
    return int(value) if value is not None else 1


@dataclass
class DeploymentTrail(RecordedTrail):
    workload_kind = KIND
    revision_kind = REVISION_KIND
    revision_label = HASH_LABEL

    def revision_of(self, obj: Mapping[str, Any]) -> tuple[int, str, dict[str, Any]] | None:
        number = revision_number(obj)
        if number is None:
            return None
        labels = (obj.get("metadata") or {}).get("labels") or {}
        template = dict((obj.get("spec") or {}).get("template") or {})
        return number, str(labels.get(HASH_LABEL, "")), template

    def target(self) -> Target | None:
        deployment = self.workload or {}
        metadata, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
        status = deployment.get("status") or {}
        numbered = {n: revision_number(rs) for n, rs in self.revisions.items()}
        known = {n: k for n, k in numbered.items() if k is not None}
        if not known:
            return None  # no ReplicaSet observed yet
        # The newest ReplicaSet is the update revision, as the controller makes it (a new template's
        # ReplicaSet, or an old one re-numbered by a rollback), seen before the Deployment's status says so:
        # its pods may be observed before the Deployment is.
        update = max(known, key=lambda n: known[n])
        old = [(int((rs.get("status") or {}).get("replicas") or 0), n) for n, rs in self.revisions.items()]
        old = [o for o in old if o[1] != update]
        current = max(old)[1] if old and max(old)[0] > 0 else None
        replicas = desired(deployment)
        fresh = int(status.get("observedGeneration") or 0) >= int(metadata.get("generation") or 0)
        complete = (
            fresh
            and revision_number(deployment) == known[update]
            and int(status.get("updatedReplicas") or 0) == replicas
            and int(status.get("replicas") or 0) == replicas
            and int(status.get("availableReplicas") or 0) == replicas
        )
        progressing = condition(deployment, "Progressing") or {}
        deadline = int(spec.get("progressDeadlineSeconds") or DEFAULT_PROGRESS_DEADLINE_SECONDS)
        return Target(
            update=update,
            current=current,
            complete=complete,
            replicas=replicas,
            strategy=dict(spec.get("strategy") or {}),
            paused=bool(spec.get("paused")),
            deadline_exceeded=fresh
            and progressing.get("status") == "False"
            and progressing.get("reason") == "ProgressDeadlineExceeded",
            progress_deadline_seconds=deadline,
            progressing_since=str(progressing.get("lastUpdateTime") or ""),
            settled=fresh and revision_number(deployment) == known[update],
        )

    def settled(self) -> bool:
        """The Deployment's record reflects its spec and names the newest ReplicaSet as its revision."""
        numbers = [n for n in (revision_number(rs) for rs in self.revisions.values()) if n is not None]
        return super().settled() and bool(numbers) and revision_number(self.workload or {}) == max(numbers)

    def step(self, target: Target) -> Step | None:
        new = self.revisions.get(target.update)
        if new is None:
            return None
        updated = desired(new)
        surge, unavailable = surge_and_unavailable(target.strategy, target.replicas)
        return Step(
            partition=max(target.replicas - updated, 0),
            replicas=target.replicas,
            expected_updated=updated,
            max_unavailable=unavailable,
            max_surge=surge,
        )
