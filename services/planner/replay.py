"""Replay a workload's planning rounds from the event store and check each one reproduces exactly.

For every ``RoundPlanned`` of ``CloneSet/<ns>/<name>``: fold the workload's three streams up to the
round's ``through`` versions, rebuild the planner input (its SHA-256 must match ``input_sha256``), run the
pure decision function, derive the decision events and compare them with the recorded ones (the events
whose causation is the round), field by field. Any difference is a ``Divergence``. Rounds recorded by
other planner rules (``RoundPlanned.rules`` != ``RULES_VERSION``) are not compared, only counted in
``skipped`` (docs/replay.md, "Upgrading rollbook").

    divergences = await replay_workload(store, "default", "sample")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from services.infra.store import EventStore
from services.model.events import Envelope, RoundPlanned
from services.planner.service import RULES_VERSION, decide, decisions_for
from services.planner.workload_state import WorkloadState, encode_input


@dataclass(frozen=True)
class Divergence:
    round_id: str
    stream_version: int
    what: str  # input, now, decisions
    recorded: Any
    replayed: Any


@dataclass(frozen=True)
class ReplayReport:
    rounds: int
    decisions: int
    divergences: list[Divergence]
    skipped: int = 0  # rounds recorded by other planner rules: not re-verifiable


def _comparable(payload: Any) -> Any:
    return msgspec.to_builtins(payload)


async def replay_workload(store: EventStore, namespace: str, name: str) -> ReplayReport:
    shell = WorkloadState(namespace, name)
    streams = {stream: [e.envelope for e in await store.read_stream(stream)] for stream in shell.streams}
    decisions_stream = shell.streams[2]
    recorded_stream = streams[decisions_stream]
    divergences: list[Divergence] = []
    rounds = decisions = skipped = 0
    for envelope in recorded_stream:
        payload = envelope.payload
        if not isinstance(payload, RoundPlanned):
            continue
        if payload.rules != RULES_VERSION:
            skipped += 1
            continue
        rounds += 1
        state = WorkloadState(namespace, name)
        for stream, events in streams.items():
            for event in events:
                if event.stream_version <= payload.through.get(stream, 0):
                    state.fold(event)
        round_id = str(envelope.event_id)
        data, digest = encode_input(state.plan_input())
        if digest != payload.input_sha256:
            divergences.append(
                Divergence(round_id, envelope.stream_version, "input", payload.input_sha256, digest)
            )
            continue
        if state.now != payload.now:
            divergences.append(Divergence(round_id, envelope.stream_version, "now", payload.now, state.now))
        replayed = [_comparable(d) for d in decisions_for(state, decide(data))]
        recorded = [_comparable(e.payload) for e in _caused_by(recorded_stream, envelope)]
        decisions += len(recorded)
        if replayed != recorded:
            divergences.append(Divergence(round_id, envelope.stream_version, "decisions", recorded, replayed))
    return ReplayReport(rounds, decisions, divergences, skipped)


def _caused_by(stream: list[Envelope], round_event: Envelope) -> list[Envelope]:
    return [
        e
        for e in stream
        if e.causation_id == round_event.event_id and e.stream_version > round_event.stream_version
    ]
