"""Waiting on what proves the planner is done with a change, instead of sleeping: the planner is pure, so
the round whose ``through`` covers an observation holds everything it decides on it, and folding the
workload's streams from the store and asking ``next_step`` says whether anything is left to decide."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.infra.store import EventStore
from services.model.events import Envelope, ObjectObserved
from services.model.rounds import round_of
from services.planner.kinds import KindPlanner, Round, next_step
from tests.plugins.stack import wait_for


async def fold(store: EventStore, kind: KindPlanner[Any], key: str) -> Any:
    """The workload's state folded from every event of its streams in the store (as the planner folds)."""
    state = kind.new_state(key)
    for stream in state.streams:
        for stored in await store.read_stream(stream):
            state.fold(stored.envelope)
    return state


async def nothing_left_to_plan(store: EventStore, kind: KindPlanner[Any], key: str) -> bool:
    """True when, given everything observed so far, the planner decides no further round."""
    return not isinstance(next_step(kind, await fold(store, kind, key)), Round)


async def round_covering(
    store: EventStore,
    kind: KindPlanner[Any],
    key: str,
    shows: Callable[[ObjectObserved], bool],
    *,
    within: float = 30.0,
    what: str = "the change",
) -> Envelope:
    """Wait for the planner's round that folded the first observation for which ``shows`` holds."""
    streams = kind.new_state(key).streams
    observed, decisions = streams[0], streams[2]

    async def found() -> Envelope | None:
        version = next(
            (
                s.envelope.stream_version
                for s in await store.read_stream(observed)
                if isinstance(s.envelope.payload, ObjectObserved) and shows(s.envelope.payload)
            ),
            None,
        )
        if version is None:
            return None
        for stored in await store.read_stream(decisions):
            planned = round_of(stored.envelope.payload)  # a RoundPlanned, or a status round's StatusPlanned
            if planned is not None and planned.through.get(observed, 0) >= version:
                return stored.envelope
        return None

    covering: Envelope = await wait_for(found, within=within, what=f"the planner's round over {what}")
    return covering
