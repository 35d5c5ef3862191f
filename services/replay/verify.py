"""Verification of recorded planning rounds: feed the recorded observations back into the planner and compare
every decision with the recorded one (docs/replay.md, "What verify checks"). One verifier for every planned
kind (CloneSet, SidecarSet): the kind planner (services/planner/kinds.py) folds and decides, exactly as in
the planner service.

Pure: the caller reads the workload's three streams (services/replay/reads.py) and passes the envelopes.
Streaming: events are fed in global order (the order they were stored). A round's inputs were stored
before it (the planner folded them first) and its decisions right after it (one append), so each round
is checked with one decision call when its last decision has been seen; inputs wait in a queue until a
round's ``through`` folds them. One pass, memory bounded by the inputs between two rounds.

Rounds recorded by other planner rules than this code's (``RoundPlanned.rules`` != ``RULES_VERSION``, e.g.
by the rollbook release before an upgrade) are not compared: re-running today's rules on them would report
every rule change as a divergence. They are counted per rules version in ``VerifyReport.skipped``; their
inputs and decisions are folded as recorded, so the rounds after them are verified as usual.

The CloneSet decision function is injectable (``decide``, typed ``PlanInput`` -> ``Plan``): by default the
planner's own (``services/kinds/cloneset/rules/plan.py``); a
test or an operator evaluating a planner change passes another and sees the first round where it would have
decided differently.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from services.kinds.cloneset.rules.decisions import Decide
from services.kinds.cloneset.rules.decisions import decide as planner_decide
from services.model import rounds
from services.model.events import Envelope, RoundPlanned
from services.planner.kinds import CLONESET, CloneSetPlanner, KindPlanner, plan_round


@dataclass(frozen=True)
class Divergence:
    """The first place a replayed round differs from the record."""

    workload: str  # <namespace>/<name> for a CloneSet, the name for a SidecarSet
    stream: str
    stream_version: int  # of the recorded event (or where the missing one would be)
    event_id: str | None  # the recorded event, None when the replay produced an event the record lacks
    event_type: str | None
    round_id: str | None
    field: str  # e.g. payload.details.pod, input_sha256, (event)
    recorded: Any
    replayed: Any
    kind: str = CLONESET.kind

    def describe(self) -> str:
        event = f"{self.event_type} {self.event_id}" if self.event_id else "(no recorded event)"
        shown = self.workload if self.kind == CLONESET.kind else f"{self.kind} {self.workload}"
        return (
            f"DIVERGENCE in {shown} at {self.stream} v{self.stream_version} ({event}),"
            f" round {self.round_id}: field {self.field}: recorded {_show(self.recorded)},"
            f" replayed {_show(self.replayed)}"
        )


@dataclass
class VerifyReport:
    workload: str  # <namespace>/<name> for a CloneSet, the name for a SidecarSet (cluster-scoped)
    events: int = 0
    rounds: int = 0
    decisions: int = 0
    divergence: Divergence | None = None
    kind: str = CLONESET.kind
    rules: int = CLONESET.rules_version  # this code's planner rules for the kind
    # recorded rules version -> rounds recorded by it, not compared (not re-verifiable with these rules)
    skipped: dict[int, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.divergence is None

    @property
    def unverifiable(self) -> int:
        """Rounds not compared because other planner rules recorded them."""
        return sum(self.skipped.values())

    def describe_skipped(self) -> list[str]:
        """One line per recorded rules version that could not be re-verified."""
        return [
            f"{count} round{'s' if count != 1 else ''} recorded by planner rules v{version}, this rollbook"
            f" has v{self.rules}: not re-verifiable"
            for version, count in sorted(self.skipped.items())
        ]


def _show(value: Any) -> str:
    text = msgspec.json.encode(value, enc_hook=str).decode()
    return text if len(text) <= 400 else text[:397] + "..."


def first_difference(recorded: Any, replayed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first (path, recorded, replayed) where two JSON-like values differ, depth first, keys sorted."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in sorted(set(recorded) | set(replayed), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in replayed:
                return here, recorded.get(key, "<absent>"), replayed.get(key, "<absent>")
            found = first_difference(recorded[key], replayed[key], here)
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for index, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(recorded) != len(replayed):
            return f"{path}.length", len(recorded), len(replayed)
        return None
    if recorded != replayed:
        return path or "(value)", recorded, replayed
    return None


def envelope_view(envelope: Envelope, *, with_causation: bool) -> dict[str, Any]:
    view: dict[str, Any] = {
        "event_id": str(envelope.event_id),
        "type": envelope.type,
        "stream": envelope.stream,
        "stream_version": envelope.stream_version,
        "schema_version": envelope.schema_version,
        "occurred_at": envelope.occurred_at,
        "correlation_id": envelope.correlation_id,
        "payload": msgspec.to_builtins(envelope.payload),
    }
    if with_causation:
        view["causation_id"] = None if envelope.causation_id is None else str(envelope.causation_id)
    if isinstance(view["occurred_at"], datetime):
        view["occurred_at"] = view["occurred_at"].isoformat()
    return view


class WorkloadVerifier:
    """Streaming verification of one workload of any planned kind: ``feed`` its events in global order
    (inputs and decisions interleaved, as stored; or every input before the decisions), then ``finish``.
    Memory holds only inputs not yet folded by a round."""

    def __init__(self, kind: KindPlanner[Any], key: str) -> None:
        self.kind = kind
        self.report = VerifyReport(key, kind=kind.kind, rules=kind.rules_version)
        self.state = kind.new_state(key)
        observed, actions, self.decisions_stream = self.state.streams
        self._pending_inputs: dict[str, deque[Envelope]] = {observed: deque(), actions: deque()}
        self._recorded: list[Envelope] = []  # the open round: RoundPlanned + its decisions so far
        self._replayed: list[Envelope] = []
        self._skipping = False  # the open round was recorded by other rules: fold it, do not compare

    @classmethod
    def cloneset(cls, namespace: str, name: str, decide: Decide = planner_decide) -> WorkloadVerifier:
        kind = CLONESET if decide is planner_decide else CloneSetPlanner(decide)
        return cls(kind, f"{namespace}/{name}")

    @property
    def done(self) -> bool:
        return self.report.divergence is not None

    def feed(self, envelope: Envelope) -> None:
        if self.report.divergence is not None:
            return
        if envelope.stream != self.decisions_stream and envelope.stream not in self._pending_inputs:
            return  # not an input of rollbook's rounds (the shadow trail of a shadowed CloneSet)
        self.report.events += 1
        if envelope.stream != self.decisions_stream:
            self._pending_inputs[envelope.stream].append(envelope)
            return
        if self._recorded and envelope.causation_id == self._recorded[0].event_id:
            self._recorded.append(envelope)
            return
        self._close_round()
        if self.report.divergence is not None:
            return
        planned = rounds.round_of(envelope.payload)
        if planned is not None:
            self._open_round(envelope, planned)
        else:
            # Timers and their firings (RequeueScheduled for expectations, RequeueDue): folded as recorded.
            self.state.fold(envelope)

    def finish(self) -> VerifyReport:
        self._close_round()
        return self.report

    def _diverged(self, at: Envelope | None, version: int, field: str, recorded: Any, replayed: Any) -> None:
        assert self.report.divergence is None, "only the first divergence is reported"
        round_event = self._recorded[0] if self._recorded else None
        self.report.divergence = Divergence(
            kind=self.report.kind,
            workload=self.report.workload,
            stream=self.decisions_stream,
            stream_version=version,
            event_id=None if at is None else str(at.event_id),
            event_type=None if at is None else at.type,
            round_id=None if round_event is None else str(round_event.event_id),
            field=field,
            recorded=recorded,
            replayed=replayed,
        )

    def _fold_inputs_to(self, through: dict[str, int]) -> tuple[str, int] | None:
        """Fold each input stream up to ``through``; the first (stream, version) missing on the way."""
        for stream, waiting in self._pending_inputs.items():
            limit = through.get(stream, 0)
            while waiting and waiting[0].stream_version <= limit:
                expected = self.state.versions.get(stream, 0) + 1
                if waiting[0].stream_version != expected:
                    return stream, expected
                self.state.fold(waiting.popleft())
        return None

    def _open_round(self, recorded_round: Envelope, payload: RoundPlanned) -> None:
        state = self.state
        self._recorded = [recorded_round]
        self._replayed = []
        self._skipping = payload.rules != self.report.rules
        if self._skipping:
            skipped = self.report.skipped
            skipped[payload.rules] = skipped.get(payload.rules, 0) + 1
        else:
            self.report.rounds += 1
        version = recorded_round.stream_version
        missing = self._fold_inputs_to(payload.through)
        if missing is not None:
            stream, lost = missing
            self._diverged(
                recorded_round,
                version,
                f"payload.through[{stream}]",
                payload.through.get(stream, 0),
                f"version {lost} is missing from the log",
            )
            return
        own = payload.through.get(self.decisions_stream, 0)
        if own != version - 1:
            self._diverged(recorded_round, version, "payload.through", own, version - 1)
            return
        for stream in self._pending_inputs:
            folded = state.versions.get(stream, 0)
            if folded != payload.through.get(stream, 0):
                self._diverged(
                    recorded_round,
                    version,
                    f"payload.through[{stream}]",
                    payload.through.get(stream, 0),
                    f"{folded} (events missing from the log)",
                )
                return
        if self._skipping:
            # Whether it may decide (pending), its input and its decisions belong to the recording rules.
            return
        kind = self.kind
        if not kind.ready(state):
            self._diverged(
                recorded_round, version, "(state)", f"a {kind.kind} observed", f"no {kind.kind} yet"
            )
            return
        blocked = kind.blocked_until(state)
        if blocked is not None:
            # The planner waits for what it expects (next_step): it would not have planned this round.
            self._diverged(
                recorded_round, version, "pending actions", "decided", f"waiting until {blocked.isoformat()}"
            )
            return
        replayed = plan_round(kind, state)
        if replayed.input_sha256 != payload.input_sha256:
            self._diverged(
                recorded_round, version, "payload.input_sha256", payload.input_sha256, replayed.input_sha256
            )
            return
        # A trail recorded before a status round was one event holds it as RoundPlanned then the status:
        # the replayed round is compared in the shape it was recorded in.
        split = isinstance(recorded_round.payload, RoundPlanned)
        self._replayed = rounds.split_round(replayed.envelopes) if split else replayed.envelopes

    def _close_round(self) -> None:
        recorded, replayed = self._recorded, self._replayed
        if not recorded or self.report.divergence is not None:
            return
        version = recorded[0].stream_version
        compared = 0 if self._skipping else max(len(recorded), len(replayed))
        for position in range(compared):
            rec = recorded[position] if position < len(recorded) else None
            rep = replayed[position] if position < len(replayed) else None
            if rec is None or rep is None:
                self._diverged(
                    rec,
                    version + position,
                    "(event)",
                    None if rec is None else {"type": rec.type, "payload": msgspec.to_builtins(rec.payload)},
                    None if rep is None else {"type": rep.type, "payload": msgspec.to_builtins(rep.payload)},
                )
                return
            # A round's causation is the last input its planner process happened to fold, which depends
            # on how its catch-ups were batched, not on the state: not compared (docs/replay.md).
            causal = position > 0
            if not causal:
                rep = msgspec.structs.replace(rep, causation_id=rec.causation_id)
            if rec.schema_version < rep.schema_version:
                # Recorded under an older schema and read through its upcasters (services/model/upcasting.py):
                # the payloads are compared in today's shape; the version it was written in is not a decision.
                rep = msgspec.structs.replace(rep, schema_version=rec.schema_version)
            if rec == rep:  # the common case, compared in C; the field-by-field walk only to name a change
                continue
            found = first_difference(
                envelope_view(rec, with_causation=causal), envelope_view(rep, with_causation=causal)
            )
            if found is None:  # equal as JSON yet unequal as values (a type differs): still a divergence
                found = ("(envelope)", repr(rec), repr(rep))
            self._diverged(rec, rec.stream_version, *found)
            return
        if not self._skipping:
            # A status round's one event is both the round and its decision.
            self.report.decisions += len(recorded) - isinstance(recorded[0].payload, RoundPlanned)
        for envelope in recorded:
            self.state.fold(envelope)
        self._recorded = []
        self._replayed = []


def verify_workload(
    namespace: str, name: str, events: Iterable[Envelope], decide: Decide = planner_decide
) -> VerifyReport:
    """Re-run every recorded round of one CloneSet (events in global order); stop at the first
    divergence."""
    verifier = WorkloadVerifier.cloneset(namespace, name, decide)
    for envelope in events:
        verifier.feed(envelope)
        if verifier.done:
            break
    return verifier.finish()


def verify_streams(kind: KindPlanner[Any], key: str, *streams: Iterable[Envelope]) -> VerifyReport:
    """Re-run every recorded round of one workload from its streams read one by one (observed, actions,
    decisions: inputs are queued until a round's ``through`` folds them); stop at the first divergence."""
    verifier = WorkloadVerifier(kind, key)
    for stream in streams:
        for envelope in stream:
            verifier.feed(envelope)
            if verifier.done:
                return verifier.finish()
    return verifier.finish()
