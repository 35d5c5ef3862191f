"""Pacing: starts of one kind of work (a workload's planning rounds, the watcher's appends, the relay's
reads) at least ``interval`` seconds apart.

Each of those cycles takes whatever arrived while the previous one ran, so under a steady trickle of
events (a rollout held to the client-side API rate: one write every 10 ms at 100 QPS) every event became
a cycle of its own in every process along the way, and each cycle has a fixed cost (a wake-up, a store
round trip, a commit, a publish). Work arriving within ``interval`` of the previous start waits for the
rest of the interval and goes with whatever else arrives meanwhile; work arriving after a quiet spell
starts at once, so a lone event is not delayed.
"""

from __future__ import annotations

import asyncio
import time


def pace_delay(now: float, last_start: float | None, interval: float) -> float:
    """Seconds to wait at ``now`` so that a cycle starts at least ``interval`` after ``last_start`` (None:
    no cycle yet)."""
    if last_start is None or interval <= 0:
        return 0.0
    return max(0.0, last_start + interval - now)


async def wait_for_pace(last_start: float | None, interval: float) -> None:
    """Sleep until a cycle may start: ``interval`` after ``last_start`` (at once after a quiet spell). The
    caller stamps its cycle's start itself, since not every pass is a cycle (a planner's pass that only
    settles wake-ups already folded is not)."""
    delay = pace_delay(time.monotonic(), last_start, interval)
    if delay > 0:
        await asyncio.sleep(delay)
