"""Replay of a workload rollbook records but does not drive (a Deployment, a StatefulSet; docs/kinds.md).

There are no planner decisions to re-plan: replaying its trail means folding its observations again with its
kind's rules (services/kinds/<kind>/rules.py) and checking that every event stored in its ``/recorded``
stream is the one the fold gives at that version, same id, cause, rollout and payload. Pure: events in,
a report and the states after each observation out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from services.kinds.base import Kind
from services.model.availability import pod_available
from services.model.event_store import StoredEvent
from services.model.events import Envelope
from services.replay.verify import Divergence, envelope_view, first_difference

_encode = msgspec.json.Encoder(order="sorted").encode


@dataclass(frozen=True)
class RecordedReport:
    kind: str
    workload: str  # <namespace>/<name>
    observations: int  # observed events folded
    recorded: int  # events stored in the recorded stream
    refolded: int  # events the fold gives
    divergence: str | None = None  # the first stored event that is not what the fold gives
    # The same, in the shape of a planned workload's divergence (``verify --all --json``): the stored event,
    # its first differing field, the stored value (``recorded``) and the fold's (``replayed``).
    first: Divergence | None = None

    @property
    def pending(self) -> int:
        """Events the fold gives past the stored ones: observations the recorder has not caught up with."""
        return max(self.refolded - self.recorded, 0)

    def describe(self) -> str:
        head = f"{self.kind} {self.workload}"
        if self.divergence is not None:
            return f"DIVERGED {head}: {self.divergence}"
        note = f" ({self.pending} not recorded yet)" if self.pending else ""
        return (
            f"OK {head}: {self.recorded} recorded events are what its {self.observations} observations"
            f" fold into{note}"
        )


def _identity(envelope: Envelope) -> tuple[Any, ...]:
    return (
        envelope.event_id,
        envelope.stream,
        envelope.stream_version,
        envelope.type,
        envelope.causation_id,
        envelope.correlation_id,
        envelope.occurred_at,
        _encode(envelope.payload),
    )


def _view(envelope: Envelope) -> dict[str, Any]:
    """What ``_identity`` compares, as JSON-like values (to name the first differing field)."""
    view = envelope_view(envelope, with_causation=True)
    del view["schema_version"]
    return view


_FIELDS = ("event id", "stream", "version", "type", "cause", "rollout", "time", "payload")


def refold(kind: Kind, namespace: str, name: str, observed: Sequence[Envelope]) -> list[Envelope]:
    """The recorded events the workload's observations fold into, in order."""
    if kind.trail is None:
        raise ValueError(f"{kind.name} is not a recorded kind")
    trail = kind.trail(namespace, name)
    return [event for observation in observed for event in trail.fold(observation)]


class RecordedVerifier:
    """Streaming check of one recorded workload: ``feed`` its observed and recorded events (in global order,
    or every observation first), then ``finish``. Each stored ``/recorded`` event is compared with the
    fold's event at the same position as soon as both are known, so memory holds only what the recorder
    has not caught up with."""

    def __init__(self, kind: Kind, namespace: str, name: str) -> None:
        if kind.trail is None:
            raise ValueError(f"{kind.name} is not a recorded kind")
        self.kind, self.workload = kind, f"{namespace}/{name}"
        self.trail = kind.trail(namespace, name)
        self.observed_stream = kind.observed_stream(namespace, name)
        self.recorded_stream = kind.recorded_stream(namespace, name)
        self.observations = self.recorded = self.refolded = 0
        self.divergence: str | None = None
        self.first: Divergence | None = None
        self._expected: deque[Envelope] = deque()  # folded, not yet stored
        self._stored: deque[Envelope] = deque()  # stored, not yet folded

    def feed(self, envelope: Envelope) -> None:
        if envelope.stream == self.observed_stream:
            self.observations += 1
            for event in self.trail.fold(envelope):  # folded on past a divergence: the counts stay whole
                self.refolded += 1
                if self.divergence is None:
                    self._expected.append(event)
        elif envelope.stream == self.recorded_stream:
            self.recorded += 1
            if self.divergence is None:
                self._stored.append(envelope)
        while self._expected and self._stored and self.divergence is None:
            expected, stored = self._expected.popleft(), self._stored.popleft()
            mine, theirs = _identity(stored), _identity(expected)
            if mine != theirs:
                differ = [f for f, a, b in zip(_FIELDS, mine, theirs, strict=True) if a != b]
                found = first_difference(_view(stored), _view(expected)) or (
                    "(event)",
                    repr(stored),
                    repr(expected),
                )
                self._diverged(
                    f"{stored.type} at version {stored.stream_version} differs from the fold's"
                    f" {expected.type} in its {', '.join(differ)}",
                    stored,
                    *found,
                )

    def _diverged(self, divergence: str, stored: Envelope, field: str, recorded: Any, replayed: Any) -> None:
        self.divergence = divergence
        self.first = Divergence(
            kind=self.kind.name,
            workload=self.workload,
            stream=self.recorded_stream,
            stream_version=stored.stream_version,
            event_id=str(stored.event_id),
            event_type=stored.type,
            round_id=None,  # a recorded kind has no planning rounds
            field=field,
            recorded=recorded,
            replayed=replayed,
        )
        self._expected.clear()
        self._stored.clear()

    def finish(self) -> RecordedReport:
        if self._stored and self.divergence is None:
            stored = self._stored[0]
            self._diverged(
                f"{stored.type} at version {stored.stream_version} has no observation behind it"
                f" (the observations fold into {self.refolded} events)",
                stored,
                "(event)",
                {"type": stored.type, "payload": msgspec.to_builtins(stored.payload)},
                None,
            )
        return RecordedReport(
            self.kind.name,
            self.workload,
            self.observations,
            self.recorded,
            self.refolded,
            self.divergence,
            self.first,
        )


def check_recorded(
    kind: Kind, namespace: str, name: str, observed: Sequence[Envelope], recorded: Sequence[Envelope]
) -> RecordedReport:
    """Compare the stored ``recorded`` stream with the fold of ``observed`` (both in stream order)."""
    verifier = RecordedVerifier(kind, namespace, name)
    for envelope in (*observed, *recorded):
        verifier.feed(envelope)
    return verifier.finish()


@dataclass(frozen=True)
class RecordedStep:
    event: StoredEvent
    state: dict[str, Any]


def recorded_steps(
    kind: Kind, namespace: str, name: str, events: Sequence[StoredEvent]
) -> Iterator[RecordedStep]:
    """The workload as its trail knew it after each event of its observed and recorded streams (global
    order): the update revision, the rollout under way, the revisions and the pods."""
    if kind.trail is None:
        raise ValueError(f"{kind.name} is not a recorded kind")
    trail = kind.trail(namespace, name)
    for stored in events:
        trail.fold(stored.envelope)  # a recorded event is not an observation: the fold skips it
        yield RecordedStep(stored, summarise_trail(kind, trail))


def summarise_trail(kind: Kind, trail: Any) -> dict[str, Any]:
    workload = trail.workload or {}
    spec = workload.get("spec") or {}
    return {
        "kind": kind.name,
        "workload": f"{trail.namespace}/{trail.name}",
        "exists": trail.workload is not None,
        "generation": (workload.get("metadata") or {}).get("generation"),
        "replicas": spec.get("replicas"),
        "updateRevision": trail.update_revision,
        "activeRollout": trail.active_rollout,
        "paused": trail.paused,
        "revisions": {name: trail.numbers[name] for name in sorted(trail.numbers)},
        "pods": {pod_name: _pod(pod, kind.revision_label) for pod_name, pod in sorted(trail.pods.items())},
    }


def _pod(pod: dict[str, Any], revision_label: str) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    return {
        "uid": metadata.get("uid"),
        "revision": (metadata.get("labels") or {}).get(revision_label),
        "images": [c.get("image") for c in spec.get("containers") or []],
        "phase": (pod.get("status") or {}).get("phase"),
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        "available": pod_available(pod),
        "terminating": bool(metadata.get("deletionTimestamp")),
    }
