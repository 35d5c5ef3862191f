"""The scale step (OpenKruise pkg/controller/cloneset/sync/cloneset_scale.go): create, delete named pods,
scale in, with the preDelete lifecycle hook."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from services.kinds.cloneset.rules import lifecycle
from services.kinds.cloneset.rules.construct import generated_ids, id_seed, new_pod, new_pvcs
from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.counting import Classes, Diffs
from services.kinds.cloneset.rules.model import (
    Action,
    CreatePod,
    DeletePod,
    DeletePVC,
    MarkNotReady,
    PatchPod,
)
from services.kinds.cloneset.rules.names import INSTANCE_ID_LABEL, KRUISE_POD_READY_CONDITION
from services.kinds.cloneset.rules.podstate import PodView


def scale_step(ctx: Context, classes: Classes, diffs: Diffs) -> list[Action]:
    """Actions of the scale step; empty when it has nothing to do (the round goes on to the update step).

    OpenKruise pkg/controller/cloneset/sync/cloneset_scale.go ``Scale``: take PreparingDelete pods back
    when replicas rose again; create; delete PreparingDelete pods whose preDelete hook released them;
    delete named pods; scale in. "Delete" moves a pod held by the preDelete hook to PreparingDelete."""
    pre_deleting = [p for p in ctx.pods if p.pre_deleting]
    if pre_deleting:
        taken_back = _take_back(ctx, classes, pre_deleting)
        if taken_back:
            return taken_back
    if diffs.scale_up_num > 0:
        # With scaleStrategy.maxUnavailable exhausted nothing is created and deletions are skipped too.
        return _create(ctx, diffs.scale_up_limit, diffs.scale_up_old) if diffs.scale_up_limit > 0 else []
    if pre_deleting:
        hook = ctx.spec.lifecycle.pre_delete if ctx.spec.lifecycle is not None else None
        released = [p for p in pre_deleting if not lifecycle.hooked(hook, p.labels, p.finalizers)]
        if released:
            # No ready limit: these pods were already counted as going when they entered PreparingDelete.
            return _delete(ctx, sorted(released, key=lambda p: p.name), None, "preDelete hook released")
    if classes.to_delete:
        chosen = sorted(classes.to_delete, key=lambda p: _scale_in_key(ctx, p, 0))
        actions = _delete(
            ctx, chosen, diffs.delete_ready_limit, "named in podsToDelete or marked for recreation"
        )
        if actions:
            return actions
    if diffs.scale_down_num > 0 and not classes.to_delete and not classes.pre_deleting:
        chosen = choose_scale_in(ctx, classes, diffs.scale_down_num, diffs.scale_down_old)
        return _delete(ctx, chosen, diffs.delete_ready_limit, "scale in")
    return []


def _take_back(ctx: Context, classes: Classes, pre_deleting: list[PodView]) -> list[Action]:
    """``managePreparingDelete``: with replicas raised again, PreparingDelete pods not marked for deletion
    go back to PreparingNormal, as many as are missing. Not when any hook marks pods not ready (taking a
    pod back would lose its pending readiness key)."""
    hooks = ctx.spec.lifecycle
    if hooks is not None and any(
        h is not None and h.mark_not_ready for h in (hooks.pre_delete, hooks.in_place_update)
    ):
        return []
    missing = ctx.spec.replicas - len(ctx.pods) + len(classes.to_delete) + len(pre_deleting)
    named = set(ctx.spec.pods_to_delete)
    actions: list[Action] = []
    for pod in sorted(pre_deleting, key=lambda p: p.name):
        if missing <= 0:
            break
        if pod.specified_delete or pod.name in named:
            continue
        actions.append(
            PatchPod(
                pod=pod.name,
                patch=lifecycle.state_patch(lifecycle.PREPARING_NORMAL, ctx.now_text),
                reason="lifecycle PreparingDelete -> PreparingNormal: replicas raised, the pod is kept",
            )
        )
        missing -= 1
    return actions


def _create(ctx: Context, count: int, at_current: int) -> list[Action]:
    spec = ctx.spec
    ids = _instance_ids(ctx, count)
    # Live claims only (OpenKruise getOwnedResource drops terminating claims first): a claim being deleted
    # stays in the pod's ``pvcs``, so its pod waits for a new claim instead of mounting the dying one.
    existing_pvcs = {
        (p.get("metadata") or {}).get("name")
        for p in ctx.pvcs
        if not (p.get("metadata") or {}).get("deletionTimestamp")
    }
    actions: list[Action] = []
    orphan_ids = _orphan_ids(ctx)
    for index, instance_id in enumerate(ids):
        revision = ctx.revisions.current if index < at_current else ctx.revisions.update
        pod = new_pod(spec, revision, instance_id, ctx.now_text)
        # OpenKruise createOnePod: the instance's claims not existing yet, then the pod, as one action.
        claims = [c for c in new_pvcs(spec, instance_id) if c["metadata"]["name"] not in existing_pvcs]
        reused = instance_id in orphan_ids
        actions.append(
            CreatePod(
                pod=pod["metadata"]["name"],
                revision=revision.name,
                instance_id=instance_id,
                object=pod,
                pvcs=claims,
                reason="replace missing pod, reusing its PVCs" if reused else "scale out",
            )
        )
    return actions


def _orphan_ids(ctx: Context) -> set[str]:
    used = {p.instance_id for p in ctx.all_pods}
    return {i for i in ctx.pvcs_by_instance() if i not in used}


def _instance_ids(ctx: Context, count: int) -> list[str]:
    """Ids of owned PVCs no pod uses come first (sorted), then fresh deterministic ids."""
    ids: list[str] = []
    if not ctx.spec.disable_pvc_reuse:
        live_pvcs = [p for p in ctx.pvcs if not (p.get("metadata") or {}).get("deletionTimestamp")]
        used = {p.instance_id for p in ctx.all_pods}
        names_used = {p.name for p in ctx.all_pods}
        orphan = sorted({p["metadata"]["labels"][INSTANCE_ID_LABEL] for p in live_pvcs} - used)
        ids = [i for i in orphan if f"{ctx.spec.name}-{i}" not in names_used][:count]
    if len(ids) < count:
        taken = {p.instance_id for p in ctx.all_pods} | set(ctx.pvcs_by_instance()) | set(ids)
        taken |= {p.name.rsplit("-", 1)[-1] for p in ctx.all_pods}
        fresh = generated_ids(id_seed(ctx.spec, taken), taken)
        ids.extend(next(fresh) for _ in range(count - len(ids)))
    return ids


def _scale_in_key(ctx: Context, pod: PodView, rank: int) -> tuple[Any, ...]:
    return pod.scale_in_key(ctx.spec.min_ready_seconds, ctx.now, rank)


def _spread_ranks(ctx: Context, group: list[PodView]) -> dict[str, int]:
    """Same-node ranker: on a node with k+1 pods of the group, the first k (in scale-in order) get k..1."""
    by_node: dict[str, list[PodView]] = defaultdict(list)
    for pod in group:
        if pod.node:
            by_node[pod.node].append(pod)
    ranks: dict[str, int] = {}
    for pods in by_node.values():
        if len(pods) < 2:
            continue
        pods.sort(key=lambda p: p.same_node_key(ctx.spec.min_ready_seconds, ctx.now))
        for position, pod in enumerate(pods[:-1]):
            ranks[pod.name] = len(pods) - 1 - position
    return ranks


def choose_scale_in(ctx: Context, classes: Classes, count: int, from_old: int) -> list[PodView]:
    """``choosePodsToDelete``: ``from_old`` pods from the old revision first, the rest from the new,
    each group in order."""
    chosen: list[PodView] = []
    for group, want in ((classes.old, min(from_old, count)), (classes.new, count - min(from_old, count))):
        if want <= 0:
            continue
        ranks = _spread_ranks(ctx, group)
        ordered = sorted(group, key=lambda p: _scale_in_key(ctx, p, ranks.get(p.name, 0)))
        chosen.extend(ordered[:want])
    if len(chosen) < count:  # not enough in the preferred group: take from the other one
        rest = [p for p in classes.old + classes.new if p not in chosen]
        rest.sort(key=lambda p: _scale_in_key(ctx, p, 0))
        chosen.extend(rest[: count - len(chosen)])
    return chosen


def _delete(ctx: Context, chosen: list[PodView], ready_limit: int | None, reason: str) -> list[Action]:
    """Delete pods with their PVCs; a ready pod only while the ready limit lasts (None: no limit). A pod
    the preDelete hook holds is moved to PreparingDelete instead (``deletePods``), which counts too."""
    pvcs = ctx.pvcs_by_instance()
    hook = ctx.spec.lifecycle.pre_delete if ctx.spec.lifecycle is not None else None
    actions: list[Action] = []
    for pod in chosen:
        if ready_limit is not None and pod.cs_available(0, ctx.now):
            if ready_limit <= 0:
                continue
            ready_limit -= 1
        if not pod.pre_deleting and lifecycle.hooked(hook, pod.labels, pod.finalizers):
            actions.append(_enter_preparing_delete(ctx, pod, hook, reason))
            continue
        names = (
            sorted(p["metadata"]["name"] for p in pvcs.get(pod.instance_id, [])) if pod.instance_id else []
        )
        actions.append(DeletePod(pod=pod.name, with_pvcs=True, pvcs=names, reason=reason))
    return actions


def _enter_preparing_delete(ctx: Context, pod: PodView, hook: lifecycle.Hook | None, why: str) -> Action:
    move = lifecycle.state_patch(lifecycle.PREPARING_DELETE, ctx.now_text)
    reason = f"lifecycle {pod.lifecycle or 'unset'} -> PreparingDelete ({why}): preDelete hook holds the pod"
    if hook is not None and hook.mark_not_ready and pod.has_gate(KRUISE_POD_READY_CONDITION):
        condition = lifecycle.not_ready_key_added(
            pod.kruise_pod_ready, lifecycle.PRE_DELETE_KEY, ctx.now_text
        )
        if condition is not None:
            return MarkNotReady(pod=pod.name, condition=condition, patch=move, reason=reason)
    return PatchPod(pod=pod.name, patch=move, reason=reason)


def orphan_pvc_cleanup(ctx: Context) -> list[Action]:
    """With disablePVCReuse, PVCs whose instance id no active pod uses are deleted (``cleanupPVCs``)."""
    if not ctx.spec.disable_pvc_reuse:
        return []
    used = {p.instance_id for p in ctx.pods}
    actions: list[Action] = []
    for instance_id, claims in sorted(ctx.pvcs_by_instance().items()):
        if instance_id in used:
            continue
        for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
            if not claim["metadata"].get("deletionTimestamp"):
                actions.append(
                    DeletePVC(
                        pod=f"{ctx.spec.name}-{instance_id}",
                        pvc=claim["metadata"]["name"],
                        reason="disablePVCReuse: no pod uses it",
                    )
                )
    return actions
