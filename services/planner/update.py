"""The update step (semantics CS-17..CS-21): refresh in-place states, pick candidates, apply the budget."""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from typing import Any

from services.model import labels as selectors
from services.planner import inplace
from services.planner.context import Context
from services.planner.counting import Classes, Diffs
from services.planner.model import Action, MarkNotReady, MarkReady, RecreatePod, UpdateInPlace
from services.planner.names import INPLACE_GRACE_ANNOTATION, SPECIFIED_DELETE_LABEL
from services.planner.podstate import PodView, format_time_precise, parse_time
from services.planner.revisions import hash_part
from services.planner.spec import RECREATE

_TRAILING_INT = re.compile(r"(\d+)$")


@dataclass(slots=True)
class StepResult:
    actions: list[Action] = field(default_factory=list)
    requeue: list[int] = field(default_factory=list)


def refresh(ctx: Context) -> StepResult:
    """Advance pods already in an in-place update: grace expiry, completion, readiness-gate init."""
    result = StepResult()
    # Only pods with in-place work or an unset readiness gate can need a refresh; most pods have neither.
    pending = [
        p for p in ctx.pods if p.inplace_ready is not True or INPLACE_GRACE_ANNOTATION in p.annotations
    ]
    for pod in sorted(pending, key=lambda p: p.name):
        grace = pod.inplace_grace
        if grace is not None:
            _refresh_grace(ctx, pod, grace, result)
            continue
        if pod.inplace_ready is False:
            state = pod.inplace_state
            if (
                state
                and hash_part(str(state.get("revision", ""))) == pod.revision_hash
                and not inplace.update_complete(pod.obj, state)
            ):
                continue  # the kubelet is still recreating the container
            reason = "InPlaceUpdateCompleted" if state else "Recovered"
            result.actions.append(
                MarkReady(
                    pod=pod.name,
                    condition=inplace.condition(True, reason, ctx.now_text),
                    reason="in-place update finished" if state else "readiness gate reset",
                )
            )
        elif pod.inplace_ready is None and pod.has_inplace_gate:
            result.actions.append(
                MarkReady(
                    pod=pod.name,
                    condition=inplace.condition(True, "PodCreated", ctx.now_text),
                    reason="initialise the InPlaceUpdateReady readiness gate",
                )
            )
    return result


def _refresh_grace(ctx: Context, pod: PodView, grace: dict[str, Any], result: StepResult) -> None:
    update = ctx.revisions.update
    change = ctx.change_for(pod)
    pending = hash_part(str(grace.get("revision", ""))) == update.hash and not ctx.is_updated(pod)
    if pending and change is not None and change.in_place:
        marked = parse_time(grace.get("markedAt")) or ctx.now
        seconds = grace.get("graceSeconds")
        seconds = seconds if isinstance(seconds, int) else ctx.spec.grace_period_seconds
        remaining = marked + seconds - ctx.now
        if remaining > 0:
            result.requeue.append(math.ceil(remaining))
            return
        result.actions.append(_update_in_place(ctx, pod, change, "grace period over"))
        return
    result.actions.append(
        MarkReady(
            pod=pod.name,
            condition=inplace.condition(True, "InPlaceUpdateSuperseded", ctx.now_text),
            patch=inplace.clear_grace_patch(),
            reason="the pending in-place update no longer applies",
        )
    )


def _update_in_place(ctx: Context, pod: PodView, change: inplace.Change, reason: str) -> UpdateInPlace:
    update = ctx.revisions.update
    revision = ctx.revisions.by_hash[pod.revision_hash]
    patch = inplace.update_patch(
        pod.obj, change, revision.template, update.name, ctx.update_hash, ctx.now_text
    )
    return UpdateInPlace(
        pod=pod.name,
        revision=update.name,
        patch=patch,
        change=inplace.CLASS_NAMES[change.kind],
        restart_containers=list(change.restart),
        reason=reason,
    )


def _priority_key(strategy: dict[str, Any] | None) -> Any:
    if not strategy:
        return None
    weights = strategy.get("weightPriority") or []
    orders = strategy.get("orderPriority") or []
    if weights:

        def weight_key(pod: PodView) -> Any:
            return -sum(
                t.get("weight", 0) for t in weights if selectors.matches(t.get("matchSelector"), pod.labels)
            )

        return weight_key
    if orders:

        def order_key(pod: PodView) -> Any:
            for level, term in enumerate(orders):
                value = pod.labels.get(term.get("orderedKey", ""))
                if value is not None:
                    match = _TRAILING_INT.search(value)
                    return (level, -(int(match.group(1)) if match else 0))
            return (len(orders), 0)  # pods with none of the keys go last (OpenKruise leaves this untested)

        return order_key
    return None


def candidates(ctx: Context, wanted: int | None = None) -> list[PodView]:
    """Old pods that may be updated, in OpenKruise's order (G-4, then priorityStrategy), first ``wanted``."""
    named = set(ctx.spec.pods_to_delete)
    update_hash = ctx.update_hash
    pods = [
        p
        for p in ctx.pods
        if p.revision_hash != update_hash
        and p.lifecycle != "PreparingDelete"
        and not p.specified_delete
        and p.name not in named
        and p.inplace_grace is None
    ]
    priority = _priority_key(ctx.spec.priority_strategy)
    # The priority re-sort is stable over the G-4 order, i.e. one sort on (priority, G-4 key).
    key = PodView.active_order_key if priority is None else lambda p: (priority(p), p.active_order_key())
    if wanted is not None and wanted < len(pods) // 4:
        return heapq.nsmallest(wanted, pods, key=key)  # O(n log k): only the head of the order is walked
    pods.sort(key=key)
    return pods if wanted is None else pods[:wanted]


def update_step(ctx: Context, classes: Classes, diffs: Diffs) -> StepResult:
    result = refresh(ctx)
    if result.actions or ctx.spec.paused or diffs.update_num <= 0:
        return result
    spec = ctx.spec
    limit = diffs.update_max_unavailable
    unavailable = classes.unavailable_all
    # Pods at the target that are not available yet, plus old pods already on their way there.
    busy = classes.unavailable_new + classes.in_flight_old
    chosen: list[PodView] = []
    # The walk stops after at most `limit` available candidates; unavailable ones cost nothing.
    wanted = min(diffs.update_num, unavailable + limit + 1)
    for pod in candidates(ctx, wanted):
        if busy + len(chosen) >= limit:
            break
        if pod.cs_available(spec.min_ready_seconds, ctx.now):
            if unavailable >= limit:
                break
            unavailable += 1
        chosen.append(pod)
    shared = _SharedPayloads.of(ctx)
    for pod in chosen:
        _update_pod(ctx, pod, shared, result)
    return result


@dataclass(frozen=True, slots=True)
class _SharedPayloads:
    """Payloads identical for every pod updated in a round, built once and shared by their actions
    (action payloads are immutable values; the encoded plan is the same bytes)."""

    recreate_patch: dict[str, Any]
    not_ready: dict[str, Any]
    grace_patch: dict[str, Any] | None

    @classmethod
    def of(cls, ctx: Context) -> _SharedPayloads:
        grace_seconds = ctx.spec.grace_period_seconds
        grace = None
        if grace_seconds > 0:
            grace = inplace.grace_patch(
                ctx.revisions.update.name, grace_seconds, format_time_precise(ctx.now)
            )
        return cls(
            recreate_patch={"metadata": {"labels": {SPECIFIED_DELETE_LABEL: "true"}}},
            not_ready=inplace.condition(False, "StartInPlaceUpdate", ctx.now_text),
            grace_patch=grace,
        )


def _update_pod(ctx: Context, pod: PodView, shared: _SharedPayloads, result: StepResult) -> None:
    spec = ctx.spec
    update = ctx.revisions.update
    change = None if spec.update_type == RECREATE else ctx.change_for(pod)
    if change is None or not change.in_place:
        result.actions.append(
            RecreatePod(
                pod=pod.name,
                revision=update.name,
                patch=shared.recreate_patch,
                reason="recreate update"
                if spec.update_type == RECREATE
                else "change cannot be applied in place",
            )
        )
        return
    if change.kind < inplace.REBUILD:
        result.actions.append(_update_in_place(ctx, pod, change, "in-place update, no container restart"))
        return
    if shared.grace_patch is not None:
        result.actions.append(
            MarkNotReady(
                pod=pod.name,
                condition=shared.not_ready,
                revision=update.name,
                patch=shared.grace_patch,
                reason=f"in-place update after a {spec.grace_period_seconds}s grace period",
            )
        )
        result.requeue.append(spec.grace_period_seconds)
        return
    result.actions.append(
        MarkNotReady(pod=pod.name, condition=shared.not_ready, revision=update.name, reason="in-place update")
    )
    result.actions.append(_update_in_place(ctx, pod, change, "in-place update"))
