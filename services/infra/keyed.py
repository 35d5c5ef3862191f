"""Concurrency with order per key: many pieces of work at once, those sharing a key one after another.

``KeyedRunner(limit)`` runs submitted coroutine functions concurrently, at most ``limit`` admitted at once
(running, or waiting behind an earlier one of the same key); work with the same key runs strictly in
submission order and never overlaps. ``submit`` waits while ``limit`` are admitted, so a producer (a bus
consumer fetching messages) is held back instead of piling work up. The executor uses it with the pod as
the key: different pods in parallel, the actions on one pod in the order they were planned.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[None]]


class KeyedRunner:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._admitted = 0
        self._queues: dict[Hashable, deque[Work]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._space = asyncio.Event()
        self._space.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def admitted(self) -> int:
        """Work running or waiting behind its key."""
        return self._admitted

    @property
    def free(self) -> int:
        return self.limit - self._admitted

    async def wait_for_space(self) -> None:
        """Return once at least one more piece of work can be admitted without waiting."""
        while self._admitted >= self.limit:
            self._space.clear()
            await self._space.wait()

    async def submit(self, key: Hashable, work: Work) -> None:
        """Admit ``work`` (waiting for space); it runs after every earlier work of ``key`` has finished."""
        await self.wait_for_space()
        self._admitted += 1
        self._idle.clear()
        queue = self._queues.get(key)
        if queue is not None:  # a task is already working through this key's queue
            queue.append(work)
            return
        self._queues[key] = deque([work])
        task = asyncio.create_task(self._drain(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self, key: Hashable) -> None:
        queue = self._queues[key]
        try:
            while queue:
                try:
                    await queue[0]()
                except Exception:  # work settles its own errors; one failure must not stop the key
                    log.exception("work for key %r failed", key)
                finally:
                    queue.popleft()
                    self._release()
        finally:
            # Cancelled: what was still queued behind is dropped (and no longer counted).
            for _ in queue:
                self._release()
            queue.clear()
            del self._queues[key]

    def _release(self) -> None:
        self._admitted -= 1
        self._space.set()
        if self._admitted == 0:
            self._idle.set()

    async def join(self) -> None:
        """Wait until every admitted work has finished."""
        await self._idle.wait()

    async def cancel(self) -> None:
        """Cancel running work, drop queued work, and wait for it."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
