"""The pod actions an executor gave back to the bus (a failure that may pass), remembered for a while.

A later action of the same pod that finds an earlier one here goes back to the bus at once instead of
waiting for it: the earlier one's redelivery would queue behind it in this executor. The redelivery may
go to another executor or be dead-lettered instead, so an entry is dropped when the action runs here
again, when its outcome is seen, or after ``ttl`` seconds, whichever comes first; the set stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterable


class HandedBack:
    """Action ids with the (monotonic) time each went back to the bus; entries older than ``ttl`` expire."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._since: dict[str, float] = {}  # in the order handed back, oldest first

    def add(self, action_id: str, now: float) -> None:
        self._since.pop(action_id, None)  # handed back again: it moves to the end, with the new time
        self._since[action_id] = now
        self._expire(now)

    def discard(self, action_ids: Iterable[str]) -> None:
        for action_id in action_ids:
            self._since.pop(action_id, None)

    def among(self, action_ids: Iterable[str], now: float) -> list[str]:
        """Those of ``action_ids`` handed back less than ``ttl`` seconds ago."""
        self._expire(now)
        return [a for a in action_ids if a in self._since]

    def __len__(self) -> int:
        return len(self._since)

    def _expire(self, now: float) -> None:
        while self._since:
            oldest = next(iter(self._since))
            if now - self._since[oldest] < self.ttl:
                return  # the rest are younger
            del self._since[oldest]
