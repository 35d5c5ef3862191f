"""The planner service: one loop for every planned kind (CloneSet, SidecarSet; services/planner/kinds.py).
It folds each workload's events, asks ``next_step`` what to do, appends the result (docs/services.md,
"planner").

Bus messages are only wake-ups. A wake-up marks its workload dirty; one task per workload runs rounds
while it is dirty, so a burst of events for one workload leads to one round over all of them, and rounds
of different workloads run concurrently. A round catches the workload up from the event store (every
stream from the version after the last one folded), so redeliveries, reordering and restarts cannot make
it skip or double-fold an input; then it waits for what it expects (an expectation timer), or records a
``RoundPlanned`` naming exactly what it folded followed by the decisions, in one append with the
decisions stream's expected version (single writer). A wake-up is acknowledged once a round that covers
it has been appended, so a crash before that redelivers it. Event and action ids derive from the round,
so a re-run after a crash produces the same ids and stores nothing twice. The relay in the auditor
publishes them.

Requeues are durable timers on the bus: a ``RequeueScheduled`` message is nak'ed with the delay left, so
JetStream hands it back when it is due, after a restart too; then ``RequeueDue`` is appended and the
workload planned with ``now`` = the due time.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import nats.js.errors
import structlog
from nats.aio.msg import Msg

from services.infra.bus import DEFERRED, Bus, Consumer, Deferred
from services.infra.consumer_service import ConsumerSpec, report_consumer_lag
from services.infra.kruise import resolve_selection
from services.infra.metrics import EVENTS_APPENDED, EVENTS_HANDLED, PLANNING_PART_SECONDS, PLANNING_SECONDS
from services.infra.nats_auth import PLANNER
from services.infra.pacing import wait_for_pace
from services.infra.partition_leases import run_owning_partitions
from services.infra.retry import retry_until_stopped
from services.infra.runtime import ServiceRuntime, calm_cyclic_collector, configure_logging, run_until_stopped
from services.infra.settings import Settings
from services.infra.store import ConcurrencyError, EventStore
from services.kinds.cloneset.rules.decisions import RULES_VERSION as CLONESET_RULES_VERSION
from services.model import rounds
from services.model.event_store import StoredEvent
from services.model.events import Envelope, PodActionRequested, PodActionStarted, RequeueScheduled
from services.model.management import Selection
from services.model.shadow import shadowed
from services.planner.kinds import KINDS, KindPlanner, Round, Wait, kind_for_stream, next_step
from services.planner.shadow_service import ShadowRecorder

log = structlog.get_logger("planner")

# The single durable of earlier versions; each partition now has its own, planner-p<N>.
DURABLE = "planner"
# A round takes milliseconds; a wake-up lost with a crashed planner comes back after this.
ACK_WAIT = 10.0
INPUT_TYPES = (
    "ObjectObserved",
    "PodActionSucceeded",
    "PodActionFailed",
    "RequeueScheduled",
    "StoreLossDetected",
)
# A timer due within this many seconds fires now rather than going back to the bus for so short a wait.
TIMER_SLACK_SECONDS = 0.05
# A failed round's wake-ups come back after this (the next delivery plans the workload afresh).
RETRY_DELAY_SECONDS = 1.0
# Events a catch-up folds before giving the event loop a turn.
FOLD_SLICE = 500
# Events a rebuild reads at a time. Read at once, the history of a 10,000-pod CloneSet after a scale-out and
# an in-place rollout (some 100,000 pod observations, 15 KiB each decoded) is 2 GB held at once, which the
# process keeps: 40,000 observations peaked at 883 MiB and kept 433 MiB, 239 MiB read in pages.
REBUILD_PAGE = 2_000
# The planner's Postgres connections, all kept open (no overflow, as the executor's): the rounds of many
# workloads run at once, one connection each at a time, and a pool with overflow opened connections for
# every burst of rounds beyond its size and closed them after it (each a connect, a type introspection of
# every statement, a Postgres backend). The rounds beyond it wait for a connection instead.
STORE_CONNECTIONS = 10


async def connect_store(settings: Settings) -> EventStore:
    return await EventStore.connect(settings.database_url, pool_size=STORE_CONNECTIONS, max_overflow=0)


async def catch_up(store: EventStore, state: rounds.FoldedState) -> int:
    """Fold every event of the state's streams not folded yet; returns how many. The streams are read in
    one statement (one connection and round trip, not one per stream) and folded one after another, in
    their order. A state that folded nothing yet (a rebuild: the planner started, took the partition over,
    or forgot the state after a failed round) reads the workload's whole history instead: page by page,
    each stream in turn, in the same order, so only one page is held decoded at a time."""
    positions = [(stream, state.versions.get(stream, 0) + 1) for stream in state.streams]
    if any(version > 1 for _, version in positions):
        return await _fold(state, await store.read_streams(positions), 0)
    folded = 0
    for stream, version in positions:
        while True:
            page = await store.read_stream(stream, version, REBUILD_PAGE)
            folded = await _fold(state, [page], folded)
            if len(page) < REBUILD_PAGE:
                break
            version = page[-1].envelope.stream_version + 1
    return folded


async def _fold(state: rounds.FoldedState, batches: list[list[StoredEvent]], folded: int) -> int:
    for batch in batches:
        for stored in batch:
            state.fold(stored.envelope)
            folded += 1
            if folded % FOLD_SLICE == 0:
                # A rebuild folds a workload's whole history (tens of thousands of events at 5,000 pods):
                # let the Lease renewals and the other workloads' rounds run in between.
                await asyncio.sleep(0)
    return folded


async def append(store: EventStore, state: rounds.FoldedState, envelopes: list[Envelope]) -> None:
    """Append to one decisions stream at the version the state folded (single writer), then fold them."""
    stream = envelopes[0].stream
    result = await store.append(envelopes, expected_version=state.versions.get(stream, 0))
    for envelope in envelopes:
        state.fold(envelope)
    for envelope in result.events:
        EVENTS_APPENDED.labels("planner", envelope.type).inc()


@dataclass
class Workload:
    """One planned workload: its folded state and the wake-ups its next round answers."""

    kind: KindPlanner[Any]
    key: str
    state: Any  # the kind's FoldedState
    dirty: bool = False
    forced: bool = False  # a timer fired: plan even if nothing new was folded
    timers: list[tuple[Envelope, RequeueScheduled]] = field(default_factory=list)  # due, to record
    waiting: list[Msg] = field(default_factory=list)  # settled once a round covering them is appended
    task: asyncio.Task[None] | None = None
    partition: int | None = None  # the bus partition its wake-ups come from
    in_round: list[Msg] = field(default_factory=list)  # the wake-ups the running round answers
    # stream -> the highest version the waiting wake-ups announce (rounds.all_folded)
    announced: dict[str, int] = field(default_factory=dict)
    round_started: float | None = None  # monotonic time the last round began (pacing)


class Planner:
    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        selection: Selection | None = None,
        *,
        kinds: tuple[KindPlanner[Any], ...] = KINDS,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.kinds = kinds
        self.stopping = stopping  # set when the process stops: rounds waiting out an outage give up
        # Which objects we plan for (services/model/management.py); the others are only observed.
        self.selection = selection or Selection.parse(settings.manage, settings.manage_namespaces)
        # CloneSets rollbook only observes (docs/shadow.md): all of them in shadow mode, else those labelled.
        # In shadow mode a trail with nothing stored starts at this process's start (shadow mode's own).
        self.shadow = ShadowRecorder(
            store,
            shadow_all=settings.shadow,
            rules=CLONESET_RULES_VERSION,
            since=datetime.now(UTC) if settings.shadow else None,
        )
        self.workloads: dict[tuple[str, str], Workload] = {}  # (kind, key) -> workload

    def workload(self, kind: KindPlanner[Any], key: str) -> Workload:
        workload = self.workloads.get((kind.kind, key))
        if workload is None:
            workload = Workload(kind, key, kind.new_state(key))
            self.workloads[(kind.kind, key)] = workload
        return workload

    # --- handling bus messages -----------------------------------------------------------------------

    async def handle(self, envelope: Envelope, msg: Msg, *, partition: int | None = None) -> Deferred | None:
        """A wake-up from the consumer of ``partition`` (all events of one workload share a partition)."""
        EVENTS_HANDLED.labels("planner", envelope.type).inc()
        payload = envelope.payload
        if isinstance(payload, PodActionStarted):
            # No input (rounds.advance): the action's outcome, stored after it, wakes the workload. Our
            # filter excludes it, but a server before NATS 2.10 ignores a consumer's several filter
            # subjects and delivers every event type.
            return None
        kind = kind_for_stream(envelope.stream, self.kinds)
        if kind is None:
            return None  # not a planned workload's event (e.g. an observation of another kind)
        if self.settings.shadow and not kind.shadowed:
            return None  # shadow mode acts on nothing; only a kind that can be shadowed has a trail
        key = kind.workload_of(envelope.stream)
        assert key is not None
        workload = self.workload(kind, key)
        workload.partition = partition
        if isinstance(payload, RequeueScheduled):
            left = (payload.due_at - datetime.now(UTC)).total_seconds()
            if left > TIMER_SLACK_SECONDS:
                await msg.nak(delay=left)  # JetStream keeps the timer, across restarts too
                return None
            workload.timers.append((envelope, payload))
            workload.forced = True
        else:
            announced = workload.announced
            announced[envelope.stream] = max(announced.get(envelope.stream, 0), envelope.stream_version)
        self.wake(workload, msg)
        return DEFERRED

    def wake(self, workload: Workload, msg: Msg | None = None) -> None:
        """Mark the workload dirty; its task (started if none runs) plans it until it is clean."""
        workload.dirty = True
        if msg is not None:
            workload.waiting.append(msg)
        if workload.task is None:
            workload.task = asyncio.create_task(
                self._run(workload), name=f"planner-{workload.kind.kind}-{workload.key}"
            )

    async def _run(self, workload: Workload) -> None:
        try:
            while workload.dirty:
                # Wake-ups arriving within the pace interval of the last round go with the next one.
                await wait_for_pace(workload.round_started, self.settings.pace_interval)
                workload.dirty = False
                waiting, workload.waiting = workload.waiting, []
                workload.in_round = waiting
                timers, workload.timers = workload.timers, []
                forced, workload.forced = workload.forced, False
                announced, workload.announced = workload.announced, {}
                if not timers and not forced and rounds.all_folded(workload.state.versions, announced):
                    # A round already read these events (the catch-up reads every stream to its end, so
                    # often ahead of their wake-ups): reading again would find nothing to plan on, and
                    # every event newer than what was folded brings a wake-up of its own.
                    await _settle(waiting, ok=True)
                    workload.in_round = []
                    continue
                # Only a round that reads counts: settling wake-ups already folded delays nothing.
                workload.round_started = time.monotonic()
                try:
                    await self._round_waiting_out_outages(workload, waiting, timers, forced)
                except Exception as error:
                    # The wake-ups come back from the bus (after ack_wait at worst) and plan again.
                    log.warning(
                        "round_failed",
                        kind=workload.kind.kind,
                        workload=workload.key,
                        error=f"{type(error).__name__}: {error}",
                    )
                    # Forget what the failed round folded: the redelivered wake-ups would otherwise
                    # find their events folded and be settled without the round that failed.
                    workload.state = workload.kind.new_state(workload.key)
                    workload.in_round = []
                    await _settle(waiting, ok=False)
                    continue
                await _settle(waiting, ok=True)
                workload.in_round = []
        finally:
            workload.task = None

    async def _round_waiting_out_outages(
        self,
        workload: Workload,
        waiting: list[Msg],
        timers: list[tuple[Envelope, RequeueScheduled]],
        forced: bool,
    ) -> None:
        """One round; while Postgres or NATS is unreachable it is retried here (its wake-ups kept in
        progress) instead of spending their deliveries: an outage is not the wake-ups' fault."""
        attempts = 0

        async def attempt() -> None:
            nonlocal attempts
            attempts += 1
            # A retry may find everything folded by the failed attempt: it must still plan.
            await self.plan_round(workload, timers=timers, force=forced or attempts > 1)

        def still_working(error: BaseException, attempt_number: int) -> None:
            for msg in waiting:
                asyncio.ensure_future(_quietly(msg.in_progress()))

        await retry_until_stopped(
            attempt, what="planner round", stopping=self.stopping, on_retry=still_working
        )

    async def close(self) -> None:
        """Stop every workload's task; their unsettled wake-ups come back from the bus."""
        await self._forget(list(self.workloads))

    async def drop_partition(self, partition: int) -> None:
        """Forget every workload of ``partition``: its rounds are cancelled, its unsettled wake-ups handed
        back to the bus at once, its state dropped, so whichever planner owns the partition next (this
        one again, or another) rebuilds it from the store."""
        await self._forget([k for k, w in self.workloads.items() if w.partition == partition])

    async def _forget(self, keys: list[tuple[str, str]]) -> None:
        dropped = [self.workloads.pop(key) for key in keys]
        tasks = [w.task for w in dropped if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _settle([m for w in dropped for m in (*w.in_round, *w.waiting)], ok=False, delay=0.0)

    # --- one round -----------------------------------------------------------------------------------

    async def plan_round(
        self,
        workload: Workload,
        *,
        timers: list[tuple[Envelope, RequeueScheduled]] | None = None,
        force: bool = False,
    ) -> None:
        """Catch the workload up, record the timers that fired, and do what ``next_step`` says."""
        kind, state = workload.kind, workload.state
        started = time.perf_counter()
        structlog.contextvars.bind_contextvars(workload=f"{kind.kind}/{workload.key}")
        try:
            if self.settings.shadow:  # every CloneSet is shadowed: its shadow trail only, no state
                await self.shadow.record(*workload.key.split("/", 1))
                return
            part = time.perf_counter()
            folded = await catch_up(self.store, state)
            part = _timed("catch_up", part)
            for timer_event, timer in timers or []:
                due = rounds.requeue_due(state, kind.decisions_stream(state), timer_event, timer)
                if due is not None:
                    await append(self.store, state, [due])
            if not folded and not force:
                return
            observed = kind.workload_object(state)
            if observed is not None and state.now is not None:
                if kind.shadowed and shadowed(observed, shadow_all=False):  # rollbook.io/manage=shadow
                    await self.shadow.record(*workload.key.split("/", 1))
                    return
                if not self.selection.manages(observed):
                    return  # observed, not managed: no round, no decision
            part = time.perf_counter()
            step = next_step(kind, state)
            part = _timed("decide", part)
            if isinstance(step, Wait):
                if step.timer is not None:
                    await append(self.store, state, [step.timer])
            elif isinstance(step, Round):
                await append(self.store, state, step.envelopes)
                _timed("append", part)
                if step.rollout_input is not None:
                    await self._keep_rollout_input(step.envelopes[0].event_id, step.rollout_input)
                correlation = step.envelopes[0].correlation_id
                log.info(
                    "planned",
                    correlation_id=correlation,
                    kind=kind.kind,
                    decisions=[type(d).__name__ for d in step.decisions],
                    actions=[
                        f"{d.action}:{d.namespace}/{d.target}"
                        for d in step.decisions
                        if isinstance(d, PodActionRequested)
                    ],
                )
        except ConcurrencyError as error:
            # Someone else wrote our decisions stream (a second planner during a hand-over): start over
            # from the store; the redelivered wake-up plans on the fresh state.
            log.warning("decisions_stream_moved", error=str(error))
            workload.state = kind.new_state(workload.key)
            raise
        finally:
            structlog.contextvars.unbind_contextvars("workload")
            PLANNING_SECONDS.observe(time.perf_counter() - started)

    async def _keep_rollout_input(self, round_event_id: UUID, input_json: bytes) -> None:
        """Store the input of a round that started a rollout (what-if starts there). Its round is stored
        already; losing the input costs only speed (what-if then folds the events), so a failure is
        logged and the round goes on."""
        try:
            await self.store.store_round_input(round_event_id, input_json)
        except Exception as error:  # noqa: BLE001 - an accelerator: never fail the round for it
            log.warning("rollout_input_not_stored", round=str(round_event_id), error=str(error))


def _timed(part: str, since: float) -> float:
    """Count the time since ``since`` toward ``part`` of a round; returns now."""
    now = time.perf_counter()
    PLANNING_PART_SECONDS.labels(part).inc(now - since)
    return now


async def _quietly(work: Any) -> None:
    try:
        await work
    except Exception:  # telling JetStream we still work on it is best effort
        log.debug("in_progress_failed", exc_info=True)


async def _settle(messages: list[Msg], *, ok: bool, delay: float = RETRY_DELAY_SECONDS) -> None:
    for msg in messages:
        try:
            if ok:
                await msg.ack()
            else:
                await msg.nak(delay=delay or None)
        except Exception:  # the connection may be gone: the message comes back after ack_wait
            log.debug("settle_failed", exc_info=True)


def partition_durable(partition: int) -> str:
    return f"{DURABLE}-p{partition}"


class PartitionConsumers:
    """The wake-up consumers of the bus partitions this process owns (docs/services.md, "planner"): one
    durable per partition, ``planner-p<N>``, run only by the partition's owner, so a workload (all its
    events share a partition) is planned by one planner at a time. Dropping a partition stops its consumer,
    then its workloads' rounds, and forgets their state."""

    def __init__(self, runtime: ServiceRuntime, bus: Bus, planner: Planner) -> None:
        self.runtime = runtime
        self.bus = bus
        self.planner = planner
        self.running: dict[int, tuple[Consumer, asyncio.Task[None], asyncio.Task[None]]] = {}

    async def acquired(self, partition: int) -> None:
        """Start the partition's consumer (the bus stream was ensured at start)."""
        spec = ConsumerSpec(
            partition_durable(partition),
            INPUT_TYPES,
            functools.partial(self.planner.handle, partition=partition),
            batch=64,
            ack_wait=ACK_WAIT,
            partition=partition,
        )
        consumer = spec.consumer(self.bus)
        task = asyncio.create_task(consumer.run(), name=f"planner-{spec.durable}")
        task.add_done_callback(self._ended)
        lag = asyncio.create_task(report_consumer_lag(self.bus, self.runtime, "planner", spec.durable))
        self.running[partition] = (consumer, task, lag)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A partition's consumer ended on its own (not stopped with its partition): the service stops."""
        if task.cancelled() or self.runtime.stopping.is_set():
            return
        if not any(running is task for _, running, _ in self.running.values()):
            return  # stopped with its partition
        error = task.exception() or RuntimeError(f"{task.get_name()} ended while the service was running")
        self.runtime.task_failed(task, error)

    async def dropped(self, partition: int, graceful: bool) -> None:
        found = self.running.pop(partition, None)
        if found is not None:
            consumer, task, lag = found
            consumer.stop()
            lag.cancel()
            if not graceful:
                task.cancel()  # the Lease is lost: no time to finish the message in hand
            await asyncio.gather(task, lag, return_exceptions=True)
        await self.planner.drop_partition(partition)


async def run(settings: Settings) -> None:
    configure_logging(settings, "planner")
    calm_cyclic_collector()  # each message decodes into many containers, none in a cycle (runtime.py)
    async with ServiceRuntime(settings, "planner") as runtime:
        store = await connect_store(settings)
        bus = await Bus.connect(settings, name="rollbook-planner", identity=PLANNER)
        bus.bodies = store.read_event  # events larger than a bus message are read from the store
        planner: Planner | None = None
        try:
            selection = await resolve_selection(settings, "planner")
            planner = Planner(settings, store, selection, stopping=runtime.stopping)
            await bus.ensure_stream()
            try:  # replaced by the partition durables; left alone it would only pile up lag
                await bus.js.delete_consumer(bus.stream, DURABLE)
            except nats.js.errors.NotFoundError:
                pass
            consumers = PartitionConsumers(runtime, bus, planner)
            # Each partition is planned by the one replica holding its Lease; replicas share them out.
            owning = asyncio.create_task(
                run_owning_partitions(
                    runtime, settings, "planner", acquired=consumers.acquired, dropped=consumers.dropped
                ),
                name="planner-partitions",
            )
            # The store losing what this planner appended (an asynchronous failover) stops it: its
            # successor plans from the record as it is.
            watching = asyncio.create_task(store.watch_appends(runtime.stopping), name="store-failover-watch")
            await run_until_stopped(runtime, owning, watching)
            await owning
        finally:
            if planner is not None:
                await planner.close()
            await bus.close()
            await store.close()
