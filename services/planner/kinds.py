"""One shape for every planned kind (docs/services.md, "planner"): a ``KindPlanner`` says which streams a
workload of its kind has, how its state folds them, what its decision input is, how it decides and by
which rules. ``next_step`` is the one rule for what the planner does with a folded state (wait for what it
expects, plan a round, or nothing): the planner service, verify and the simulation all call it, so they
cannot drift apart. Pure: no I/O.

    kind = kind_for_stream(envelope.stream)        # CLONESET, SIDECARSET or None (not planned)
    state = kind.new_state(kind.workload_of(envelope.stream))
    ...fold the workload's streams into state...
    match next_step(kind, state):
        case Wait(timer=timer): ...append the expectation timer, if any...
        case Round(envelopes=envelopes): ...append the round...
        case Idle(): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from services.kinds import registry
from services.kinds.base import Kind
from services.kinds.cloneset.rules import decisions as cloneset_decisions
from services.kinds.cloneset.rules.model import PlanInput
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.sidecarset.rules import decisions as sidecarset_decisions
from services.kinds.sidecarset.rules.state import SidecarSetInput, SidecarSetState
from services.kinds.sidecarset.rules.upgrade import SidecarSetRound
from services.model import rounds
from services.model.events import Envelope, Event, RolloutStarted
from services.model.rounds import EXPECTATION_TIMEOUT
from services.model.streams import derived_id

S = TypeVar("S", bound=rounds.FoldedState)


class KindPlanner(Protocol[S]):
    """What the planner needs to know about one kind of planned workload."""

    kind: str  # the Kubernetes kind: CloneSet, SidecarSet
    rules_version: int  # written on every RoundPlanned; see each kind's RULES_VERSION
    # Whether a workload of this kind may be shadowed (docs/shadow.md): only then does the planner keep a
    # shadow trail for it instead of rounds, and in shadow mode plan it at all.
    shadowed: bool

    def workload_of(self, stream: str) -> str | None:
        """The workload key of one of this kind's planned streams (observed, actions, decisions), else
        None (another kind's stream, or one of this kind that is not planned)."""
        ...

    def new_state(self, key: str) -> S:
        """An empty state of the workload ``key`` (folds its streams; ``state.streams`` names them)."""
        ...

    def decisions_stream(self, state: S) -> str: ...

    def workload_object(self, state: S) -> dict[str, Any] | None:
        """The workload's object as last observed (None: not observed, or deleted)."""
        ...

    def ready(self, state: S) -> bool:
        """The workload is observed and has a clock: there is something to decide about."""
        ...

    def blocked_until(self, state: S) -> datetime | None:
        """Until when something the planner expects (an action not yet in effect, a pod leaving with its
        claims) blocks a round; None when nothing does."""
        ...

    def plan_input(self, state: S) -> Any:
        """The decision input, in process (the SHA-256 of its canonical JSON is recorded on
        ``RoundPlanned``)."""
        ...

    def decide(self, state: S, plan_input: Any) -> tuple[list[Event], str | None]:
        """The round's decisions given the state and its decision input (``plan_input``), and the
        correlation id (the rollout) they carry."""
        ...

    def input_sha256(self, state: S, plan_input: Any) -> str:
        """The SHA-256 of ``plan_input``'s canonical JSON (``rounds.encode_input``), recorded on
        ``RoundPlanned``."""
        ...

    def round_id(self, state: S) -> UUID: ...

    def rollout_input(self, state: S, plan_input: Any) -> bytes | None:
        """The canonical JSON whose SHA-256 ``input_sha256`` is, kept for a round that starts a rollout so
        what-if can start there (``round_inputs``); None for a kind what-if does not re-plan."""
        ...


@dataclass(frozen=True)
class Idle:
    """Nothing to do: the workload is not observed yet, or a round would decide nothing."""


@dataclass(frozen=True)
class Wait:
    """Something expected blocks the round until ``due``; ``timer`` wakes the workload then (None when a
    timer near ``due`` is already set)."""

    due: datetime
    timer: Envelope | None


@dataclass(frozen=True)
class Round(Generic[S]):
    """A round: ``RoundPlanned`` then the decisions, as they are appended."""

    input_sha256: str
    decisions: list[Event]
    envelopes: list[Envelope]
    # A round that starts a rollout: its input's canonical JSON, stored beside the round (``round_inputs``)
    rollout_input: bytes | None = None


Step = Idle | Wait | Round[Any]
IDLE = Idle()


def plan_round(kind: KindPlanner[S], state: S) -> Round[S]:
    """The round the kind decides on this state, whether or not it decides anything (verify compares it
    with the record; ``next_step`` drops a round without decisions)."""
    plan_input = kind.plan_input(state)
    decisions, correlation = kind.decide(state, plan_input)
    return _round(kind, state, plan_input, decisions, correlation)


def _round(
    kind: KindPlanner[S], state: S, plan_input: Any, decisions: list[Event], correlation: str | None
) -> Round[S]:
    digest = kind.input_sha256(state, plan_input)
    envelopes = rounds.round_envelopes(
        state,
        kind.decisions_stream(state),
        round_id=kind.round_id(state),
        input_sha256=digest,
        decisions=decisions,
        correlation_id=correlation,
        rules=kind.rules_version,
    )
    starts = any(isinstance(d, RolloutStarted) for d in decisions)
    return Round(digest, decisions, envelopes, kind.rollout_input(state, plan_input) if starts else None)


def next_step(kind: KindPlanner[S], state: S) -> Step:
    """What the planner does with this folded state: wait for what it expects (with the timer that ends
    the wait), plan a round, or nothing."""
    if not kind.ready(state):
        return IDLE
    due = kind.blocked_until(state)
    if due is not None:
        return Wait(due, rounds.expectation_timer(state, kind.decisions_stream(state), due))
    # Decided first, hashed only if it decides something: the input's canonical JSON (every pod) is a
    # third of a round's CPU, wasted on a round that records nothing (bench/planner.py, "idle").
    plan_input = kind.plan_input(state)
    decisions, correlation = kind.decide(state, plan_input)
    if not decisions:
        return IDLE
    return _round(kind, state, plan_input, decisions, correlation)


def planned_workload(kind: Kind, stream: str) -> tuple[str, str] | None:
    """(namespace, name) when ``stream`` is one the planner folds for a workload of ``kind`` (observed,
    actions, decisions; not a SidecarSet's injections, nor a CloneSet's shadow trail), else None."""
    workload = kind.workload_of(stream)
    if workload is None or stream not in kind.planned_streams(*workload):
        return None
    return workload


# --- CloneSet ----------------------------------------------------------------------------------------


class CloneSetPlanner:
    """CloneSets (``CloneSet/<namespace>/<name>`` streams). ``decide`` is the decision function (typed
    input -> typed plan, services/kinds/cloneset/rules/model.py); verify passes another one to evaluate a
    planner change."""

    kind = registry.CLONESET.name
    rules_version = cloneset_decisions.RULES_VERSION
    shadowed = True

    def __init__(self, decide: cloneset_decisions.Decide = cloneset_decisions.decide) -> None:
        self.decide_plan = decide

    def workload_of(self, stream: str) -> str | None:
        workload = planned_workload(registry.CLONESET, stream)
        return None if workload is None else f"{workload[0]}/{workload[1]}"

    def new_state(self, key: str) -> WorkloadState:
        namespace, name = key.split("/", 1)
        return WorkloadState(namespace, name)

    def decisions_stream(self, state: WorkloadState) -> str:
        return state.streams[2]

    def workload_object(self, state: WorkloadState) -> dict[str, Any] | None:
        return state.cloneset

    def ready(self, state: WorkloadState) -> bool:
        return self.workload_object(state) is not None and state.now is not None

    def blocked_until(self, state: WorkloadState) -> datetime | None:
        due = state.pending_deadline()
        if due is not None:
            return due
        leaving = state.leaving_with_claims()
        if leaving:
            # Normally the pod's DELETED observation wakes us first; its replacement then reuses its PVCs.
            return min(leaving.values()) + EXPECTATION_TIMEOUT
        return None

    def plan_input(self, state: WorkloadState) -> PlanInput:
        return state.plan_input()

    def decide(self, state: WorkloadState, plan_input: PlanInput) -> tuple[list[Event], str | None]:
        if self.decide_plan is cloneset_decisions.decide:  # the rules' own: with the kept pod views
            plan = cloneset_decisions.decide(plan_input, views=state.pod_views)
        else:
            plan = self.decide_plan(plan_input)
        decisions = cloneset_decisions.decisions_for(state, plan)
        return decisions, cloneset_decisions.correlation_of(state, plan)

    def input_sha256(self, state: WorkloadState, plan_input: PlanInput) -> str:
        # Re-encodes only the pods and PVCs observed changing since the state's last round.
        return state.input_digest.sha256(plan_input)

    def round_id(self, state: WorkloadState) -> UUID:
        return derived_id("round", *sorted(state.through().items()))

    def rollout_input(self, state: WorkloadState, plan_input: PlanInput) -> bytes | None:
        # The encodings ``input_sha256`` just made are reused: only the CloneSet and revisions are encoded.
        return state.input_digest.encode(plan_input)


# --- SidecarSet --------------------------------------------------------------------------------------


class SidecarSetPlanner:
    """SidecarSets (``SidecarSet/<name>/observed|actions|decisions`` streams; its injections stream is
    recorded, not planned)."""

    kind = registry.SIDECARSET.name
    rules_version = sidecarset_decisions.RULES_VERSION
    shadowed = False

    def workload_of(self, stream: str) -> str | None:
        workload = planned_workload(registry.SIDECARSET, stream)
        return None if workload is None else workload[1]

    def new_state(self, key: str) -> SidecarSetState:
        return SidecarSetState(key)

    def decisions_stream(self, state: SidecarSetState) -> str:
        return state.streams[2]

    def workload_object(self, state: SidecarSetState) -> dict[str, Any] | None:
        return state.sidecarset

    def ready(self, state: SidecarSetState) -> bool:
        return self.workload_object(state) is not None and state.now is not None

    def blocked_until(self, state: SidecarSetState) -> datetime | None:
        pending = state.pending()
        return min(pending) + EXPECTATION_TIMEOUT if pending else None

    def plan_input(self, state: SidecarSetState) -> SidecarSetInput:
        return state.plan_input()

    def decide(self, state: SidecarSetState, plan_input: SidecarSetInput) -> tuple[list[Event], str | None]:
        result = sidecarset_decisions.round_of(plan_input)
        decisions = sidecarset_decisions.decisions_for(state, result)
        correlation = (
            sidecarset_decisions.round_rollout(state, result) if isinstance(result, SidecarSetRound) else None
        )
        return decisions, correlation

    def input_sha256(self, state: SidecarSetState, plan_input: SidecarSetInput) -> str:
        return rounds.encode_input(plan_input)[1]

    def round_id(self, state: SidecarSetState) -> UUID:
        return derived_id("sidecarset-round", *sorted(state.through().items()))

    def rollout_input(self, state: SidecarSetState, plan_input: SidecarSetInput) -> bytes | None:
        return None  # what-if re-plans CloneSet rollouts only


CLONESET = CloneSetPlanner()
SIDECARSET = SidecarSetPlanner()
KINDS: tuple[KindPlanner[Any], ...] = (CLONESET, SIDECARSET)


def kind_for_stream(stream: str, kinds: tuple[KindPlanner[Any], ...] = KINDS) -> KindPlanner[Any] | None:
    """The kind planning ``stream`` (None: no planned workload's stream)."""
    for kind in kinds:
        if kind.workload_of(stream) is not None:
            return kind
    return None
