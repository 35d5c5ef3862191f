"""The pod actions whose terminal outcome an executor knows to be stored, the most recent ones.

A later action of a pod waits until the actions its round planned earlier for the pod have a terminal
outcome (services/executor/service.py). Those usually ran in this same executor just before (one pod's
actions run here in order), which stored their outcome: remembering that spares the store query. Only
a stored outcome is remembered (an event is never removed from the store), so the wait is as strict as
the query; an action not remembered (older, or run elsewhere) is looked up in the store as before.

An earlier action whose outcome the store lost for good (an asynchronous failover) would hold the pod
for minutes; its id on the pod says it was carried out (``found_on_pod``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Enough for every action in hand at once and the ones just before (executor_concurrency is 64).
DEFAULT_CAPACITY = 10_000


class Settled:
    """Action ids with a stored terminal outcome, at most ``capacity`` (the oldest are forgotten)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._ids: dict[str, None] = {}  # insertion-ordered: oldest first

    def add(self, action_ids: Iterable[str]) -> None:
        for action_id in action_ids:
            self._ids[action_id] = None
        while len(self._ids) > self.capacity:
            del self._ids[next(iter(self._ids))]

    def unknown(self, action_ids: Iterable[str]) -> list[str]:
        """Those of ``action_ids`` not known to be settled, in order."""
        return [a for a in action_ids if a not in self._ids]

    def __len__(self) -> int:
        return len(self._ids)


def found_on_pod(
    round_actions: Sequence[str], pending: Sequence[str], on_pod: str | None
) -> tuple[str | None, list[str]]:
    """What the pod's action id (``on_pod``, the last action applied to it) says of ``pending``, the
    actions of ``round_actions`` (a round's actions for the pod, in planned order, up to the one waiting)
    with no stored outcome. The executor applies a round's actions for one pod in order, each once the
    ones before it have an outcome, so the action the pod names was carried out, and every one planned
    before it had an outcome (lost, if not stored). Returns the pending action the pod names (carried
    out: its outcome may be recorded as found on the pod), or None, and those still to wait for."""
    if on_pod is None or on_pod not in round_actions:
        return None, list(pending)
    done = set(round_actions[: round_actions.index(on_pod) + 1])
    return (on_pod if on_pod in pending else None), [a for a in pending if a not in done]
