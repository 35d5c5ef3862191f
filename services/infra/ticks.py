"""Periodic work on a shared clock grid.

A task that sleeps ``period`` seconds after each turn wakes at its own phase; a process running many of
them (a consumer's in-progress heartbeat or lag report per durable: 16-18 in the planner and the executor)
then wakes every few tens of milliseconds while idle, and each wake-up of a sleeping process costs CPU of
its own (cold caches), far more than the little each turn does. Sleeping to the next multiple of
``period`` on the monotonic clock instead puts the turns of every task with the same period at the same
instants: one wake-up for all of them.
"""

from __future__ import annotations

import asyncio
import time


def until_tick(now: float, period: float) -> float:
    """Seconds from ``now`` to the next multiple of ``period`` (a whole period when ``now`` is one)."""
    return period - now % period


async def sleep_to_tick(period: float) -> None:
    """Sleep until the next multiple of ``period`` seconds on the monotonic clock (at most ``period``)."""
    await asyncio.sleep(until_tick(time.monotonic(), period))
