"""The update step (OpenKruise pkg/controller/cloneset/sync/cloneset_update.go): refresh in-place states and
lifecycle labels, pick candidates, apply the budget, start in-place updates or mark pods for recreation."""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from typing import Any

from services.kinds.cloneset.rules import inplace, lifecycle, resize
from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.counting import Classes, Diffs
from services.kinds.cloneset.rules.model import (
    Action,
    MarkNotReady,
    MarkReady,
    PatchPod,
    RecreatePod,
    ResizePod,
    UpdateInPlace,
)
from services.kinds.cloneset.rules.names import (
    INPLACE_GRACE_ANNOTATION,
    INPLACE_GRACE_ANNOTATION_OLD,
    KRUISE_POD_READY_CONDITION,
    SPECIFIED_DELETE_LABEL,
)
from services.kinds.cloneset.rules.podstate import PodView, format_time, parse_time
from services.kinds.cloneset.rules.revisions import hash_part
from services.kinds.cloneset.rules.scatter import scatter
from services.kinds.cloneset.rules.spec import IN_PLACE_ONLY, ON_DELETE, RECREATE
from services.model import labels as selectors

_TRAILING_INT = re.compile(r"(\d+)$")


@dataclass(slots=True)
class StepResult:
    actions: list[Action] = field(default_factory=list)
    requeue: list[int] = field(default_factory=list)
    lifecycle_moved: bool = False  # a lifecycle label was patched: the update step ends with the refresh
    refreshed: set[str] = field(default_factory=set)  # pods the refresh wrote to this round


def refresh(ctx: Context) -> StepResult:
    """The per-pod refresh that opens the update step (OpenKruise ``refreshPodState`` and
    ``inplaceupdate.Refresh``): grace periods run out, finished in-place updates get
    ``InPlaceUpdateReady=True``, the lifecycle label moves. It runs even when paused."""
    result = StepResult()
    spec = ctx.spec
    watch_kruise_gate = _marks_not_ready(spec.lifecycle)
    # Only pods with in-place work, an unset readiness condition or a lifecycle state to move can need a
    # refresh; most pods (Normal, InPlaceUpdateReady True) have none of these.
    pending = [
        p
        for p in ctx.pods
        if p.inplace_ready is not True
        or p.lifecycle not in _SETTLED
        or INPLACE_GRACE_ANNOTATION in p.annotations
        or INPLACE_GRACE_ANNOTATION_OLD in p.annotations
        or (watch_kruise_gate and p.kruise_pod_ready is None and p.has_gate(KRUISE_POD_READY_CONDITION))
    ]
    for pod in sorted(pending, key=lambda p: p.name):
        _refresh_pod(ctx, pod, result)
    return result


_SETTLED = frozenset({"", lifecycle.NORMAL})


def resize_stall(pod: PodView, state: dict[str, Any], now: float) -> tuple[str, float]:
    """A started resize that is not actuated: ("", seconds to wait) while it may still be; (why, 0) once it
    will not be: Infeasible, Deferred longer than the bound, or not even written within it."""
    targets = state.get(inplace.RESIZE_STATE_KEY)
    if not isinstance(targets, dict) or not targets:
        return "", 0.0
    pending = resize.pending(pod.obj)
    if pending is not None and pending.get("reason") == resize.INFEASIBLE:
        return f"resize Infeasible: {pending.get('message', '')}", 0.0
    if pending is not None:
        since = parse_time(pending.get("lastTransitionTime"))
        what = f"resize Deferred over {resize.DEFERRED_BOUND_SECONDS}s: {pending.get('message', '')}"
    else:
        specs = {c.get("name"): c for c in (pod.obj.get("spec") or {}).get("containers") or []}
        if all(resize.same((specs.get(n) or {}).get("resources"), t) for n, t in targets.items()):
            return "", 0.0  # written, being actuated: the kubelet decides
        since = parse_time(state.get("updateTimestamp"))
        what = f"resize not written within {resize.DEFERRED_BOUND_SECONDS}s"
    remaining = (since if since is not None else now) + resize.DEFERRED_BOUND_SECONDS - now
    return ("", remaining) if remaining > 0 else (what, 0.0)


def _resize_stalled(ctx: Context, pod: PodView, state: dict[str, Any], result: StepResult) -> bool:
    """Under InPlaceIfPossible a resize that will not happen recreates the pod (True); under InPlaceOnly
    the plan is refused instead (plan.py), so nothing is done here."""
    why, wait = resize_stall(pod, state, ctx.now)
    if not why:
        if wait > 0:
            result.requeue.append(math.ceil(wait))
        return False
    if ctx.spec.update_type == IN_PLACE_ONLY or pod.specified_delete:
        return False
    result.actions.append(
        RecreatePod(
            pod=pod.name,
            revision=ctx.revisions.update.name,
            patch={"metadata": {"labels": {SPECIFIED_DELETE_LABEL: "true"}}},
            reason=f"{why}; recreated instead (InPlaceIfPossible)",
        )
    )
    result.refreshed.add(pod.name)
    return True


def _marks_not_ready(spec_lifecycle: lifecycle.Lifecycle | None) -> bool:
    if spec_lifecycle is None:
        return False
    hooks = (spec_lifecycle.pre_delete, spec_lifecycle.in_place_update)
    return any(h is not None and h.mark_not_ready for h in hooks)


def _refresh_pod(ctx: Context, pod: PodView, result: StepResult) -> None:
    now_text = ctx.now_text
    actions: list[Action] = []
    grace = pod.inplace_grace
    state = pod.inplace_state
    complete = False
    if grace is not None:
        if hash_part(str(grace.get("revision", ""))) != pod.revision_hash:
            # Someone moved the pod to another revision: the record no longer applies, the pod goes
            # through candidate selection again.
            actions.append(
                PatchPod(
                    pod=pod.name,
                    patch=inplace.drop_grace_patch(),
                    reason="the pending in-place update no longer matches the pod's revision",
                )
            )
        elif state is not None:
            started = parse_time(state.get("updateTimestamp"))
            seconds = grace.get("graceSeconds")
            seconds = seconds if isinstance(seconds, int) else 0
            remaining = (started if started is not None else ctx.now) + seconds - ctx.now
            if remaining > 0:
                result.requeue.append(math.ceil(remaining))
            else:
                patch = inplace.grace_expiry_patch(pod.obj, grace, state, now_text)
                images = (grace.get("containerImages") or {}) if isinstance(grace, dict) else {}
                actions.append(
                    UpdateInPlace(
                        pod=pod.name,
                        revision=str(grace.get("revision", "")),
                        patch=patch,
                        change=inplace.CLASS_NAMES[inplace.REBUILD],
                        restart_containers=sorted(images) if isinstance(images, dict) else [],
                        reason="grace period over",
                    )
                )
    else:
        complete = state is None or inplace.update_complete(pod.obj, state)
        if not complete and state is not None and _resize_stalled(ctx, pod, state, result):
            return
        if complete and pod.inplace_ready is not True and pod.has_inplace_gate:
            reason = "InPlaceUpdateCompleted" if state else "PodCreated"
            actions.append(
                MarkReady(
                    pod=pod.name,
                    condition=inplace.condition(True, reason, now_text),
                    reason="in-place update finished"
                    if state
                    else "initialise the InPlaceUpdateReady readiness gate",
                )
            )
    kruise_ready = pod.kruise_pod_ready
    if (
        kruise_ready is None
        and _marks_not_ready(ctx.spec.lifecycle)
        and pod.has_gate(KRUISE_POD_READY_CONDITION)
    ):
        # What OpenKruise's pod-readiness controller does for a pod whose KruisePodReady is unset.
        kruise_ready = {"type": KRUISE_POD_READY_CONDITION, "status": "True", "lastTransitionTime": now_text}
        actions.append(
            MarkReady(
                pod=pod.name, condition=kruise_ready, reason="initialise the KruisePodReady readiness gate"
            )
        )
    spec_lifecycle = ctx.spec.lifecycle
    target = lifecycle.refreshed_state(
        pod.lifecycle,
        spec_lifecycle,
        scheduled=bool(pod.node),
        at_update_revision=ctx.is_updated(pod),
        update_complete=complete,
        labels=pod.labels,
        finalizers=pod.finalizers,
    )
    if target is not None:
        move = lifecycle.state_patch(target, now_text)
        why = f"lifecycle {pod.lifecycle or 'unset'} -> {target}"
        hook = spec_lifecycle.in_place_update if spec_lifecycle is not None else None
        removed = None
        if target == lifecycle.UPDATED and hook is not None and hook.mark_not_ready:
            if pod.has_gate(KRUISE_POD_READY_CONDITION):
                removed = lifecycle.not_ready_key_removed(kruise_ready, lifecycle.PRE_UPDATE_KEY, now_text)
        if removed is not None:
            actions.append(MarkReady(pod=pod.name, condition=removed, patch=move, reason=why))
        elif actions and isinstance(actions[-1], MarkReady) and actions[-1].patch is None:
            last = actions.pop()
            assert isinstance(last, MarkReady)
            actions.append(
                MarkReady(pod=pod.name, condition=last.condition, patch=move, reason=f"{last.reason}; {why}")
            )
        else:
            actions.append(PatchPod(pod=pod.name, patch=move, reason=why))
        result.lifecycle_moved = True
    if actions:
        result.actions.extend(actions)
        result.refreshed.add(pod.name)


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


def candidates(ctx: Context, wanted: int | None = None, skip: set[str] | None = None) -> list[PodView]:
    """Old pods that may be updated, in OpenKruise's order (``SortUpdateIndexes``: the default order,
    then priorityStrategy, then scatterStrategy, then pods in PreparingUpdate first), first ``wanted``.

    Skipped: pods in PreparingDelete, pods in a grace period (unless Updated), pods marked for deletion or
    named in podsToDelete (already on their way), and ``skip`` (pods the refresh wrote to this round)."""
    named = set(ctx.spec.pods_to_delete)
    update_hash = ctx.update_hash
    skip = skip or set()
    pods = [
        p
        for p in ctx.pods
        if p.revision_hash != update_hash
        and p.lifecycle != lifecycle.PREPARING_DELETE
        and not p.specified_delete
        and p.name not in named
        and (p.lifecycle == lifecycle.UPDATED or p.inplace_grace is None)
        and p.name not in skip
    ]
    priority = _priority_key(ctx.spec.priority_strategy)
    if ctx.spec.scatter_strategy:
        # Scattering reorders the whole list: sort it all, then cut.
        pods.sort(
            key=PodView.active_order_key
            if priority is None
            else lambda p: (priority(p), p.active_order_key())
        )
        pods = scatter(pods, ctx.pods, ctx.spec.scatter_strategy, lambda p: p.labels)
        pods.sort(key=lambda p: 0 if p.lifecycle == lifecycle.PREPARING_UPDATE else 1)  # stable
        return pods if wanted is None else pods[:wanted]
    preparing_first = any(p.lifecycle == lifecycle.PREPARING_UPDATE for p in pods)
    if priority is None and not preparing_first:
        key: Any = PodView.active_order_key
    else:
        # The priority re-sort is stable over the default order, and so is "PreparingUpdate first": one
        # sort on (PreparingUpdate, priority, default key).
        def key(p: PodView) -> Any:
            return (
                0 if p.lifecycle == lifecycle.PREPARING_UPDATE else 1,
                priority(p) if priority is not None else 0,
                p.active_order_key(),
            )

    if wanted is not None and wanted < len(pods) // 4:
        return heapq.nsmallest(wanted, pods, key=key)  # O(n log k): only the head of the order is walked
    pods.sort(key=key)
    return pods if wanted is None else pods[:wanted]


def update_step(ctx: Context, classes: Classes, diffs: Diffs) -> StepResult:
    result = refresh(ctx)
    # OnDelete: the refresh runs (lifecycle moves, InPlaceUpdateReady), then nothing is chosen, marked or
    # updated: pods reach the new revision when they are deleted and re-created (as master, 58a5d52f).
    if result.lifecycle_moved or ctx.spec.paused or ctx.spec.update_type == ON_DELETE:
        return result
    if diffs.update_num <= 0:
        return result
    spec = ctx.spec
    limit = diffs.update_max_unavailable
    unavailable = classes.unavailable_all
    # Pods at the target that are not available yet, plus old pods already on their way there.
    busy = classes.unavailable_new + classes.in_flight_old
    chosen: list[PodView] = []
    charged = 0  # chosen pods that leave service (a resize without a restart keeps the pod ready)
    keeps_ready: dict[str, bool] = {}

    def stays_ready(pod: PodView) -> bool:
        key = ctx.change_key(pod)
        if key not in keeps_ready:
            change = None if spec.update_type == RECREATE else ctx.change_for(pod)
            keeps_ready[key] = (
                change is not None and change.in_place and bool(change.resize) and not change.restarts
            )
        return keeps_ready[key] and ctx.in_place(
            pod, ctx.change_for(pod) or inplace.Change(kind=inplace.STATIC)
        )

    # The walk stops after at most `limit` available candidates; unavailable ones cost nothing; nor do
    # pods whose change is a resize that restarts nothing (it counts against maxUnavailable only while a
    # pod is not ready, and such a pod stays ready).
    free = any(stays_ready(p) for p in ctx.pods if p.revision_hash != ctx.update_hash)
    wanted = diffs.update_num if free else min(diffs.update_num, unavailable + limit + 1)
    for pod in candidates(ctx, wanted, result.refreshed):
        if free and stays_ready(pod) and pod.cs_available(spec.min_ready_seconds, ctx.now):
            chosen.append(pod)
            continue
        if busy + charged >= limit:
            if free:
                continue
            break
        if pod.cs_available(spec.min_ready_seconds, ctx.now):
            if unavailable >= limit:
                if free:
                    continue
                break
            unavailable += 1
        charged += 1
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
    updating: dict[str, Any]

    @classmethod
    def of(cls, ctx: Context) -> _SharedPayloads:
        return cls(
            recreate_patch={"metadata": {"labels": {SPECIFIED_DELETE_LABEL: "true"}}},
            not_ready=inplace.condition(False, "StartInPlaceUpdate", ctx.now_text),
            updating=lifecycle.state_patch(lifecycle.UPDATING, ctx.now_text),
        )


def _update_pod(ctx: Context, pod: PodView, shared: _SharedPayloads, result: StepResult) -> None:
    spec = ctx.spec
    update = ctx.revisions.update
    change = None if spec.update_type == RECREATE else ctx.change_for(pod)
    if change is None or not ctx.in_place(pod, change):
        # Recreation does not consult the lifecycle: the preDelete hook applies when the pod is deleted.
        if spec.update_type == RECREATE:
            why = "recreate update"
        elif change is not None and change.in_place:
            why = "change cannot be applied in place: the pod's node does not resize pods (pods/resize)"
        else:
            why = "change cannot be applied in place"
        result.actions.append(
            RecreatePod(pod=pod.name, revision=update.name, patch=shared.recreate_patch, reason=why)
        )
        return
    if not _released_for_in_place(ctx, pod, result):
        return
    old_template = ctx.old_template(pod)
    assert old_template is not None  # change_for found it
    grace = spec.grace_period_seconds if change.kind >= inplace.REBUILD else 0
    # With a grace period the start time is rounded up to the whole second it is written in, so the
    # grace period measured from it is never cut short.
    stamp = format_time(math.ceil(ctx.now)) if grace > 0 else ctx.now_text
    patch = inplace.start_patch(
        pod.obj,
        change,
        old_template,
        update.name,
        ctx.update_hash,
        stamp,
        shared.updating,
        grace,
        spec.extended_inplace,
    )
    if change.kind < inplace.REBUILD and not change.resize_restart:
        result.actions.append(
            UpdateInPlace(
                pod=pod.name,
                revision=update.name,
                patch=patch,
                change=change.class_name,
                reason="in-place update, no container restart",
            )
        )
        _add_resize(result, pod, change, update.name)
        return
    if grace > 0:
        result.actions.append(
            MarkNotReady(
                pod=pod.name,
                condition=shared.not_ready,
                revision=update.name,
                patch=patch,
                reason=f"in-place update after a {grace}s grace period",
            )
        )
        _add_resize(result, pod, change, update.name)
        result.requeue.append(grace)
        return
    # No grace period: InPlaceUpdateReady=False and the spec in one action, the condition first (OpenKruise
    # writes both in one reconcile), so the pod leaves service before its containers restart.
    result.actions.append(
        UpdateInPlace(
            pod=pod.name,
            revision=update.name,
            patch=patch,
            change=change.class_name,
            restart_containers=list(change.restart),
            not_ready=shared.not_ready,
            reason="in-place update",
        )
    )
    _add_resize(result, pod, change, update.name)


def _add_resize(result: StepResult, pod: PodView, change: inplace.Change, revision: str) -> None:
    """The resize after the start patch (same round, so the executor runs it after that patch)."""
    if not change.resize:
        return
    restart = sorted(change.resize_restart)
    result.actions.append(
        ResizePod(
            pod=pod.name,
            revision=revision,
            resources=change.resize,
            restart_containers=restart,
            reason="resize in place"
            + (f", restarting {', '.join(restart)} (resizePolicy RestartContainer)" if restart else ""),
        )
    )


def _released_for_in_place(ctx: Context, pod: PodView, result: StepResult) -> bool:
    """The lifecycle gate before an in-place update (OpenKruise ``updatePod``): True when the pod may be
    updated now; otherwise the move it needs is added to ``result`` (or it waits) and False."""
    spec_lifecycle = ctx.spec.lifecycle
    hook = spec_lifecycle.in_place_update if spec_lifecycle is not None else None
    state = pod.lifecycle
    held = spec_lifecycle is not None and lifecycle.hooked(hook, pod.labels, pod.finalizers)
    if state in ("", lifecycle.PREPARING_NORMAL, lifecycle.NORMAL):
        if held:
            _enter_preparing_update(ctx, pod, result, None, "inPlaceUpdate hook holds the pod")
            return False
        return True
    if state == lifecycle.UPDATED:
        # Chosen again for a newer revision: back to PreparingUpdate, the hook's labels and finalizers put
        # back in the same patch; it then waits for release like any PreparingUpdate pod.
        if hook is not None:
            _enter_preparing_update(
                ctx, pod, result, hook, "updated pod chosen again: inPlaceUpdate hook re-armed"
            )
        return False
    if state == lifecycle.PREPARING_UPDATE:
        return not held  # still hooked: it waits, keeping its slot of the budget
    return state == lifecycle.UPDATING  # any other state cannot be updated in place


def _enter_preparing_update(
    ctx: Context, pod: PodView, result: StepResult, handler: lifecycle.Hook | None, why: str
) -> None:
    hook = ctx.spec.lifecycle.in_place_update if ctx.spec.lifecycle is not None else None
    move = lifecycle.state_patch(lifecycle.PREPARING_UPDATE, ctx.now_text, handler)
    condition = None
    if hook is not None and hook.mark_not_ready and pod.has_gate(KRUISE_POD_READY_CONDITION):
        condition = lifecycle.not_ready_key_added(
            pod.kruise_pod_ready, lifecycle.PRE_UPDATE_KEY, ctx.now_text
        )
    reason = f"lifecycle {pod.lifecycle or 'unset'} -> PreparingUpdate: {why}"
    if condition is not None:
        result.actions.append(MarkNotReady(pod=pod.name, condition=condition, patch=move, reason=reason))
    else:
        result.actions.append(PatchPod(pod=pod.name, patch=move, reason=reason))
