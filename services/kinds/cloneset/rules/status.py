"""The status the CloneSet should report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.kinds.cloneset.rules import progress_deadline
from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.names import REJECTED_CONDITION
from services.kinds.cloneset.rules.podstate import parse_time
from services.model import intorpercent
from services.model.actions import ActionKind
from services.model.events import StoreLossDetected

# OpenKruise's CloneSet conditions for a failed scale / update step (docs/plan.md, "Status"). The pure
# planner never sees action outcomes; the planner service adds these to the status it plans.
FAILED_SCALE = "FailedScale"
FAILED_UPDATE = "FailedUpdate"
# Which executor actions are a scale step and which an update step, as OpenKruise splits its sync into
# Scale (create/delete pods and their PVCs) and Update (in-place update, specified-delete patch for a
# recreate, InPlaceUpdateReady condition writes, lifecycle label moves). setPodsToDelete (OpenKruise's
# truncatePodsToDelete) only logs there, so it sets neither condition.
ACTION_CLASSES: dict[str, str] = {
    ActionKind.CREATE_PVC: FAILED_SCALE,
    ActionKind.CREATE_POD: FAILED_SCALE,
    ActionKind.DELETE_POD: FAILED_SCALE,
    ActionKind.DELETE_PVC: FAILED_SCALE,
    ActionKind.UPDATE_IN_PLACE: FAILED_UPDATE,
    ActionKind.RESIZE: FAILED_UPDATE,
    ActionKind.RECREATE_POD: FAILED_UPDATE,
    ActionKind.MARK_NOT_READY: FAILED_UPDATE,
    ActionKind.MARK_READY: FAILED_UPDATE,
    ActionKind.PATCH_POD: FAILED_UPDATE,
}
FAILURE_CONDITIONS = (FAILED_SCALE, FAILED_UPDATE)


@dataclass(frozen=True)
class ActionOutcome:
    """A pod action's terminal outcome as the planner folded it (PodActionSucceeded / PodActionFailed)."""

    action: str  # createPod, updateInPlace, ...
    target: str  # the pod (or PVC) acted on
    failed: bool
    at: datetime  # the outcome event's occurred_at
    reason: str = ""  # the executor's message, for a failure


def condition_time(moment: datetime) -> str:
    """Whole seconds in UTC, as Kubernetes writes condition times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def failure_conditions(previous: Sequence[Any], outcomes: Sequence[ActionOutcome]) -> list[dict[str, Any]]:
    """The FailedScale / FailedUpdate conditions to report (in that order), from the ones planned last
    (``previous``, any list of conditions) and the outcomes that arrived since (in arrival order).

    Per class: any failure among the new outcomes makes the condition True with the latest failure's
    message (lastTransitionTime kept while it stays True, else the first new failure's time); new
    outcomes that all succeeded turn a True condition False (at the first success's time); no new
    outcome of the class keeps the previous condition as it was. A class that never failed reports none.
    """
    before = {
        c.get("type"): c for c in previous if isinstance(c, dict) and c.get("type") in FAILURE_CONDITIONS
    }
    result: list[dict[str, Any]] = []
    for kind in FAILURE_CONDITIONS:
        old = before.get(kind)
        mine = [o for o in outcomes if ACTION_CLASSES.get(o.action) == kind]
        failures = [o for o in mine if o.failed]
        was_true = old is not None and old.get("status") == "True"
        condition: dict[str, Any] | None = old
        if failures:
            last = failures[-1]
            since = old.get("lastTransitionTime") if was_true and old else condition_time(failures[0].at)
            condition = {
                "type": kind,
                "status": "True",
                "reason": _reason(last.action, "Failed"),
                "message": f"{last.action} {last.target}: {last.reason}",
                "lastTransitionTime": since,
            }
        elif mine and was_true:
            first = mine[0]
            condition = {
                "type": kind,
                "status": "False",
                "reason": _reason(first.action, "Succeeded"),
                "message": f"{first.action} {first.target} succeeded",
                "lastTransitionTime": condition_time(first.at),
            }
        if condition is not None:
            result.append(condition)
    return result


def with_failure_conditions(status: dict[str, Any], failed: list[dict[str, Any]]) -> dict[str, Any]:
    """``status`` with its FailedScale / FailedUpdate conditions replaced by ``failed`` (after the others)."""
    current = status.get("conditions") or []
    kept = [c for c in current if not (isinstance(c, dict) and c.get("type") in FAILURE_CONDITIONS)]
    if not failed and len(kept) == len(current):
        return status
    return {**status, "conditions": kept + failed}


# Reported while the CloneSet's record lacks events a database failover lost for good (docs/reliability.md).
EVENTS_LOST = "EventsLost"
_ACTIONS_NAMED = 5


def loss_condition(losses: Sequence[StoreLossDetected]) -> dict[str, Any] | None:
    """The ``EventsLost`` condition naming what the auditor's ``StoreLossDetected`` records say was lost
    for good (None without one): how many events, and the pod actions carried out whose record is gone.
    Its time is the first record's detection, never a clock, so replay reproduces it."""
    if not losses:
        return None
    events = sum(len(loss.unrecoverable) for loss in losses)
    actions = [action for loss in losses for action in loss.actions_applied]
    named = ", ".join(
        f"{a.get('action') or 'action'} {a.get('pod') or a.get('pod_uid') or '?'} ({a.get('action_id')})"
        for a in actions[:_ACTIONS_NAMED]
    )
    more = f" and {len(actions) - _ACTIONS_NAMED} more" if len(actions) > _ACTIONS_NAMED else ""
    carried = f"; carried out, their record gone: {named}{more}" if actions else ""
    return {
        "type": EVENTS_LOST,
        "status": "True",
        "reason": "DatabaseFailover",
        "message": f"a database failover lost {events} event(s) of this CloneSet for good{carried}"
        " (rollbook audit verify names them)",
        "lastTransitionTime": condition_time(losses[0].detected_at),
    }


def with_loss_condition(status: dict[str, Any], losses: Sequence[StoreLossDetected]) -> dict[str, Any]:
    """``status`` with the ``EventsLost`` condition of ``losses`` (after the others), if any."""
    condition = loss_condition(losses)
    if condition is None:
        return status
    current = [
        c
        for c in status.get("conditions") or []
        if not (isinstance(c, dict) and c.get("type") == EVENTS_LOST)
    ]
    return {**status, "conditions": [*current, condition]}


def _reason(action: str, outcome: str) -> str:
    return f"{action[:1].upper()}{action[1:]}{outcome}"


def label_selector_string(selector: dict[str, Any]) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, for the scale subresource (HPA)."""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr["key"], expr["operator"]
        values = ",".join(sorted(expr.get("values") or []))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }[operator]
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts))


def conditions(previous: list[Any], now_text: str, rejected: tuple[str, str] | None) -> list[dict[str, Any]]:
    """Keep other controllers' conditions; set or clear rollbook's Rejected condition."""
    kept = [c for c in previous if isinstance(c, dict) and c.get("type") != REJECTED_CONDITION]
    if rejected is None:
        return kept
    field, reason = rejected
    message = f"{field}: {reason}"
    old = next((c for c in previous if isinstance(c, dict) and c.get("type") == REJECTED_CONDITION), None)
    since = old.get("lastTransitionTime") if old and old.get("message") == message else now_text
    kept.append(
        {
            "type": REJECTED_CONDITION,
            "status": "True",
            "reason": "InvalidSpec",
            "message": message,
            "lastTransitionTime": since,
        }
    )
    return kept


def compute(ctx: Context) -> tuple[dict[str, Any], int | None]:
    """The status, and when to be asked again for the progress deadline (None: no need)."""
    spec = ctx.spec
    min_ready, now = spec.min_ready_seconds, ctx.now
    replicas = ready = available = updated = updated_ready = updated_available = 0
    all_updated = True
    update_hash = ctx.update_hash
    for pod in ctx.pods:
        replicas += 1
        is_ready = pod.counts_ready()
        is_available = pod.cs_available(min_ready, now)
        ready += is_ready
        available += is_available
        if pod.revision_hash == update_hash and ctx.runs_update(pod):
            updated += 1
            updated_ready += is_ready
            updated_available += is_available
        else:
            all_updated = False
    revisions = ctx.revisions
    current = revisions.current
    if all_updated and replicas == spec.replicas:
        current = revisions.update
    previous = ctx.cloneset_status
    reported: dict[str, Any] = {
        "observedGeneration": spec.generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": available,
        "updatedReplicas": updated,
        "updatedReadyReplicas": updated_ready,
        "updatedAvailableReplicas": updated_available,
        "expectedUpdatedReplicas": intorpercent.expected_updated(spec.replicas, spec.partition),
        "updateRevision": revisions.update.name,
        "currentRevision": current.name,
        "collisionCount": revisions.collision_count,
        "labelSelector": label_selector_string(spec.selector),
        "conditions": conditions(previous.get("conditions") or [], ctx.now_text, None),
    }
    progress = progress_deadline.progressing(
        reported["conditions"],
        reported,
        deadline_seconds=spec.progress_deadline_seconds,
        replicas=spec.replicas,
        paused=spec.paused,
        now=ctx.now,
        now_text=ctx.now_text,
        parse_time=parse_time,
    )
    reported["conditions"] = progress.conditions
    return reported, progress.requeue_after
