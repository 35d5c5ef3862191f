"""The store is the authority: the executor carries out only what a planner stored (docs/security-bus.md).

A bus message is a notice, not an order. Before acting on a ``PodActionRequested`` or ``StatusPlanned``,
the executor finds the event the message carries in the event store, with the same event id, stream,
version, type, cause, rollout and payload (compared as JSON values, in the same query that reads what
the action needs anyway), on a stream a planner writes. Anything else is refused: counted
(``rollbook_executor_refused_total``), logged once and dead-lettered with the reason, never carried out.
"""

from __future__ import annotations

from services.kinds.registry import decisions_workload

# The event types only a planner appends, and so the only ones the executor acts on.
PLANNED_TYPES = frozenset({"PodActionRequested", "StatusPlanned"})


def planner_stream(stream: str) -> bool:
    """Whether ``stream`` is one a planner appends its rounds to: a driven kind's decisions stream
    (services/kinds/registry.py), e.g. a CloneSet's ``CloneSet/<ns>/<name>``, a SidecarSet's
    ``SidecarSet//<name>/decisions``."""
    return decisions_workload(stream) is not None


def refusal(event_type: str, stream: str, stored_match: bool | None) -> str | None:
    """Why a message must not be acted on, None when it may: ``stored_match`` is the store's answer
    (None: no event with its id is stored; False: one is, with other content)."""
    if event_type not in PLANNED_TYPES:
        return f"{event_type} is not an event the executor acts on"
    if not planner_stream(stream):
        return f"{event_type} on stream {stream!r}, which no planner writes"
    if stored_match is None:
        return "no event with this id is in the event store (not written by a planner)"
    if not stored_match:
        return "differs from the event stored with this id (stream, version, cause, rollout or payload)"
    return None
