"""The planner's entry point: one reconcile round as a pure function of its input.

No I/O, no wall clock, no randomness: the time and every object come in ``PlanInput``; ids are derived
from the input. Same input, same ``Plan``, byte for byte (``plan_json``).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Any

import msgspec

from services.kinds.cloneset.rules import counting, lifecycle, revisions, scale, status, update
from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.model import Action, HookHold, Plan, PlanInput, Rejection
from services.kinds.cloneset.rules.names import REVISION_LABEL
from services.kinds.cloneset.rules.podstate import PodViews, format_time
from services.kinds.cloneset.rules.spec import IN_PLACE_ONLY, resolve
from services.model import cloneset_validation as validation
from services.model import intorpercent
from services.model.cloneset_conversion import ConversionError, as_v1alpha1

_decoder = msgspec.json.Decoder(PlanInput)
_encoder = msgspec.json.Encoder(order="deterministic")


def plan(request: PlanInput, *, views: PodViews | None = None) -> Plan:
    """The round's plan. ``views``: the workload's pod views kept between its rounds (``PodViews``); the
    plan is the same with or without them."""
    with _gc_paused():
        return _plan(request, views)


def _plan(request: PlanInput, views: PodViews | None = None) -> Plan:
    now_moment = request.now if request.now.tzinfo else request.now.replace(tzinfo=UTC)
    now = now_moment.timestamp()
    now_text = format_time(now)
    try:
        # apps.kruise.io/v1beta1 is converted to the v1alpha1 shape rollbook plans on.
        cloneset = as_v1alpha1(request.clone_set)
    except ConversionError as error:
        return _rejected(request.clone_set, now_text, error.field, error.reason)
    problem = validation.validate(cloneset) or _validate_objects("pvcs", request.pvcs)
    if problem:
        return _rejected(cloneset, now_text, problem.field, problem.reason)
    spec = resolve(cloneset)
    observed = cloneset.get("status") or {}
    recorded = revisions.read_revisions(request.revisions)
    adopted = revisions.reported_update_revision(spec, recorded, cloneset)
    if adopted is not None:
        recorded.append(adopted)
    revision_plan = revisions.plan_revisions(
        spec,
        recorded,
        observed.get("currentRevision") or _infer_current(recorded, request.pods),
        int(observed.get("collisionCount") or 0),
    )
    if adopted is not None and revision_plan.update is adopted:
        revision_plan.to_record.append(adopted)  # recorded from now on, whatever the status says later
    try:
        ctx = Context.build(spec, now, now_text, revision_plan, request.pods, request.pvcs, observed, views)
    except (KeyError, TypeError, AttributeError):
        # Reading pods is the hot path, so their shape is checked only when reading one failed.
        problem = _validate_objects("pods", request.pods)
        if problem is None:
            raise
        return _rejected(cloneset, now_text, problem.field, problem.reason)
    if spec.update_type == IN_PLACE_ONLY:
        refusal = _in_place_only_refusal(ctx)
        if refusal:
            return _rejected(cloneset, now_text, *refusal)

    classes = counting.classify_pods(ctx)
    diffs = counting.calculate(ctx, classes)
    # A CloneSet being deleted is left to the garbage collector: no pod is created, deleted or updated.
    deleting = bool((cloneset.get("metadata") or {}).get("deletionTimestamp"))
    actions: list[Action] = [] if deleting else scale.scale_step(ctx, classes, diffs)
    requeue: list[int] = []
    step = "scale" if actions else "none"
    if not actions and not deleting:
        result = update.update_step(ctx, classes, diffs)
        actions, requeue = result.actions, result.requeue
        step = "update" if actions else "none"
    if not deleting:
        actions += scale.orphan_pvc_cleanup(ctx)
    requeue += _min_ready_requeue(ctx)

    revisions.prune_history(
        revision_plan, spec.revision_history_limit, {p.revision_hash for p in ctx.all_pods}
    )
    kept_names = _still_active(ctx, spec.pods_to_delete)
    reported, deadline_requeue = status.compute(ctx)
    if deadline_requeue is not None:
        requeue.append(deadline_requeue)
    return Plan(
        update_revision=revision_plan.update.name,
        current_revision=reported["currentRevision"],
        partition=spec.partition,
        actions=actions,
        status=reported,
        requeue_after_seconds=min(requeue) if requeue else None,
        rejected=None,
        step=step,
        revisions=[revisions.revision_object(spec, r) for r in revision_plan.to_record],
        revisions_to_delete=revision_plan.to_delete,
        pods_to_delete=kept_names if len(kept_names) != len(spec.pods_to_delete) else None,
        max_unavailable=spec.max_unavailable,
        max_surge=spec.max_surge,
        expected_updated_replicas=intorpercent.expected_updated(spec.replicas, spec.partition),
        hook_holds=_hook_holds(ctx),
    )


def plan_json(data: bytes) -> bytes:
    """Decode a PlanInput, plan, encode the Plan. Undecodable input is a rejection, never an exception."""
    with _gc_paused():
        try:
            request = _decoder.decode(data)
        except msgspec.DecodeError as error:  # ValidationError is a DecodeError
            return encode_plan(_rejected({}, None, "input", str(error)))
        return encode_plan(plan(request))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding tens of thousands of pods allocates millions of containers, none of them garbage; the
    cyclic collector would scan the growing heap again and again (4x slower at 10,000 pods). Planning
    allocates a view, a sort key and an action per pod, which would trigger full collections over the
    decoded input too. A plan makes no reference cycles, so reference counting frees everything it drops."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def encode_plan(result: Plan) -> bytes:
    return _encoder.encode(result)


def _validate_objects(kind: str, objects: list[dict[str, Any]]) -> validation.Invalid | None:
    for index, obj in enumerate(objects):
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            return validation.Invalid(f"{kind}[{index}].metadata.name", "required")
        for key in ("labels", "annotations"):
            value = metadata.get(key)
            if value is not None and not isinstance(value, dict):
                return validation.Invalid(f"{kind}[{index}].metadata.{key}", "must be a map of strings")
        for key in ("spec", "status"):
            value = obj.get(key)
            if value is not None and not isinstance(value, dict):
                return validation.Invalid(f"{kind}[{index}].{key}", "must be an object")
    return None


def _in_place_only_refusal(ctx: Context) -> tuple[str, str] | None:
    named = set(ctx.spec.pods_to_delete)
    for pod in sorted(ctx.pods, key=lambda p: p.name):
        if pod.specified_delete or pod.name in named:
            continue
        if ctx.is_updated(pod):
            state = pod.inplace_state
            why = update.resize_stall(pod, state, ctx.now)[0] if state is not None else ""
            if why:
                return (
                    "spec.template.spec.containers",
                    f"InPlaceOnly: pod {pod.name}: {why}; it cannot be resized in place and InPlaceOnly "
                    "does not recreate it",
                )
            continue
        change = ctx.change_for(pod)
        if change is None:
            return (
                "spec.template",
                f"InPlaceOnly: pod {pod.name} is at revision {pod.revision_hash!r}, which is "
                "not recorded and differs from the template beyond its images, so no in-place update can "
                "be computed for it",
            )
        if change.in_place and not ctx.in_place(pod, change):
            return (
                "spec.template.spec.containers",
                f"InPlaceOnly: pod {pod.name} runs on a node that does not resize pods in place "
                "(pods/resize), so its resources cannot change without recreating it; nothing was changed",
            )
        if not change.in_place:
            field = change.static_field or "spec.template.spec"
            return (
                field,
                f"InPlaceOnly: changing {field} cannot be done in place (only template metadata and "
                "container images can, or probes/env/volumes in the extended in-place mode); "
                "nothing was changed",
            )
    return None


def _infer_current(recorded: list[revisions.Revision], pods: list[dict[str, Any]]) -> str | None:
    """Without status.currentRevision (a first observation), the recorded revision most pods are at."""
    if not recorded or not pods:
        return None
    by_hash = {r.hash: r for r in recorded}
    counts: dict[str, int] = {}
    for pod in pods:
        label = ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")
        revision = by_hash.get(revisions.hash_part(label))
        if revision is not None:
            counts[revision.name] = counts.get(revision.name, 0) + 1
    if not counts:
        return None
    numbers = {r.name: r.number for r in recorded}
    return max(counts, key=lambda name: (counts[name], numbers[name]))


def _hook_holds(ctx: Context) -> list[HookHold]:
    """Pods a lifecycle hook holds, as observed this round (for the audit trail's hook waits)."""
    spec_lifecycle = ctx.spec.lifecycle
    if spec_lifecycle is None:
        return []
    holds = []
    for pod in sorted(ctx.pods, key=lambda p: p.name):
        if pod.lifecycle in ("", lifecycle.NORMAL, lifecycle.UPDATING):
            continue
        hook = lifecycle.holding_hook(
            pod.lifecycle,
            spec_lifecycle,
            at_update_revision=ctx.is_updated(pod),
            labels=pod.labels,
            finalizers=pod.finalizers,
        )
        if hook is not None:
            holds.append(HookHold(pod=pod.name, hook=hook, state=pod.lifecycle))
    return holds


def _still_active(ctx: Context, names: list[str]) -> list[str]:
    """The names of scaleStrategy.podsToDelete that are still active pods."""
    if not names:
        return names
    active_names = {p.name for p in ctx.pods}
    return [n for n in names if n in active_names]


def _min_ready_requeue(ctx: Context) -> list[int]:
    """Ask again when a ready pod passes minReadySeconds and becomes available."""
    minimum = ctx.spec.min_ready_seconds
    if minimum <= 0:
        return []
    waits = []
    for pod in ctx.pods:
        if pod.ready and pod.ready_since is not None:
            remaining = pod.ready_since + minimum - ctx.now
            if remaining >= 0:
                waits.append(math.floor(remaining) + 1)
    return [min(waits)] if waits else []


def _rejected(cloneset: Any, now_text: str | None, field: str, reason: str) -> Plan:
    cloneset = cloneset if isinstance(cloneset, dict) else {}
    observed = cloneset.get("status") if isinstance(cloneset.get("status"), dict) else {}
    metadata = cloneset.get("metadata") if isinstance(cloneset.get("metadata"), dict) else {}
    reported: dict[str, Any] | None = None
    if now_text is not None:
        reported = dict(observed)
        generation = metadata.get("generation")
        if isinstance(generation, int):
            reported["observedGeneration"] = generation
        previous = observed.get("conditions")
        previous = previous if isinstance(previous, list) else []
        reported["conditions"] = status.conditions(previous, now_text, (field, reason))
    return Plan(
        update_revision=_text(observed.get("updateRevision")),
        current_revision=_text(observed.get("currentRevision")),
        partition=None,
        actions=[],
        status=reported,
        requeue_after_seconds=None,
        rejected=Rejection(field=field, reason=reason),
        step="rejected",
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
