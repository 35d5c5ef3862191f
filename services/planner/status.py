"""The status the CloneSet should report (semantics CS-22)."""

from __future__ import annotations

from typing import Any

from services.planner.context import Context
from services.planner.names import REJECTED_CONDITION


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


def compute(ctx: Context) -> dict[str, Any]:
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
        if pod.revision_hash == update_hash:
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
    return {
        "observedGeneration": spec.generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": available,
        "updatedReplicas": updated,
        "updatedReadyReplicas": updated_ready,
        "updatedAvailableReplicas": updated_available,
        "expectedUpdatedReplicas": spec.replicas - spec.partition,
        "updateRevision": revisions.update.name,
        "currentRevision": current.name,
        "collisionCount": revisions.collision_count,
        "labelSelector": label_selector_string(spec.selector),
        "conditions": conditions(previous.get("conditions") or [], ctx.now_text, None),
    }
