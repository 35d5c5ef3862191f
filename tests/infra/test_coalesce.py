"""Coalescer: a burst of requests for one key is served by one run that starts after them; runs of one
key never overlap; different keys run at once; a run's error reaches the requests it served."""

from __future__ import annotations

import asyncio

import pytest

from services.infra.coalesce import Coalescer


async def test_requests_during_a_run_are_served_by_one_next_run() -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    seen: list[int] = []
    events = [0]  # what has "happened" for the key; a run sees everything so far

    async def run(key: str) -> None:
        seen.append(events[0])
        started.set()
        await gate.wait()

    coalescer: Coalescer[str] = Coalescer(run)
    events[0] = 1
    first = asyncio.create_task(coalescer.request("web"))
    await started.wait()  # run 1 is in progress (it saw event 1)
    events[0] = 5
    burst = [asyncio.create_task(coalescer.request("web")) for _ in range(4)]  # events 2..5 meanwhile
    await asyncio.sleep(0)
    assert not any(t.done() for t in burst)  # a run that started before them does not serve them
    gate.set()
    await asyncio.gather(first, *burst)
    assert seen == [1, 5]  # two runs in all; the second saw the whole burst
    assert coalescer.runs == 2 and coalescer.requests == 5
    assert coalescer.busy_keys == 0


async def test_one_keys_runs_never_overlap_and_keys_run_concurrently() -> None:
    running: dict[str, int] = {"a": 0, "b": 0}
    both = asyncio.Event()

    async def run(key: str) -> None:
        running[key] += 1
        assert running[key] == 1, "two runs of one key overlapped"
        if running["a"] and running["b"]:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # finishes only if the other key runs meanwhile
        running[key] -= 1

    coalescer: Coalescer[str] = Coalescer(run)
    await asyncio.gather(*(coalescer.request(k) for k in ("a", "b", "a", "b", "a")))
    assert coalescer.runs <= 4


async def test_a_failed_run_raises_in_the_requests_it_served_and_the_next_run_starts_clean() -> None:
    calls = 0

    async def run(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("decisions stream moved")

    coalescer: Coalescer[str] = Coalescer(run)
    with pytest.raises(RuntimeError, match="moved"):
        await coalescer.request("web")
    await coalescer.request("web")
    assert calls == 2


async def test_a_cancelled_request_does_not_cancel_the_run_others_wait_for() -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    finished: list[str] = []

    async def run(key: str) -> None:
        started.set()
        await gate.wait()
        finished.append(key)

    coalescer: Coalescer[str] = Coalescer(run)
    impatient = asyncio.create_task(coalescer.request("web"))
    await started.wait()
    patient = asyncio.create_task(coalescer.request("web"))
    impatient.cancel()
    gate.set()
    await patient
    assert finished == ["web", "web"]
