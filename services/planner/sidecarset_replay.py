"""Replay of recorded SidecarSet rounds: fold the SidecarSet's streams up to each ``RoundPlanned``'s
``through``, check the input hash, decide again, compare every decision with the recorded one.

Pure: the caller reads the three streams (observed, actions, decisions) and passes the envelopes. One pass:
``through`` only grows from round to round, so inputs are folded once, in order. Rounds recorded by other
SidecarSet planner rules (``RoundPlanned.rules`` != ``RULES_VERSION``) are folded, not compared, and
counted in ``skipped`` (docs/replay.md, "Upgrading rollbook").
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from services.model.events import Envelope, RoundPlanned
from services.model.sidecarset_streams import actions_stream, observed_stream
from services.planner.sidecarset_service import RULES_VERSION, SidecarSetState, decisions_for, round_of

_canonical = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True)
class SidecarSetDivergence:
    """The first place a replayed round differs from the record."""

    sidecarset: str
    stream_version: int  # of the recorded RoundPlanned
    round_id: str
    field: str  # input_sha256, now, decisions[i], decisions (count)
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        return (
            f"DIVERGENCE in SidecarSet {self.sidecarset} round {self.round_id}"
            f" (decisions v{self.stream_version}): {self.field}:"
            f" recorded {self.recorded!r}, replayed {self.replayed!r}"
        )


@dataclass(frozen=True)
class SidecarSetReplay:
    sidecarset: str
    rounds: int  # compared
    divergence: SidecarSetDivergence | None
    # recorded rules version -> rounds recorded by it, not compared (not re-verifiable with these rules)
    skipped: dict[int, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.divergence is None


def _plain(payload: Any) -> Any:
    return msgspec.to_builtins(payload)


def verify_sidecarset(
    name: str,
    observed: Sequence[Envelope],
    actions: Sequence[Envelope],
    decisions: Sequence[Envelope],
) -> SidecarSetReplay:
    """Replay every recorded round of SidecarSet ``name``; stops at the first divergence."""
    state = SidecarSetState(name)
    inputs = {observed_stream(name): deque(observed), actions_stream(name): deque(actions)}
    rounds = 0
    skipped: dict[int, int] = {}
    ordered = sorted(decisions, key=lambda e: e.stream_version)
    for index, envelope in enumerate(ordered):
        payload = envelope.payload
        if isinstance(payload, RoundPlanned):
            for stream, waiting in inputs.items():
                limit = payload.through.get(stream, 0)
                while waiting and waiting[0].stream_version <= limit:
                    state.fold(waiting.popleft())
            if payload.rules != RULES_VERSION:
                skipped[payload.rules] = skipped.get(payload.rules, 0) + 1
            else:
                rounds += 1
                divergence = _check_round(state, envelope, payload, ordered[index + 1 :])
                if divergence is not None:
                    return SidecarSetReplay(name, rounds, divergence, skipped)
        state.fold(envelope)
    return SidecarSetReplay(name, rounds, None, skipped)


def _check_round(
    state: SidecarSetState, envelope: Envelope, payload: RoundPlanned, after: Sequence[Envelope]
) -> SidecarSetDivergence | None:
    def diverged(field: str, recorded: Any, replayed: Any) -> SidecarSetDivergence:
        return SidecarSetDivergence(
            state.name, envelope.stream_version, str(envelope.event_id), field, recorded, replayed
        )

    if state.through() != payload.through:
        return diverged("through", payload.through, state.through())
    if state.now != payload.now:
        return diverged("now", payload.now, state.now)
    digest = hashlib.sha256(_canonical.encode(state.plan_input())).hexdigest()
    if digest != payload.input_sha256:
        return diverged("input_sha256", payload.input_sha256, digest)
    recorded = []
    for event in after:
        if event.causation_id != envelope.event_id or isinstance(event.payload, RoundPlanned):
            break
        recorded.append(_plain(event.payload))
    replayed = [_plain(d) for d in decisions_for(state, round_of(state))]
    for position, (was, now) in enumerate(zip(recorded, replayed, strict=False)):
        if was != now:
            return diverged(f"decisions[{position}]", was, now)
    if len(recorded) != len(replayed):
        return diverged("decisions (count)", len(recorded), len(replayed))
    return None
