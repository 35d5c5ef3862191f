"""The SidecarSet planner's round, pure: the upgrade round (``upgrade.plan_sidecarset``) on the
folded state, and the decision events it means given what was already decided (docs/sidecarset.md,
"Upgrade in place"). The planner service appends what this returns; verify calls the same functions."""

from __future__ import annotations

from collections import Counter

from services.kinds.sidecarset.rules.revisions import revision_object
from services.kinds.sidecarset.rules.state import SidecarSetInput, SidecarSetState
from services.kinds.sidecarset.rules.upgrade import SidecarSetRound, plan_sidecarset
from services.model import rounds
from services.model.events import (
    Event,
    PartitionStepPlanned,
    PodActionRequested,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    SpecRejected,
    StatusPlanned,
)
from services.model.sidecarset import SidecarSetError
from services.model.sidecarset_streams import (
    SIDECARSET_KIND,
    UPDATE_SIDECAR_ACTION,
    revision_name,
    rollout_id,
)
from services.model.streams import derived_id

# The version of the SidecarSet planner's rules, written on every RoundPlanned (``rules``). Bump it with
# any change to what decisions a given input produces (upgrade.py, revisions.py,
# decisions_for), so ``rollbook verify`` reports rounds decided by other rules as not re-verifiable
# instead of as divergences (docs/replay.md, "Upgrading rollbook"). 1: rounds recorded before rules were
# versioned. 2: SidecarSet revisions (RevisionCreated / RevisionsPruned). 3: a revision recorded while the
# SidecarSet has a custom version carries it as a label (apps.kruise.io/sidecarset-custom-version), and
# resourcesPolicy / injectionStrategy.revision are validated (an invalid one is a SpecRejected).
# 4: rollout ids carry the SidecarSet's rollout sequence (``/<name>@<revision>#<n>``, docs/events.md).
# 5: native sidecars (init containers with restartPolicy Always) under RollingUpdate are upgraded in place
# (before: a SpecRejected); a pod without one of them is not matched. The round's input
# (``SidecarSetInput``, its hash on RoundPlanned) holds the recorded revisions and the collision count the
# round decides on.
RULES_VERSION = 5


def round_of(plan_input: SidecarSetInput) -> SidecarSetRound | SidecarSetError:
    """The upgrade round on the decision input alone (what its hash covers)."""
    try:
        return plan_sidecarset(
            plan_input.sidecar_set,
            plan_input.pods,
            plan_input.now,
            revisions=plan_input.revisions,
            collision_count=plan_input.collision_count,
        )
    except SidecarSetError as error:
        return error


def round_rollout(state: SidecarSetState, result: SidecarSetRound) -> str:
    """The rollout a round's events name: one it starts takes the SidecarSet's next rollout number; any
    other names the rollout to its target under the latest number (docs/events.md, "Rollout ids")."""
    starts = result.revision_name != state.update_revision and not result.done
    return rollout_id(state.name, result.revision_name, state.rollouts_started + int(starts))


def decisions_for(state: SidecarSetState, result: SidecarSetRound | SidecarSetError) -> list[Event]:
    """The decision events a round means, given what was already decided (nothing repeated). Pure: a
    replay calls it with the same state and gets the same list."""
    sidecarset = state.sidecarset or {}
    generation = (sidecarset.get("metadata") or {}).get("generation")
    if isinstance(result, SidecarSetError):
        if (result.field, result.reason) == state.last_rejection:
            return []
        return [SpecRejected(field=result.field, reason=result.reason, generation=generation)]
    decisions: list[Event] = []
    target = result.revision_name
    rollout = round_rollout(state, result)
    recorded = result.revisions.record
    if recorded is not None:
        spec = recorded.data.get("spec") or {}
        decisions.append(
            RevisionCreated(
                name=recorded.name,
                revision=recorded.number,
                hash=result.revision,
                template={k: v for k, v in spec.items() if k != "$patch" and v is not None},
                object=revision_object(state.name, recorded),
            )
        )
    if result.revisions.pruned:
        decisions.append(RevisionsPruned(names=result.revisions.pruned))
    active = state.active_rollout
    paused = state.paused
    if target != state.update_revision:
        if active:
            decisions.append(RolloutCompleted(rollout_id=active, revision=target, outcome="superseded"))
            active = None
        if result.done:
            decisions.append(RolloutCompleted(rollout_id=rollout, revision=target))
        else:
            old = Counter(
                revision_name(state.name, p.revision) for p in result.matched if not p.updated and p.revision
            )
            decisions.append(
                RolloutStarted(
                    rollout_id=rollout,
                    from_revision=old.most_common(1)[0][0] if old else "",
                    to_revision=target,
                    strategy=result.strategy,
                    replicas=len(result.matched),
                )
            )
            active, paused = rollout, False
    halted = result.paused or not result.rolling
    if active and halted and not paused:
        reason = "updateStrategy.paused" if result.paused else "updateStrategy.type is NotUpdate"
        decisions.append(RolloutPaused(rollout_id=active, reason=reason))
    elif active and not halted and paused:
        decisions.append(RolloutResumed(rollout_id=active))
    if active and not halted:
        step = PartitionStepPlanned(
            rollout_id=active,
            partition=result.partition,
            replicas=len(result.matched),
            expected_updated=result.expected_updated,
            max_unavailable=result.max_unavailable,
            max_surge=0,
        )
        if rounds.step_key(step) != state.last_step:
            decisions.append(step)
    round_key = derived_id("sidecarset-round", *sorted(state.through().items()))
    for index, upgrade in enumerate(result.upgrades):
        decisions.append(
            PodActionRequested(
                action_id=str(derived_id("sidecarset-action", round_key, index)),
                action=UPDATE_SIDECAR_ACTION,
                namespace=upgrade.namespace,
                pod=upgrade.pod,
                rollout_id=active,
                revision=target,
                # read by the executor as services/kinds/sidecarset/actions.py (tests/kinds/test_actions.py)
                details={
                    "uid": upgrade.uid,
                    "sidecarSet": state.name,
                    "fromRevision": revision_name(state.name, upgrade.from_revision),
                    "images": upgrade.images,
                    "patch": upgrade.patch,
                },
            )
        )
    if result.status != state.last_status:
        decisions.append(
            StatusPlanned(kind=SIDECARSET_KIND, namespace="", name=state.name, status=result.status)
        )
    if active and result.done and not result.upgrades:
        decisions.append(RolloutCompleted(rollout_id=active, revision=target))
    return decisions
