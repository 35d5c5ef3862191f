"""Replay, verify and what-if over the event store: the store reads at the edge, the pure cores
(timeline, verify, whatif) in between. The CLI (services/cli/replay.py) and the benchmark call these.

    lines = await replay_lines(store, "default/sample")                        # one line per event
    records = await replay_records(store, "default/sample")                    # the same, as dicts
    frames = await replay_frames(store, "default/sample")      # each event and the pods it changed (UI)
    summary, last = await replay_at(store, "default/sample", at_time=..., at_position=...)
    report = await verify_target(store, "default/sample@sample-7656fc4998#1", decide=...)
    report = await verify_sidecarset(store, "mesh-sidecar")
    reports = await verify_all(store, decide=...)               # every CloneSet and SidecarSet, one pass
    log = await verify_log(store, decide=...)                   # the same and every recorded workload
    result = await what_if_rollout(store, "default/sample@sample-7656fc4998#1", {"partition": 0})
"""

from __future__ import annotations

import asyncio
import gc
import heapq
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from services.kinds import registry
from services.kinds.base import Kind
from services.kinds.cloneset.rules.decisions import Decide
from services.kinds.cloneset.rules.decisions import decide as planner_decide
from services.kinds.registry import RECORDED
from services.model.event_store import EventStore, StoredEvent
from services.model.events import ObjectObserved, RolloutStarted, RoundPlanned
from services.model.streams import ROLLOUT_SEQUENCE_MARK
from services.planner.kinds import CLONESET, SIDECARSET, CloneSetPlanner, KindPlanner
from services.replay.reads import (
    TargetError,
    numbered_events,
    parse_target,
    resolve_rollout,
    rollout_span,
    split_kind,
    workload_events,
)
from services.replay.recorded import (
    RecordedReport,
    RecordedStep,
    RecordedVerifier,
    check_recorded,
    recorded_steps,
)
from services.replay.timeline import (
    PodFacts,
    Step,
    event_text,
    fold_timeline,
    one_line,
    summarise,
    summary_at,
)
from services.replay.verify import VerifyReport, WorkloadVerifier, verify_streams
from services.replay.whatif import (
    RecordedRollout,
    StartState,
    WhatIfResult,
    checked_input,
    record_from,
    replan,
    what_if,
)

T = TypeVar("T")

# Rows per page read from the store. Small pages keep a page's rows, envelopes and payloads in the CPU
# cache while they are decoded and folded: measured on the replay benchmark, 500-row pages cost ~6 µs of
# CPU per event against ~10 µs with 5000-row pages (the extra round trips are ~0.1 µs per event), and
# the next page (~0.7 MB) fits the socket buffer, so Postgres produces it while this one is folded.
PAGE_SIZE = 500


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Replay allocates millions of small acyclic dicts and keeps many alive (the rows read, their
    decoded payloads, the folded states); the cyclic collector would re-scan them all again and again
    (measured: decode 8x slower; reading a 200-pod CloneSet's 6,600 events 4x slower). Nothing built here
    has cycles, so reference counting frees everything; the collector resumes afterwards (it nests: an
    inner pause leaves an outer one in force)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def _events_for(
    store: EventStore, target: str, *, span_only: bool = False
) -> tuple[str, str, list[StoredEvent], tuple[int, int] | None]:
    """The workload's events and, for a rollout id, the rollout's span. ``span_only``: the caller looks at
    nothing after the span, so a rollout's events are read up to its last (its workload's later rollouts
    are not read) when the store names that span for the rollout id as given."""
    namespace, name, rollout = parse_target(target)
    with cyclic_gc_paused():  # the rows and their payloads: 6,600 events of a 200-pod CloneSet
        if span_only and rollout is not None and ROLLOUT_SEQUENCE_MARK in rollout:
            stored = await store.correlation_span(rollout)
            if stored is not None:
                events = await workload_events(store, namespace, name, stored[1])
                # The span read as replay reads it (numbered) must be the one the store named.
                if events and _span_of(events, rollout) == stored:
                    return namespace, name, events, stored
        events = await workload_events(store, namespace, name)
    if not events:
        raise TargetError(f"no events for workload {namespace}/{name}")
    span = rollout_span(events, resolve_rollout(events, rollout)) if rollout else None
    return namespace, name, events, span


def _span_of(events: list[StoredEvent], rollout: str) -> tuple[int, int] | None:
    try:
        return rollout_span(events, rollout)
    except TargetError:
        return None


async def replay_lines(store: EventStore, target: str) -> list[str]:
    """One line per event of the workload (or of the rollout), each with the state right after it."""
    kind, rest = split_kind(target)
    if kind is not None:
        return [_recorded_line(step) for step in (await replay_recorded(store, kind, rest))[0]]
    return await _span_steps(store, target, one_line)


async def replay_records(store: EventStore, target: str) -> list[dict[str, Any]]:
    """The same as JSON-able records: the event's coordinates and the full state after it."""
    kind, rest = split_kind(target)
    if kind is not None:
        steps = (await replay_recorded(store, kind, rest))[0]
        return [_coordinates(step.event) | {"state": step.state} for step in steps]
    return await _span_steps(store, target, _record)


async def replay_frames(store: EventStore, target: str) -> list[dict[str, Any]]:
    """What the UI's slider shows: per event of the workload (or of the rollout), its coordinates and
    ``pods``, the summaries of the pods that changed since the event before (of every pod at the first
    event; a pod gone is None). A page rebuilds the pods after event i from frames 0..i; sending every
    pod after every event made a 200-pod rollout's answer 40 MB."""
    kind, rest = split_kind(target)
    if kind is None:
        return (await cloneset_frames(store, target)).frames
    frames: list[dict[str, Any]] = []
    shown: dict[str, Any] | None = None  # the pods of the frame before
    for step in (await replay_recorded(store, kind, rest))[0]:
        now: dict[str, Any] = step.state["pods"]
        if shown is None:
            changed = dict(now)
        else:
            changed = {name: pod for name, pod in now.items() if shown.get(name) != pod}
            changed.update({name: None for name in shown if name not in now})
        frames.append(_coordinates(step.event) | {"pods": changed})
        shown = now
    return frames


@dataclass
class CloneSetFrames:
    """A CloneSet's frames (``replay_frames``) and, for each pod or CloneSet observation among them, the
    row the SQL view ``unavailability`` holds for it (position, at, replicas, available, unavailable),
    counted by the same rule (services/model/availability.py) in the same fold: the UI's rollout reads
    both from one pass over the events instead of asking Postgres for the view beside it."""

    frames: list[dict[str, Any]]
    unavailability: list[dict[str, Any]]


async def cloneset_frames(store: EventStore, target: str) -> CloneSetFrames:
    """``replay_frames`` of a CloneSet (``<namespace>/<name>`` or one of its rollout ids), with the
    unavailability rows of its span."""
    with cyclic_gc_paused():
        namespace, name, events, span = await _events_for(store, target, span_only=True)
        result = _cloneset_frames(namespace, name, events, span)
        del events  # freed while the collector still waits (``_span_steps``)
    return result


def _cloneset_frames(
    namespace: str, name: str, events: list[StoredEvent], span: tuple[int, int] | None
) -> CloneSetFrames:
    observed = registry.CLONESET.observed_stream(namespace, name)
    frames: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    replicas: int | None = None  # the view's: the latest spec.replicas a CloneSet observation carried
    first = True
    for step in fold_timeline(namespace, name, events, span[0] if span else 0):
        stored = step.event
        envelope = stored.envelope
        payload = envelope.payload
        # A row of the view: an observation of a pod or of the CloneSet in its observed stream.
        row = (
            payload
            if isinstance(payload, ObjectObserved)
            and envelope.stream == observed
            and payload.kind in ("Pod", registry.CLONESET.name)
            else None
        )
        if row is not None and row.kind == registry.CLONESET.name and row.change != "DELETED":
            replicas = _spec_replicas(row.object, replicas)
        position = stored.global_position
        if span is not None and position > span[1]:
            break
        if span is not None and position < span[0]:
            continue
        tally = step.pods
        if first:
            first = False
            pods: dict[str, Any] = tally.summaries()
        else:
            pods = {pod: _summary_of(tally.facts.get(pod)) for pod in tally.changed}
        frames.append(_coordinates(stored) | {"pods": pods})
        if row is not None:
            available = tally.available
            rows.append(
                {
                    "position": position,
                    "at": envelope.occurred_at.isoformat(),
                    "replicas": replicas,
                    "available": available,
                    "unavailable": max((replicas or 0) - available, 0),
                }
            )
    return CloneSetFrames(frames, rows)


def _spec_replicas(cloneset: dict[str, Any], before: int | None) -> int | None:
    """spec.replicas as the view reads it (``(spec ->> 'replicas')::integer``): a number, or the one
    before when absent."""
    value = (cloneset.get("spec") or {}).get("replicas")
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    return before


def _summary_of(facts: PodFacts | None) -> dict[str, Any] | None:
    return None if facts is None else facts.summary


async def replay_recorded(
    store: EventStore, kind: Kind, target: str
) -> tuple[list[RecordedStep], RecordedReport]:
    """A recorded workload (``<namespace>/<name>`` or one of its rollout ids): the state after each event
    of its observed and recorded streams (within the rollout's span for a rollout id), and the check of its
    stored trail against the fold of its observations."""
    namespace, name, rollout = parse_target(target)
    observed, recorded = (
        await store.read_stream(kind.observed_stream(namespace, name)),
        await store.read_stream(kind.recorded_stream(namespace, name)),
    )
    if not observed and not recorded:
        raise TargetError(f"no events for {kind.name} {namespace}/{name}")
    events = list(heapq.merge(observed, recorded, key=lambda e: e.global_position))
    span = rollout_span(recorded, resolve_rollout(recorded, rollout)) if rollout else None
    steps = [
        step
        for step in recorded_steps(kind, namespace, name, events)
        if span is None or span[0] <= step.event.global_position <= span[1]
    ]
    report = check_recorded(
        kind, namespace, name, [e.envelope for e in observed], [e.envelope for e in recorded]
    )
    return steps, report


async def verify_recorded(store: EventStore, target: str) -> RecordedReport:
    """``<Kind>/<namespace>/<name>``: whether its stored trail is the fold of its observations."""
    kind, rest = split_kind(target)
    if kind is None:
        raise TargetError(f"expected <kind>/<namespace>/<name> of a recorded kind, got {target!r}")
    return (await replay_recorded(store, kind, rest))[1]


def _recorded_line(step: RecordedStep) -> str:
    """One line per event: what was observed or recorded, and the workload right after it."""
    stored, state = step.event, step.state
    what = event_text(stored.envelope)
    ready = sum(1 for p in state["pods"].values() if p["ready"])
    return (
        f"{stored.global_position:>8} {stored.recorded_at.isoformat()} {what:<48}"
        f" update={state['updateRevision'] or '-'} rollout={state['activeRollout'] or '-'}"
        f" pods={len(state['pods'])} ready={ready}"
    )


def _coordinates(stored: StoredEvent) -> dict[str, Any]:
    envelope = stored.envelope
    return {
        "position": stored.global_position,
        "recordedAt": stored.recorded_at.isoformat(),
        "stream": envelope.stream,
        "streamVersion": envelope.stream_version,
        "type": envelope.type,
        "eventId": str(envelope.event_id),
    }


def _record(step: Step) -> dict[str, Any]:
    return _coordinates(step.event) | {"state": summarise(step.state, step.pods)}


async def _span_steps(store: EventStore, target: str, render: Callable[[Step], T]) -> list[T]:
    """Each step of the target's span, rendered at once (the next fold mutates the state)."""
    with cyclic_gc_paused():
        namespace, name, events, span = await _events_for(store, target, span_only=True)
        rendered = _render_span(namespace, name, events, span, render)
        # Freed by reference counting while the collector still waits: resumed, it would first scan
        # every event and payload still alive (~20 ms for a 200-pod CloneSet's 6,600 events).
        del events
    return rendered


def _render_span(
    namespace: str,
    name: str,
    events: list[StoredEvent],
    span: tuple[int, int] | None,
    render: Callable[[Step], T],
) -> list[T]:
    rendered: list[T] = []
    for step in fold_timeline(namespace, name, events, span[0] if span else 0):
        position = step.event.global_position
        if span and position > span[1]:
            break
        if span is None or position >= span[0]:
            rendered.append(render(step))
    return rendered


async def replay_at(
    store: EventStore, target: str, *, at_time: datetime | None = None, at_position: int | None = None
) -> tuple[dict[str, Any], StoredEvent | None]:
    """The workload's state after the last event at or before the time / position (for a rollout id with
    neither: at the rollout's last event)."""
    kind, rest = split_kind(target)
    if kind is not None:
        steps = (await replay_recorded(store, kind, rest))[0]
        if at_time is None and at_position is None and steps:
            at_position = steps[-1].event.global_position
        shown = [
            s
            for s in steps
            if (at_position is None or s.event.global_position <= at_position)
            and (at_time is None or s.event.recorded_at <= at_time)
        ]
        return (shown[-1].state, shown[-1].event) if shown else ({}, None)
    namespace, name, events, span = await _events_for(store, target)
    if span and at_time is None and at_position is None:
        at_position = span[1]
    return summary_at(namespace, name, events, at_time=at_time, at_position=at_position)


async def verify_target(store: EventStore, target: str, decide: Decide = planner_decide) -> VerifyReport:
    namespace, name, events, span = await _events_for(store, target, span_only=True)
    verifier = WorkloadVerifier.cloneset(namespace, name, decide)
    for stored in events:
        if span and stored.global_position > span[1]:
            break
        verifier.feed(stored.envelope)
        if verifier.done:
            break
    return verifier.finish()


async def verify_sidecarset(store: EventStore, name: str) -> VerifyReport:
    """Every recorded round of SidecarSet ``name`` (its observed, actions and decisions streams)."""
    state = SIDECARSET.new_state(name)
    streams = [
        [s.envelope for s in numbered_events(await store.read_stream(stream))] for stream in state.streams
    ]
    return verify_streams(SIDECARSET, name, *streams)


@dataclass
class LogVerification:
    """``verify --all``: every planned workload's report (CloneSets then SidecarSets) and every recorded
    workload's (Deployments then StatefulSets), each sorted by workload."""

    planned: list[VerifyReport]
    recorded: list[RecordedReport]


async def verify_all(
    store: EventStore, decide: Decide = planner_decide, batch_size: int = PAGE_SIZE
) -> list[VerifyReport]:
    """Every workload of every planned kind in one pass over the log in global order, CloneSets (with
    ``decide``) then SidecarSets, each sorted by key. Memory: the inputs between two rounds of each
    workload."""
    with cyclic_gc_paused():
        return (await _verify_log(store, decide, batch_size, with_recorded=False)).planned


async def verify_log(
    store: EventStore, decide: Decide = planner_decide, batch_size: int = PAGE_SIZE
) -> LogVerification:
    """``verify_all`` and, in the same pass, every recorded workload's trail against its observations.
    Memory: also the folded events each recorder has not stored yet."""
    with cyclic_gc_paused():
        return await _verify_log(store, decide, batch_size, with_recorded=True)


async def _verify_log(
    store: EventStore, decide: Decide, batch_size: int, *, with_recorded: bool
) -> LogVerification:
    kinds: tuple[KindPlanner[Any], ...] = (
        CLONESET if decide is planner_decide else CloneSetPlanner(decide),
        SIDECARSET,
    )
    verifiers: dict[tuple[int, str], WorkloadVerifier] = {}  # (kind's rank, key) -> its verifier
    trails: dict[tuple[int, str, str], RecordedVerifier] = {}  # (kind's rank, namespace, name) -> its check
    # stream -> what it feeds (None: nothing to verify, e.g. a SidecarSet's injections)
    by_stream: dict[str, WorkloadVerifier | RecordedVerifier | None] = {}
    async for batch in store.read_all_batches(0, batch_size):
        for stored in batch:
            envelope = stored.envelope
            try:
                target = by_stream[envelope.stream]
            except KeyError:
                target = _verifier_for(envelope.stream, kinds, verifiers)
                if target is None and with_recorded:
                    target = _trail_for(envelope.stream, trails)
                by_stream[envelope.stream] = target
            if target is not None:
                target.feed(envelope)
    return LogVerification(
        [verifiers[key].finish() for key in sorted(verifiers)],
        [trails[key].finish() for key in sorted(trails)],
    )


def _verifier_for(
    stream: str, kinds: tuple[KindPlanner[Any], ...], verifiers: dict[tuple[int, str], WorkloadVerifier]
) -> WorkloadVerifier | None:
    for rank, kind in enumerate(kinds):
        key = kind.workload_of(stream)
        if key is None:
            continue
        verifier = verifiers.get((rank, key))
        if verifier is None:
            verifier = verifiers[(rank, key)] = WorkloadVerifier(kind, key)
        return verifier
    return None  # no planned workload's stream: nothing to verify


def _trail_for(stream: str, trails: dict[tuple[int, str, str], RecordedVerifier]) -> RecordedVerifier | None:
    """The check of the recorded workload whose observed or recorded stream ``stream`` is, else None."""
    for rank, kind in enumerate(RECORDED):
        workload = kind.workload_of(stream)
        if workload is None or stream not in (
            kind.observed_stream(*workload),
            kind.recorded_stream(*workload),
        ):
            continue
        trail = trails.get((rank, *workload))
        if trail is None:
            trail = trails[(rank, *workload)] = RecordedVerifier(kind, *workload)
        return trail
    return None


async def what_if_rollout(store: EventStore, rollout_id: str, overrides: dict[str, Any]) -> WhatIfResult:
    namespace, name, rollout = parse_target(rollout_id)
    if rollout is None:
        raise TargetError(f"what-if takes a rollout id <namespace>/<name>@<revision>, got {rollout_id!r}")
    with cyclic_gc_paused():
        recorded = await recorded_from_round_input(store, namespace, name, rollout)
        if recorded is not None:
            return replan(recorded, rollout, overrides)
        events = await workload_events(store, namespace, name)
    return what_if(namespace, name, events, resolve_rollout(events, rollout), overrides)


# The rollout's first events read to find the round that started it: its RoundPlanned, the revisions it
# records, then its RolloutStarted.
_ROUND_HEAD = 16


async def recorded_from_round_input(
    store: EventStore, namespace: str, name: str, rollout: str
) -> RecordedRollout | None:
    """The rollout as recorded, read from the round that started it on: its starting state is the
    round's stored input (``round_inputs``) when the input's SHA-256 is the one the round recorded, so
    only the events after the round are read. None when that cannot be done (a rollout id without its
    ``#n``, a shadowed rollout, no input stored or one that does not match): the caller folds every event
    of the workload instead."""
    if ROLLOUT_SEQUENCE_MARK not in rollout:
        return None
    head = await store.read_correlation(rollout, limit=_ROUND_HEAD)
    decisions = registry.CLONESET.decisions_stream(namespace, name)
    started = next(
        (
            e
            for e in head
            if isinstance(e.envelope.payload, RolloutStarted)
            and e.envelope.payload.rollout_id == rollout
            and e.envelope.stream == decisions
        ),
        None,
    )
    round_event = next(
        (e for e in head if started is not None and e.envelope.event_id == started.envelope.causation_id),
        None,
    )
    if round_event is None or not isinstance(round_event.envelope.payload, RoundPlanned):
        return None
    planned = round_event.envelope.payload
    plan_input = checked_input(await store.round_input(round_event.envelope.event_id), planned)
    if plan_input is None:
        return None
    start = StartState.from_input(plan_input)
    # The events after the round, a page of each stream at a time: a rollout's record ends at its
    # completion, usually long before the workload's later rollouts, which need not be read. All of them
    # up to the log's head as it is now, so pages read later hold no event the earlier ones could not.
    pages = _StreamPages(
        store,
        await store.head_position(),
        {
            stream: planned.through.get(stream, 0) + 1
            for stream in (
                registry.CLONESET.observed_stream(namespace, name),
                registry.CLONESET.actions_stream(namespace, name),
                decisions,
                registry.CLONESET.shadow_stream(namespace, name),
            )
        },
        # About what a rollout records per pod in the busiest stream.
        page=max(_FIRST_PAGE, _EVENTS_PER_POD * len(start.pods)),
    )
    while True:
        await pages.read_more()
        recorded = record_from(round_event, planned.now, start, pages.merged(), rollout)
        if recorded.ended or pages.exhausted:
            return recorded


_FIRST_PAGE = 64
_EVENTS_PER_POD = 8


class _StreamPages:
    """Streams read forward from given versions up to global position ``head``, a page of each at a time
    (the page doubling each time): ``merged`` holds, in global order, every event of them up to the first
    position that a stream not yet read to its end may still have events below."""

    def __init__(self, store: EventStore, head: int, starts: dict[str, int], page: int) -> None:
        self.store = store
        self.head = head
        self.next = dict(starts)  # stream -> the version its next page starts at
        self.read: dict[str, list[StoredEvent]] = {stream: [] for stream in starts}
        self.open = set(starts)  # streams not read to their end
        self.page = page

    @property
    def exhausted(self) -> bool:
        return not self.open

    async def read_more(self) -> None:
        streams = sorted(self.open)
        pages = await asyncio.gather(*(self.store.read_stream(s, self.next[s], self.page) for s in streams))
        for stream, events in zip(streams, pages, strict=True):
            self.read[stream].extend(events)
            if len(events) < self.page or events[-1].global_position > self.head:
                self.open.discard(stream)
            else:
                self.next[stream] = events[-1].envelope.stream_version + 1
        self.page *= 2

    def merged(self) -> list[StoredEvent]:
        bound = min((self.read[s][-1].global_position for s in self.open), default=self.head)
        merged = heapq.merge(*self.read.values(), key=lambda e: e.global_position)
        return [e for e in merged if e.global_position <= min(bound, self.head)]
