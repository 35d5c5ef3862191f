"""The planner service: folds each workload's events, asks the pure decision function, appends its
decisions (docs/services.md, "planner").

Bus messages are only wake-ups: on one, the planner catches the workload up from the event store (every
stream from the version after the last one folded), so redeliveries, reordering and restarts cannot make
it skip or double-fold an input. It decides only when no requested action is still pending (expected but
not yet seen in effect), records a ``RoundPlanned`` naming exactly what it folded, then the decisions, in
one append with the decisions stream's expected version (single writer). Event and action ids derive from
the round, so a re-run after a crash produces the same ids and stores nothing twice. The relay in the
auditor publishes them.

Requeues are durable timers on the bus: a ``RequeueScheduled`` message is nak'ed with the delay left, so
JetStream hands it back when it is due, after a restart too; then ``RequeueDue`` is appended and the
workload planned with ``now`` = the due time.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg

from services.infra.bus import Bus
from services.infra.coalesce import Coalescer
from services.infra.consumer_service import ConsumerSpec, serve_consumers
from services.infra.kruise import resolve_selection
from services.infra.leader import run_while_leading
from services.infra.metrics import EVENTS_HANDLED, PLANNING_SECONDS
from services.infra.runtime import ServiceRuntime, configure_logging
from services.infra.settings import Settings
from services.infra.store import ConcurrencyError, EventStore
from services.model.events import (
    Envelope,
    Event,
    PartitionStepPlanned,
    PodActionRequested,
    PodActionStarted,
    RequeueScheduled,
    RevisionCreated,
    RevisionsPruned,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    SpecRejected,
    StatusPlanned,
)
from services.model.management import Selection
from services.model.shadow import shadowed
from services.model.sidecarset_streams import is_sidecarset_stream
from services.model.streams import WORKLOAD_KIND, decisions_stream, derived_id, rollout_id, workload_of
from services.planner import rounds
from services.planner.progress import rollout_progress
from services.planner.shadow_service import ShadowRecorder
from services.planner.sidecarset_service import SidecarSetPlanner
from services.planner.status import failure_conditions, with_failure_conditions
from services.planner.workload_state import EXPECTATION_TIMEOUT, WorkloadState, encode_input

log = structlog.get_logger("planner")

DURABLE = "planner"
# The version of the CloneSet planner's rules, written on every RoundPlanned (``rules``). Bump it with any
# change to what decisions a given input produces (plan.py and what it calls, decisions_for, the round's
# events), so ``rollbook verify`` reports rounds decided by other rules as not re-verifiable instead of as
# divergences (docs/replay.md, "Upgrading rollbook"). 1: rounds recorded before rules were versioned.
# 2: RolloutPaused/RolloutResumed, FailedScale/FailedUpdate conditions.
# 3: OpenKruise's in-place annotations (grace record = UpdateSpec, revision labels moved when the update
#    starts), the lifecycle.apps.kruise.io/state label (PreparingNormal/Normal/Updating/Updated), patchPod.
# tests/planner/test_rules_fingerprint.py fails when the decisions change and this does not.
RULES_VERSION = 3
# A round takes milliseconds; a wake-up lost with a crashed planner comes back after this.
ACK_WAIT = 10.0
INPUT_TYPES = ("ObjectObserved", "PodActionSucceeded", "PodActionFailed", "RequeueScheduled")
# Wake-ups held at once, each waiting for the round that covers it (services/infra/coalesce.py).
WAKE_UPS_IN_HAND = 512
_output_decoder = msgspec.json.Decoder(dict[str, Any])


def decide(plan_input: bytes) -> dict[str, Any]:
    """The pure decision function (services.planner, issue 4), JSON in and out."""
    from services.planner.plan import plan_json

    return _output_decoder.decode(plan_json(plan_input))


class Planner:
    def __init__(self, settings: Settings, store: EventStore, selection: Selection | None = None) -> None:
        self.settings = settings
        self.store = store
        # Which objects we plan for (services/model/management.py); the others are only observed.
        self.selection = selection or Selection.parse(settings.manage, settings.manage_namespaces)
        self.workloads: dict[str, WorkloadState] = {}
        self.sidecarsets = SidecarSetPlanner(store, self.selection)  # in-place upgrades (docs/sidecarset.md)
        # CloneSets rollbook only observes (docs/shadow.md): all of them in shadow mode, else those labelled.
        self.shadow = ShadowRecorder(store, shadow_all=settings.shadow, rules=RULES_VERSION)
        self._lock = asyncio.Lock()  # SidecarSets and shadow records: one at a time
        # CloneSets: a burst of wake-ups for one workload is one round; workloads plan concurrently.
        self._workload_locks: dict[str, asyncio.Lock] = {}
        self.rounds: Coalescer[str] = Coalescer(self._round_of)

    # --- state ---------------------------------------------------------------------------------------

    async def catch_up(self, state: WorkloadState) -> int:
        """Fold every event of the workload's streams not folded yet; returns how many."""
        return await rounds.catch_up(self.store, state)

    def state_of(self, namespace: str, name: str) -> WorkloadState:
        key = f"{namespace}/{name}"
        state = self.workloads.get(key)
        if state is None:
            state = self.workloads[key] = WorkloadState(namespace, name)
        return state

    # --- handling bus messages -----------------------------------------------------------------------

    async def handle(self, envelope: Envelope, msg: Msg) -> None:
        EVENTS_HANDLED.labels("planner", envelope.type).inc()
        if isinstance(envelope.payload, PodActionStarted):
            # No input (rounds.advance): the action's outcome, stored after it, wakes the workload. Our
            # filter excludes it, but a server before NATS 2.10 ignores a consumer's several filter
            # subjects and delivers every event type.
            return
        if is_sidecarset_stream(envelope.stream):
            if self.settings.shadow:
                return  # shadow mode acts on nothing
            async with self._lock:
                await self.sidecarsets.handle(envelope, msg)
            return
        if not envelope.stream.startswith(WORKLOAD_KIND + "/"):
            return  # not a CloneSet's event (e.g. an observation of another kind): nothing to plan
        namespace, name = workload_of(envelope.stream)
        structlog.contextvars.bind_contextvars(
            correlation_id=envelope.correlation_id, workload=f"{namespace}/{name}"
        )
        try:
            if self.settings.shadow:
                async with self._lock:
                    await self.shadow.record(namespace, name)
                return
            key = f"{namespace}/{name}"
            payload = envelope.payload
            if isinstance(payload, RequeueScheduled):
                async with self._workload_lock(key):
                    await self._on_timer(self.state_of(namespace, name), envelope, payload, msg)
                return
            # Acknowledged once a round that started after this wake-up is done (it folded our event).
            await self.rounds.request(key)
        finally:
            structlog.contextvars.unbind_contextvars("correlation_id", "workload")

    def _workload_lock(self, key: str) -> asyncio.Lock:
        lock = self._workload_locks.get(key)
        if lock is None:
            lock = self._workload_locks[key] = asyncio.Lock()
        return lock

    async def _round_of(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        async with self._workload_lock(key):
            await self.plan_round(self.state_of(namespace, name))

    async def _on_timer(
        self, state: WorkloadState, envelope: Envelope, timer: RequeueScheduled, msg: Msg
    ) -> None:
        left = (timer.due_at - datetime.now(UTC)).total_seconds()
        if left > 0.05:
            await msg.nak(delay=left)  # JetStream keeps the timer, across restarts too
            return
        await self.catch_up(state)
        due = rounds.requeue_due(state, decisions_stream(state.namespace, state.name), envelope, timer)
        if due is not None:
            await rounds.append(self.store, state, [due])
        await self.plan_round(state, force=True)

    # --- one round -----------------------------------------------------------------------------------

    async def plan_round(self, state: WorkloadState, *, force: bool = False) -> None:
        started = time.perf_counter()
        try:
            folded = await self.catch_up(state)
            if not folded and not force:
                return
            await self._decide(state)
        except ConcurrencyError as error:
            # Someone else wrote our decisions stream (a second planner during a hand-over): start over
            # from the store; the next wake-up plans on the fresh state.
            log.warning("decisions_stream_moved", error=str(error))
            key = f"{state.namespace}/{state.name}"
            self.workloads.pop(key, None)
            raise
        finally:
            PLANNING_SECONDS.observe(time.perf_counter() - started)

    async def _decide(self, state: WorkloadState) -> None:
        if state.cloneset is None or state.now is None:
            return
        if shadowed(state.cloneset, shadow_all=False):  # labelled rollbook.io/manage=shadow
            await self.shadow.record(state.namespace, state.name)
            return
        if not self.selection.manages(state.cloneset):
            return
        pending = state.pending()
        if pending:
            await self._wake_at(state, min(state.expectation_deadline(p) for p in pending))
            return
        leaving = state.leaving_with_claims()
        if leaving:
            # Normally the pod's DELETED observation wakes us first; its replacement then reuses its PVCs.
            await self._wake_at(state, min(leaving.values()) + EXPECTATION_TIMEOUT)
            return
        plan_input = state.plan_input()
        data, digest = encode_input(plan_input)
        plan = decide(data)
        decisions = decisions_for(state, plan)
        if not decisions:
            return
        envelopes = round_envelopes(state, digest, plan, decisions)
        correlation = envelopes[0].correlation_id
        await rounds.append(self.store, state, envelopes)
        actions = [d for d in decisions if isinstance(d, PodActionRequested)]
        log.info(
            "planned",
            correlation_id=correlation,
            step=plan.get("step"),
            actions=[f"{a.action}:{a.pod}" for a in actions],
            decisions=len(decisions),
        )

    async def _wake_at(self, state: WorkloadState, due: datetime) -> None:
        """Something blocks planning until ``due`` at the latest; make sure a timer wakes the workload."""
        timer = rounds.expectation_timer(state, decisions_stream(state.namespace, state.name), due)
        if timer is not None:
            await rounds.append(self.store, state, [timer])


def round_envelopes(
    state: WorkloadState, input_sha256: str, plan: dict[str, Any], decisions: list[Event]
) -> list[Envelope]:
    """The round's events as appended: ``RoundPlanned`` then the decisions, with their deterministic ids,
    versions and correlation. Pure (services/replay verifies recorded rounds against it)."""
    update_revision = plan.get("updateRevision") or state.update_revision
    correlation = rollout_id(state.namespace, state.name, update_revision) if update_revision else None
    return rounds.round_envelopes(
        state,
        decisions_stream(state.namespace, state.name),
        round_id=derived_id("round", *sorted(state.through().items())),
        input_sha256=input_sha256,
        decisions=decisions,
        correlation_id=correlation,
        rules=RULES_VERSION,
    )


def decisions_for(state: WorkloadState, plan: dict[str, Any]) -> list[Event]:
    """The decision events a plan means, given what was already decided (nothing is repeated). A pure
    function of the folded state and the plan: the replay calls it too."""
    now = state.now
    assert now is not None
    decisions: list[Event] = []
    rejected = plan.get("rejected")
    if rejected:
        key = (str(rejected.get("field")), str(rejected.get("reason")))
        if key != state.last_rejection:
            generation = (state.cloneset or {}).get("metadata", {}).get("generation")
            decisions.append(SpecRejected(field=key[0], reason=key[1], generation=generation))
    for revision in plan.get("revisions") or []:
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
    pruned = [n for n in plan.get("revisionsToDelete") or [] if n in state.revisions]
    if pruned:
        decisions.append(RevisionsPruned(names=pruned))
    update = plan.get("updateRevision")
    current = plan.get("currentRevision")
    replicas = int(((state.cloneset or {}).get("spec") or {}).get("replicas", 1) or 0)
    strategy = ((state.cloneset or {}).get("spec") or {}).get("updateStrategy") or {}
    if update and update != state.update_revision:
        if state.active_rollout:
            decisions.append(
                RolloutCompleted(rollout_id=state.active_rollout, revision=update, outcome="superseded")
            )
        if update != current:
            decisions.append(
                RolloutStarted(
                    rollout_id=rollout_id(state.namespace, state.name, update),
                    from_revision=str(current or ""),
                    to_revision=update,
                    strategy=strategy,
                    replicas=replicas,
                )
            )
        else:
            # First sight of a workload (or a return to the current revision): nothing to roll out.
            decisions.append(
                RolloutCompleted(rollout_id=rollout_id(state.namespace, state.name, update), revision=update)
            )
    active = rollout_id(state.namespace, state.name, update) if update else None
    if update and plan.get("partition") is not None and update != current:
        step = PartitionStepPlanned(
            rollout_id=str(active),
            partition=int(plan["partition"]),
            replicas=replicas,
            expected_updated=int(
                plan.get("expectedUpdatedReplicas") or max(replicas - int(plan["partition"]), 0)
            ),
            max_unavailable=int(plan.get("maxUnavailable") or 0),
            max_surge=int(plan.get("maxSurge") or 0),
        )
        step_key = (
            step.rollout_id,
            step.partition,
            step.replicas,
            step.expected_updated,
            step.max_unavailable,
            step.max_surge,
        )
        if step_key != state.last_step:
            decisions.append(step)
    round_key = derived_id("round", *sorted(state.through().items()))
    for index, action in enumerate(plan.get("actions") or []):
        decisions.append(_action(state, action, round_key, index, update))
    pods_to_delete = plan.get("podsToDelete")
    if pods_to_delete is not None:
        decisions.append(
            PodActionRequested(
                action_id=str(derived_id("action", round_key, "podsToDelete")),
                action="setPodsToDelete",
                namespace=state.namespace,
                pod=state.name,
                rollout_id=active,
                details={"podsToDelete": pods_to_delete},
            )
        )
    status = plan.get("status")
    if status is not None:
        # FailedScale / FailedUpdate come from the executors' outcomes, which the pure planner never sees.
        previous = (state.last_status or {}).get("conditions") or []
        failed = failure_conditions(previous, state.outcomes_since_last_round())
        status = with_failure_conditions(status, failed)
    if status is not None and status != state.last_status:
        decisions.append(
            StatusPlanned(kind="CloneSet", namespace=state.namespace, name=state.name, status=status)
        )
    status_now = status or state.last_status or {}
    started_now = any(isinstance(d, RolloutStarted) for d in decisions)
    # Complete means every desired pod is on the update revision AND ready again: an in-place updated pod
    # that has not come back is still part of the rollout.
    if (
        (state.active_rollout or started_now)
        and update
        and update == current
        and rollout_progress(state.cloneset or {}, status_now).complete
        and not plan.get("actions")
    ):
        decisions.append(
            RolloutCompleted(rollout_id=rollout_id(state.namespace, state.name, update), revision=update)
        )
    decisions.extend(_pause_transition(state, decisions, plan, status_now))
    requeue = plan.get("requeueAfterSeconds")
    if requeue and (decisions or not state.schedules):
        due = now + timedelta(seconds=float(requeue))
        if due not in state.schedules.values():
            decisions.append(RequeueScheduled(due_at=due, reason="grace"))
    return decisions


def _pause_transition(
    state: WorkloadState, decisions: list[Event], plan: dict[str, Any], status: dict[str, Any]
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
    elif progress.partition_reached and not progress.complete and not plan.get("actions"):
        partition = int(plan.get("partition") or 0)
        reason = f"partition {partition} reached: the pods it allows are updated and ready"
    if reason is not None and not paused:
        return [RolloutPaused(rollout_id=active, reason=reason)]
    if reason is None and paused:
        return [RolloutResumed(rollout_id=active)]
    return []


def _action(
    state: WorkloadState, action: dict[str, Any], round_key: Any, index: int, update: str | None
) -> PodActionRequested:
    kind = str(action.get("action"))
    pod = str(action.get("pod", ""))
    details = dict(action)
    # Deletes name the exact objects they target, so a later object with the same name is not
    # mistaken for the deleted one (expectations, and the executor's precondition).
    if kind == "deletePod":
        details["uid"] = state.uid_of("Pod", pod)
        if details.get("withPVCs"):
            details["pvcUids"] = {
                n: state.uid_of("PersistentVolumeClaim", n) for n in details.get("pvcs") or []
            }
    elif kind == "deletePVC":
        details["uid"] = state.uid_of("PersistentVolumeClaim", str(action.get("pvc")))
    elif kind in ("updateInPlace", "recreatePod", "markNotReady", "markReady", "patchPod"):
        details["uid"] = state.uid_of("Pod", pod)
    revision = action.get("revision") or None
    return PodActionRequested(
        action_id=str(derived_id("action", round_key, index)),
        action=kind,
        namespace=state.namespace,
        pod=pod,
        rollout_id=rollout_id(state.namespace, state.name, update) if update else None,
        revision=str(revision) if revision else None,
        details=details,
    )


async def run(settings: Settings) -> None:
    configure_logging(settings, "planner")
    async with ServiceRuntime(settings, "planner") as runtime:
        store = await EventStore.connect(settings.database_url)
        bus = await Bus.connect(settings, name="rollbook-planner")
        try:
            selection = await resolve_selection(settings, "planner")

            async def work() -> None:
                # A fresh Planner per leadership: its state is rebuilt from the store on first sight.
                planner = Planner(settings, store, selection)
                wake_ups = ConsumerSpec(
                    DURABLE,
                    INPUT_TYPES,
                    planner.handle,
                    batch=64,
                    ack_wait=ACK_WAIT,
                    concurrency=WAKE_UPS_IN_HAND,
                )
                await serve_consumers(runtime, bus, service="planner", consumers=[wake_ups])

            # One planner plans at a time (the decisions streams have a single writer); others stand by.
            await run_while_leading(runtime, settings, "planner", work)
        finally:
            await bus.close()
            await store.close()
