"""The auditor's checkpoint loop leaves no unsigned tail when it stops, whenever the stop arrives."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from services.infra.settings import Settings
from services.infra.transparency import Checkpointer, checkpoint_loop


class StopDuringRound:
    """A checkpointer whose ``stop_at``-th round is still being signed when the stop arrives."""

    def __init__(self, stopping: asyncio.Event, stop_at: int) -> None:
        self.stopping = stopping
        self.stop_at = stop_at
        self.rounds = 0
        self.last = None
        self.signed = asyncio.Event()

    async def checkpoint(self) -> None:
        self.rounds += 1
        self.signed.set()
        if self.rounds == self.stop_at:
            self.stopping.set()  # events appended before the stop are not in this round's tree


async def rounds_until_stopped(stop_at: int) -> int:
    stopping = asyncio.Event()
    checkpointer = StopDuringRound(stopping, stop_at)
    settings = Settings(checkpoint_interval=0.01, checkpoint_every_events=0)
    await asyncio.wait_for(checkpoint_loop(cast(Checkpointer, checkpointer), settings, stopping), 10)
    return checkpointer.rounds


async def test_a_stop_during_a_round_still_gets_a_last_round_after_it() -> None:
    assert await rounds_until_stopped(stop_at=1) == 2
    assert await rounds_until_stopped(stop_at=3) == 4


async def test_a_stop_between_rounds_gets_one_last_round() -> None:
    stopping = asyncio.Event()
    checkpointer: Any = StopDuringRound(stopping, stop_at=0)
    settings = Settings(checkpoint_interval=3600.0, checkpoint_every_events=0)
    loop = asyncio.create_task(checkpoint_loop(cast(Checkpointer, checkpointer), settings, stopping))
    await asyncio.wait_for(checkpointer.signed.wait(), 10)  # the round at start
    stopping.set()
    await asyncio.wait_for(loop, 10)
    assert checkpointer.rounds == 2
