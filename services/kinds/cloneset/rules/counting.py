"""The counting core shared by scale and update (OpenKruise pkg/controller/cloneset/sync/
cloneset_sync_utils.go ``calculateDiffsWithExpectation``).

Two rollbook changes, both documented in docs/plan.md:
- update surge is only spent on pods that will be recreated: an in-place change needs no extra pod
  (OpenKruise bug kruise#2369), unless maxUnavailable is 0, where surge is the only budget in-place has;
- old pods already on their way (marked for recreation) are
  subtracted from the update count, so a round never picks more pods than replicas - partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.podstate import PodView
from services.kinds.cloneset.rules.spec import RECREATE
from services.model import intorpercent


@dataclass(slots=True)
class Classes:
    new: list[PodView]
    old: list[PodView]
    to_delete: list[PodView]  # active, named in podsToDelete or labelled specified-delete
    to_delete_new: int
    to_delete_old: int
    pre_deleting: int
    unavailable: int  # active, not toDelete, not available
    in_flight_old: int  # old pods marked for recreation (toDelete)
    needs_recreate_old: int  # old pods (not toDelete) whose update will recreate them
    unavailable_all: int = 0  # active pods not available, whatever their state (the update budget)
    unavailable_new: int = 0  # pods at the update revision not available yet


@dataclass(slots=True)
class Diffs:
    scale_up_num: int = 0
    scale_up_old: int = 0
    scale_up_limit: int = 0
    scale_down_num: int = 0
    scale_down_old: int = 0
    delete_ready_limit: int = 0
    update_num: int = 0
    update_max_unavailable: int = 0
    use_surge: int = 0
    use_surge_old: int = 0


def classify_pods(ctx: Context) -> Classes:
    spec = ctx.spec
    named = set(spec.pods_to_delete)
    new: list[PodView] = []
    old: list[PodView] = []
    to_delete: list[PodView] = []
    del_new = del_old = pre = unavailable = in_flight = recreate = unavailable_all = unavailable_new = 0
    update_hash = ctx.update_hash
    min_ready, now = spec.min_ready_seconds, ctx.now
    recreate_all = spec.update_type == RECREATE
    # Whether an old revision's change is in place, per revision (a rollout has very few revisions).
    recreates: dict[str, bool] = {}
    for pod in ctx.pods:
        updated = pod.revision_hash == update_hash
        available = pod.cs_available(min_ready, now)
        if updated:
            new.append(pod)
            unavailable_new += not available
        else:
            old.append(pod)
        unavailable_all += not available
        if pod.lifecycle == "PreparingDelete":
            pre += 1
            continue
        if pod.specified_delete or pod.name in named:
            to_delete.append(pod)
            if updated:
                del_new += 1
            else:
                del_old += 1
                in_flight += 1
            continue
        if not available:
            unavailable += 1
        if not updated:
            if recreate_all:
                recreate += 1
            else:
                key = ctx.change_key(pod)
                needs = recreates.get(key)
                if needs is None:
                    change = ctx.change_for(pod)
                    needs = change is None or not change.in_place
                    if change is not None and change.resize:
                        needs = not ctx.in_place(pod, change)  # depends on the pod's node
                    else:
                        recreates[key] = needs
                recreate += needs
    return Classes(
        new,
        old,
        to_delete,
        del_new,
        del_old,
        pre,
        unavailable,
        in_flight,
        recreate,
        unavailable_all,
        unavailable_new,
    )


def calculate(ctx: Context, classes: Classes) -> Diffs:
    spec = ctx.spec
    replicas, partition = spec.replicas, spec.partition
    max_surge, max_unavailable = spec.max_surge, spec.max_unavailable
    total = len(ctx.pods)
    new_pre = sum(1 for p in classes.new if p.pre_deleting)
    old_pre = classes.pre_deleting - new_pre
    new_active = len(classes.new) - new_pre
    old_active = len(classes.old) - old_pre
    to_delete = classes.to_delete_new + classes.to_delete_old
    total_unavailable = classes.pre_deleting + classes.unavailable

    # Raising the partition never moves updated pods back (CloneSetPartitionRollback off).
    update_old_diff = max(old_active - partition, 0)
    update_new_diff = min(new_active - intorpercent.expected_updated(replicas, partition), 0)

    diffs = Diffs()
    if max_surge > 0:
        scale_surge = min(max(total_unavailable + to_delete - max_unavailable, 0), to_delete)
        scale_surge_old = max(scale_surge - classes.to_delete_new, 0)
        update_surge = 0
        if update_old_diff > 0 and update_new_diff < 0:
            update_surge = min(update_old_diff, -update_new_diff)
            if max_unavailable > 0:
                update_surge = min(update_surge, classes.needs_recreate_old)
        if scale_surge >= update_surge:
            diffs.use_surge = min(max_surge, scale_surge)
            diffs.use_surge_old = min(diffs.use_surge, scale_surge_old)
        else:
            diffs.use_surge = min(max_surge, update_surge)
            diffs.use_surge_old = 0

    expected_total = replicas + diffs.use_surge
    expected_old = partition + diffs.use_surge_old
    # excludePreparingDelete: PreparingDelete pods leave the pod counts of scale-up and scale-down only (a
    # replacement is created while the hooked pod still waits); they still count as unavailable.
    scale_total, scale_old = total, len(classes.old)
    if spec.exclude_preparing_delete:
        scale_total, scale_old = total - classes.pre_deleting, scale_old - old_pre
    if expected_total > scale_total:
        diffs.scale_up_num = expected_total - scale_total
        diffs.scale_up_old = max(expected_old - scale_old, 0)
        limit = diffs.scale_up_num
        if spec.scale_max_unavailable is not None:
            limit = min(limit, max(spec.scale_max_unavailable - total_unavailable, 0))
        diffs.scale_up_limit = limit
    if scale_total - to_delete > expected_total:
        diffs.scale_down_num = scale_total - to_delete - expected_total
        diffs.scale_down_old = max(scale_old - classes.to_delete_old - expected_old, 0)
    if to_delete > 0 or diffs.scale_down_num > 0:
        diffs.delete_ready_limit = max(max_unavailable + (total - replicas) - total_unavailable, 0)

    update_num = update_old_diff if update_old_diff <= -update_new_diff else -update_new_diff
    update_num = max(update_num - classes.in_flight_old, 0)
    diffs.update_num = update_num
    if update_num:
        diffs.update_max_unavailable = max_unavailable + total - replicas
    return diffs
