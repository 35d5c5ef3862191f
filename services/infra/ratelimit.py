"""A token bucket, as client-go's client-side rate limit (``rest.Config`` QPS and Burst).

The bucket holds up to ``burst`` tokens and gains ``qps`` per second; every request takes one. A request
finding the bucket empty reserves the next token anyway (the count goes negative) and waits until it is
due, so waiters are served in arrival order and the long-run rate never exceeds ``qps``. A waiter
cancelled before its turn gives its token back. ``qps <= 0`` means no limit.

With a ``grain``, a waiter's turn is put off to the next multiple of ``grain`` seconds on the clock, so
that throttled requests go in groups at most ``grain`` apart instead of one every 1/qps: each token is
still taken no earlier than it is due (the long-run rate and the burst stay as they are), and everything
downstream (the API server's watch events, the watcher's appends, the relay, the planner's rounds) wakes
once per group rather than once per request. Each wake-up of a sleeping process costs far more CPU than
the little it then does (cold caches: about 0.1-0.3 ms here), so at 100 QPS this is most of a
throttled rollout's CPU.

``TokenBucket.reserve(now)`` is the pure decision (seconds to wait); ``acquire`` sleeps that long.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self, qps: float, burst: int, *, grain: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 with a rate limit, got {burst}")
        self.qps = qps
        self.burst = burst
        self.grain = grain
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def reserve(self, now: float) -> float:
        """Take one token at time ``now``; returns how many seconds the caller must wait for it."""
        if self.unlimited:
            return 0.0
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._updated = max(self._updated, now)
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        due = now - self._tokens / self.qps
        if self.grain > 0:
            # (less a hair: a due time on the grid but for rounding stays where it is)
            due = math.ceil(due / self.grain - 1e-9) * self.grain
        return due - now

    def give_back(self) -> None:
        """Return a reserved token that was not used (its waiter was cancelled)."""
        if not self.unlimited:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def acquire(self) -> float:
        """Wait for a token; returns the seconds spent waiting (0.0 when one was available)."""
        delay = self.reserve(self._clock())
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                self.give_back()
                raise
        return delay
