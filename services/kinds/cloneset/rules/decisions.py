"""The CloneSet planner's round, pure: the decision function (``plan.py``) on the folded state's input, and
the decision events its plan means given what was already decided (docs/services.md, "planner"). The
planner service appends what this returns; replay, verify and the simulation call the same functions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import msgspec

from services.kinds.cloneset.rules import plan as planning
from services.kinds.cloneset.rules import progress_deadline
from services.kinds.cloneset.rules.model import Action, DeletePod, DeletePVC, Plan, PlanInput
from services.kinds.cloneset.rules.podstate import PodViews
from services.kinds.cloneset.rules.progress import rollout_progress
from services.kinds.cloneset.rules.status import (
    failure_conditions,
    with_failure_conditions,
    with_loss_condition,
)
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.model import intorpercent, rounds
from services.model.actions import EXISTING_POD_ACTIONS, ActionKind
from services.model.cloneset import desired_replicas
from services.model.cloneset_conversion import ConversionError, as_v1alpha1
from services.model.events import (
    Event,
    PartitionStepPlanned,
    PodActionRequested,
    PodHookHeld,
    PodHookReleased,
    RequeueScheduled,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutProgressDeadlineExceeded,
    RolloutResumed,
    RolloutStarted,
    SpecRejected,
    StatusPlanned,
)
from services.model.pod_writes import OBSERVED_VERSION, observed_version
from services.model.streams import derived_id, rollout_id

# The version of the CloneSet planner's rules, written on every RoundPlanned (``rules``). Bump it with any
# change to what decisions a given input produces (plan.py and what it calls, decisions_for, the round's
# events), so ``rollbook verify`` reports rounds decided by other rules as not re-verifiable instead of as
# divergences (docs/replay.md, "Upgrading rollbook"). 1: rounds recorded before rules were versioned.
# 2: RolloutPaused/RolloutResumed, FailedScale/FailedUpdate conditions.
# 3: OpenKruise's in-place annotations (grace record = UpdateSpec, revision labels moved when the update
#    starts), the lifecycle.apps.kruise.io/state label (PreparingNormal/Normal/Updating/Updated), patchPod.
# 4: lifecycle hooks (PreparingDelete/PreparingUpdate/preNormal waits, PodHookHeld/PodHookReleased), and
#    replicas: null resolved as 1 everywhere (services/model/cloneset.py).
# 5: the Progressing condition (progressDeadlineSeconds) and RolloutProgressDeadlineExceeded; CloneSet
#    apps.kruise.io/v1beta1 input and the OnDelete update type.
# 6: scatterStrategy (validated; orders update candidates as OpenKruise's scatter sorter).
# 7: an action's expectation times out 60 s after its outcome, not its request (600 s with no outcome).
# 8: hand-over from another controller: a status.updateRevision rollbook has no record of, reported for the
#    current generation, is adopted as the current template's revision; a pod at an unrecorded revision
#    that differs from the template only in its images is updated in place instead of recreated.
# 9: a pod at an unrecorded revision is updated in place only when it has no pod spec or container field
#    the template lacks beyond what the API server adds, with the value it adds (another controller's
#    hostNetwork, service account, tolerations, affinity, init containers or resources are recreated).
# 10: an in-place update that restarts containers with no grace period is one updateInPlace carrying its
#     InPlaceUpdateReady=False condition (notReady), not a markNotReady followed by an updateInPlace.
# 11: a new pod's PVCs are created by its createPod (its ``pvcs``, created before the pod in the same
#     action), not by createPVC actions before it; its expectation waits for the pod and those PVCs.
# 12: a PVC being deleted is not an existing one: a pod reusing its instance id names it in ``pvcs`` (so
#     waits for a new one) instead of mounting it; a createPod's expectation waits for its action id on
#     each of its PVCs (the executor writes it on one it found), not any observation of the name.
# 13: the first action of a round on an existing pod names the resourceVersion it was computed from
#     (``details.resourceVersion``, services/model/pod_writes.py): the executor's first write takes it as
#     precondition instead of reading the pod first.
# 14: rollout ids carry the workload's rollout sequence (``<ns>/<name>@<revision>#<n>``, docs/events.md
#     "Rollout ids"), so a rollback or a second roll to a revision is a rollout of its own.
# 15: a template change of container cpu/memory on a pod whose node resizes pods (it reports container
#     resources in status) is resized in place through pods/resize (a ``resize`` action after the start
#     patch), not recreated; a resize that restarts nothing costs no maxUnavailable; an Infeasible (or
#     Deferred too long) resize is recreated under InPlaceIfPossible and refused under InPlaceOnly.
# 16: a pod in a resize that restarts nothing (lifecycle Updating, Ready, InPlaceUpdateReady not False, its
#     in-place state recording the resize) counts as available (services/model/availability.py): it stays
#     in its Services, so status.availableReplicas keeps it and it leaves the others' budget alone.
# tests/planner/test_rules_fingerprint.py fails when the decisions change and this does not.
RULES_VERSION = 16

Decide = Callable[[PlanInput], Plan]
"""The decision function: the planner input -> its plan (typed, services/kinds/cloneset/rules/model.py)."""


def decide(plan_input: PlanInput, *, views: PodViews | None = None) -> Plan:
    """The pure decision function (services/kinds/cloneset/rules/plan.py); ``views``: the workload's pod
    views kept between its rounds (the same plan, less reading)."""
    return planning.plan(plan_input, views=views)


def correlation_of(state: WorkloadState, plan: Plan) -> str | None:
    """The correlation id of a round's events: the rollout to the plan's update revision (numbered as the
    round's own RolloutStarted, if it starts one, numbers it)."""
    update_revision = plan.update_revision or state.update_revision
    if not update_revision:
        return None
    starts = plan.update_revision is not None and plan.update_revision != state.update_revision
    starts = starts and plan.update_revision != plan.current_revision
    return rollout_id(state.namespace, state.name, update_revision, state.rollouts_started + int(starts))


def decisions_for(state: WorkloadState, plan: Plan) -> list[Event]:
    """The decision events a plan means, given what was already decided (nothing is repeated). A pure
    function of the folded state and the plan: the replay calls it too."""
    now = state.now
    assert now is not None
    decisions: list[Event] = []
    rejected = plan.rejected
    if rejected is not None:
        key = (rejected.field, rejected.reason)
        if key != state.last_rejection:
            generation = (state.cloneset or {}).get("metadata", {}).get("generation")
            decisions.append(SpecRejected(field=key[0], reason=key[1], generation=generation))
    for planned in plan.revisions:
        revision = _as_recorded(planned)
        name = str((revision.get("metadata") or {}).get("name", ""))
        if state.revisions.get(name) == revision:
            continue
        labels = (revision.get("metadata") or {}).get("labels") or {}
        data = revision.get("data") or {}
        decisions.append(
            RevisionCreated(
                name=name,
                revision=int(revision.get("revision", 0)),
                hash=str(labels.get("controller.kubernetes.io/hash", name.rsplit("-", 1)[-1])),
                template=(data.get("spec") or {}).get("template") or {},
                object=revision,
            )
        )
    pruned = [n for n in plan.revisions_to_delete if n in state.revisions]
    if pruned:
        decisions.append(RevisionsPruned(names=pruned))
    update = plan.update_revision
    current = plan.current_revision
    replicas = desired_replicas(state.cloneset)
    strategy = (_planned_shape(state.cloneset).get("spec") or {}).get("updateStrategy") or {}
    # The workload's rollout sequence: a rollout started by this round takes the next number; every other
    # event names the rollout to ``update`` under the latest number (docs/events.md, "Rollout ids").
    sequence = state.rollouts_started
    if update and update != state.update_revision:
        if state.active_rollout:
            decisions.append(
                RolloutCompleted(rollout_id=state.active_rollout, revision=update, outcome="superseded")
            )
        if update != current:
            sequence += 1
            decisions.append(
                RolloutStarted(
                    rollout_id=rollout_id(state.namespace, state.name, update, sequence),
                    from_revision=str(current or ""),
                    to_revision=update,
                    strategy=strategy,
                    replicas=replicas,
                )
            )
        else:
            # First sight of a workload (or a return to the current revision): nothing to roll out.
            decisions.append(
                RolloutCompleted(
                    rollout_id=rollout_id(state.namespace, state.name, update, sequence), revision=update
                )
            )
    active = rollout_id(state.namespace, state.name, update, sequence) if update else None
    if update and plan.partition is not None and update != current:
        step = PartitionStepPlanned(
            rollout_id=str(active),
            partition=plan.partition,
            replicas=replicas,
            expected_updated=plan.expected_updated_replicas
            or intorpercent.expected_updated(replicas, plan.partition),
            max_unavailable=plan.max_unavailable or 0,
            max_surge=plan.max_surge or 0,
        )
        if rounds.step_key(step) != state.last_step:
            decisions.append(step)
    round_key = derived_id("round", *sorted(state.through().items()))
    acted_on: set[str] = set()  # pods an earlier action of this round targets
    for index, action in enumerate(plan.actions):
        decisions.append(
            _action(state, action, round_key, index, active, first_on_pod=action.pod not in acted_on)
        )
        acted_on.add(action.pod)
    if rejected is None:
        decisions.extend(_hook_transitions(state, plan, now))
    pods_to_delete = plan.pods_to_delete
    if pods_to_delete is not None:
        decisions.append(
            PodActionRequested(
                action_id=str(derived_id("action", round_key, "podsToDelete")),
                action=ActionKind.SET_PODS_TO_DELETE,
                namespace=state.namespace,
                workload=state.name,
                rollout_id=active,
                details={"podsToDelete": pods_to_delete},
            )
        )
    status = _as_recorded(plan.status) if plan.status is not None else None
    if status is not None:
        # FailedScale / FailedUpdate come from the executors' outcomes, which the pure planner never sees.
        previous = (state.last_status or {}).get("conditions") or []
        failed = failure_conditions(previous, state.outcomes_since_last_round())
        status = with_failure_conditions(status, failed)
        status = with_loss_condition(status, state.store_losses)
    if status is not None and status != state.last_status:
        decisions.append(
            StatusPlanned(kind="CloneSet", namespace=state.namespace, name=state.name, status=status)
        )
    deadline_event = _deadline_exceeded(state, status, update)
    if deadline_event is not None:
        decisions.append(deadline_event)
    status_now = status or state.last_status or {}
    started_now = any(isinstance(d, RolloutStarted) for d in decisions)
    # Complete means every desired pod is on the update revision AND ready again: an in-place updated pod
    # that has not come back is still part of the rollout.
    if (
        (state.active_rollout or started_now)
        and update
        and update == current
        and rollout_progress(state.cloneset or {}, status_now).complete
        and not plan.actions
    ):
        decisions.append(RolloutCompleted(rollout_id=str(active), revision=update))
    decisions.extend(pause_transition(state, decisions, plan, status_now))
    requeue = plan.requeue_after_seconds
    if requeue and (decisions or not state.schedules):
        due = now + timedelta(seconds=float(requeue))
        if due not in state.schedules.values():
            decisions.append(RequeueScheduled(due_at=due, reason="grace"))
    return decisions


def _as_recorded(value: Any) -> Any:
    """A part of the plan as the events record it: plain JSON values, every dict's keys in sorted order (as
    the plan's canonical JSON has them), copied so an event shares nothing with the planner's input."""
    return msgspec.to_builtins(value, order="deterministic")


def _planned_shape(cloneset: dict[str, Any] | None) -> dict[str, Any]:
    """The CloneSet in the v1alpha1 shape the planner plans on (a v1beta1 object converted)."""
    try:
        return as_v1alpha1(cloneset or {})
    except ConversionError:
        return cloneset or {}


def _deadline_exceeded(
    state: WorkloadState, status: dict[str, Any] | None, update: str | None
) -> RolloutProgressDeadlineExceeded | None:
    """The round whose planned status first says ProgressDeadlineExceeded records it as a rollout event."""
    now_exceeded = progress_deadline.exceeded(status)
    if now_exceeded is None or progress_deadline.exceeded(state.last_status) is not None:
        return None
    spec = (state.cloneset or {}).get("spec") or {}
    previous = next(
        (
            c
            for c in (state.last_status or {}).get("conditions") or ()
            if isinstance(c, dict) and c.get("type") == progress_deadline.PROGRESSING
        ),
        None,
    )
    return RolloutProgressDeadlineExceeded(
        rollout_id=state.active_rollout,
        revision=str(update or (status or {}).get("updateRevision") or ""),
        progress_deadline_seconds=int(spec.get("progressDeadlineSeconds") or 0),
        progressing_since=str((previous or {}).get("lastUpdateTime") or now_exceeded.get("lastUpdateTime")),
    )


def _hook_transitions(state: WorkloadState, plan: Plan, now: datetime) -> list[Event]:
    """``PodHookReleased`` for each pod a lifecycle hook no longer holds (released, moved on, or gone),
    with how long it held it, then ``PodHookHeld`` for each pod newly held (plan ``hookHolds``)."""
    holds = {(h.pod, h.hook): h.state for h in plan.hook_holds}
    events: list[Event] = []
    for key in sorted(state.hook_holds):
        held_state, since = state.hook_holds[key]
        if holds.get(key) != held_state:
            events.append(
                PodHookReleased(
                    pod=key[0],
                    hook=key[1],  # type: ignore[arg-type]
                    state=held_state,
                    held_since=since,
                    held_seconds=max((now - since).total_seconds(), 0.0),
                )
            )
    for key in sorted(holds):
        previous = state.hook_holds.get(key)
        if previous is None or previous[0] != holds[key]:
            events.append(PodHookHeld(pod=key[0], hook=key[1], state=holds[key]))  # type: ignore[arg-type]
    return events


def pause_transition(
    state: WorkloadState, decisions: list[Event], plan: Plan, status: dict[str, Any]
) -> list[Event]:
    """``RolloutPaused`` when the active rollout stops on purpose (``updateStrategy.paused``, or a canary
    step done: the pods the partition allows are updated and ready, and the rest wait for the partition to
    be lowered); ``RolloutResumed`` when it moves again. Pure: the replay calls it through decisions_for."""
    active, paused = state.active_rollout, state.paused
    for decision in decisions:  # this round's own rollout transitions come first
        if isinstance(decision, RolloutStarted):
            active, paused = decision.rollout_id, False
        elif isinstance(decision, RolloutCompleted) and decision.rollout_id == active:
            active, paused = None, False
    if active is None:
        return []
    progress = rollout_progress(state.cloneset or {}, status)
    reason = None
    if progress.paused:
        reason = "updateStrategy.paused"
    elif progress.partition_reached and not progress.complete and not plan.actions:
        partition = plan.partition or 0
        reason = f"partition {partition} reached: the pods it allows are updated and ready"
    if reason is not None and not paused:
        return [RolloutPaused(rollout_id=active, reason=reason)]
    if reason is None and paused:
        return [RolloutResumed(rollout_id=active)]
    return []


def _action(
    state: WorkloadState,
    action: Action,
    round_key: Any,
    index: int,
    rollout: str | None,
    *,
    first_on_pod: bool,
) -> PodActionRequested:
    # The request's details are the plan's action as its JSON has it (camelCase keys, defaults left out);
    # the executor reads them as services/kinds/cloneset/actions.py (same keys, tests/kinds/test_actions.py).
    details: dict[str, Any] = _as_recorded(action)
    # Deletes name the exact objects they target, so a later object with the same name is not
    # mistaken for the deleted one (expectations, and the executor's precondition).
    if isinstance(action, DeletePod):
        details["uid"] = state.uid_of("Pod", action.pod)
        if action.with_pvcs:
            details["pvcUids"] = {n: state.uid_of("PersistentVolumeClaim", n) for n in action.pvcs}
    elif isinstance(action, DeletePVC):
        details["uid"] = state.uid_of("PersistentVolumeClaim", action.pvc)
    elif details["action"] in EXISTING_POD_ACTIONS:
        details["uid"] = state.uid_of("Pod", action.pod)
        # The version the action was computed from, for the executor's first write to name instead of
        # reading the pod. Only on the round's first action on the pod: that one moves the version, so a
        # later one would only meet a conflict and read anyway.
        version = observed_version(details, state.pods.get(action.pod)) if first_on_pod else None
        if version is not None:
            details[OBSERVED_VERSION] = version
    revision = getattr(action, "revision", None) or None
    return PodActionRequested(
        action_id=str(derived_id("action", round_key, index)),
        action=details["action"],
        namespace=state.namespace,
        pod=action.pod,
        rollout_id=rollout,
        revision=str(revision) if revision else None,
        details=details,
    )
