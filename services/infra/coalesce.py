"""Coalescing: many requests for one key served by as few runs as possible, different keys at once.

``Coalescer(run)``: ``await c.request(key)`` returns once a run of ``key`` that *started after the
request* has finished (and raises that run's error). Requests arriving while a run of their key is in
progress all wait for the one next run, which covers them all; runs of one key never overlap; runs of
different keys proceed concurrently. The planner uses it with the workload as the key: a burst of events
for one workload wakes one planning round over all of them, and a wake-up message is acknowledged only
once a round that saw its event is done (so a crash loses no wake-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _KeyState:
    task: asyncio.Task[None] | None = None
    next_run: asyncio.Future[None] | None = None  # what requests arriving now wait for


@dataclass
class Coalescer(Generic[K]):
    run: Callable[[K], Awaitable[None]]
    _keys: dict[K, _KeyState] = field(default_factory=dict)
    requests: int = 0
    runs: int = 0

    async def request(self, key: K) -> None:
        """Wait for a run of ``key`` that starts after now (joining one that is already due)."""
        self.requests += 1
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _KeyState()
        if state.next_run is None:
            state.next_run = asyncio.get_running_loop().create_future()
        future = state.next_run
        if state.task is None:
            state.task = asyncio.create_task(self._work_through(key, state))
        await asyncio.shield(future)

    async def _work_through(self, key: K, state: _KeyState) -> None:
        future: asyncio.Future[None] | None = None
        try:
            while state.next_run is not None:
                future, state.next_run = state.next_run, None
                self.runs += 1
                try:
                    await self.run(key)
                except Exception as error:
                    future.set_exception(error)
                    future.exception()  # retrieved: nobody may be waiting any more (all cancelled)
                else:
                    future.set_result(None)
        except asyncio.CancelledError:
            for pending in (future, state.next_run):
                if pending is not None and not pending.done():
                    pending.cancel()
            raise
        finally:
            state.task = None
            if state.next_run is None:
                del self._keys[key]

    @property
    def busy_keys(self) -> int:
        return len(self._keys)

    async def cancel(self) -> None:
        tasks = [s.task for s in self._keys.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
