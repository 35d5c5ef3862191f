"""Small helpers shared by the bus tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from services.model.events import Envelope, RolloutPaused, new_event

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def paused(stream: str, version: int, *, event_id: uuid.UUID | None = None) -> Envelope:
    return new_event(
        RolloutPaused(rollout_id="r1", reason=f"step {version}"),
        stream=stream,
        stream_version=version,
        occurred_at=T0,
        event_id=event_id,
    )


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def eventually(condition: Callable[[], bool], *, within: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within}s")
        await asyncio.sleep(0.05)
