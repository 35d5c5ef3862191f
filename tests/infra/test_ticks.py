"""Periodic turns on a shared grid (services/infra/ticks.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.infra.ticks import sleep_to_tick, until_tick


@pytest.mark.parametrize(
    ("now", "period", "left"),
    [
        (0.5, 2.0, 1.5),  # to 2
        (3.25, 2.0, 0.75),  # to 4
        (4.0, 2.0, 2.0),  # on the grid: a whole period, never a busy turn of 0 s
        (10.1, 0.5, 0.4),  # to 10.5
    ],
)
def test_until_the_next_multiple_of_the_period(now: float, period: float, left: float) -> None:
    assert until_tick(now, period) == pytest.approx(left)


async def test_tasks_started_apart_wake_together_on_the_next_tick() -> None:
    period = 0.2
    await sleep_to_tick(period)  # just after a tick: the three start within this period
    tick = (round(time.monotonic() / period) + 1) * period
    woke: list[float] = []

    async def turn(delay: float) -> None:
        await asyncio.sleep(delay)
        await sleep_to_tick(period)
        woke.append(time.monotonic())

    await asyncio.gather(turn(0.01), turn(0.04), turn(0.08))
    assert min(woke) >= tick - 1e-3  # none before the tick
    assert max(woke) - min(woke) < 0.05  # all at it (not 0.03 and 0.07 apart as they started)
