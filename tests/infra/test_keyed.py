"""KeyedRunner: work of one key in order and never overlapping, different keys at once, at most
``limit`` admitted. Every test waits on events the works themselves set, never on time."""

from __future__ import annotations

import asyncio
import random

import pytest

from services.infra.keyed import KeyedRunner


async def test_one_keys_work_runs_in_submission_order_without_overlap() -> None:
    runner = KeyedRunner(8)
    log: list[str] = []
    running = {"pod-a": 0}
    rng = random.Random(7)

    def work(index: int) -> object:
        async def run() -> None:
            running["pod-a"] += 1
            assert running["pod-a"] == 1, "two works of one key overlapped"
            log.append(f"start {index}")
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)  # yield: other work may run meanwhile
            log.append(f"end {index}")
            running["pod-a"] -= 1

        return run

    for index in range(6):
        await runner.submit("pod-a", work(index))  # type: ignore[arg-type]
    await runner.join()
    assert log == [f"{what} {i}" for i in range(6) for what in ("start", "end")]


async def test_different_keys_run_at_the_same_time() -> None:
    runner = KeyedRunner(8)
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a() -> None:
        a_started.set()
        await b_started.wait()  # finishes only if b runs while a is still running

    async def b() -> None:
        b_started.set()
        await a_started.wait()

    await runner.submit("pod-a", a)
    await runner.submit("pod-b", b)
    await asyncio.wait_for(runner.join(), 5)


async def test_no_more_than_limit_run_at_once_and_the_limit_is_reached() -> None:
    runner = KeyedRunner(3)
    running = 0
    most = 0
    rng = random.Random(3)

    def work() -> object:
        async def run() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            for _ in range(rng.randint(1, 4)):
                await asyncio.sleep(0)
            running -= 1

        return run

    for index in range(30):
        await runner.submit(f"pod-{index}", work())  # type: ignore[arg-type]
        assert runner.admitted <= 3
    await runner.join()
    assert most == 3
    assert runner.admitted == 0 and runner.free == 3


async def test_submit_waits_while_the_limit_is_admitted() -> None:
    runner = KeyedRunner(1)
    release = asyncio.Event()
    second_ran = asyncio.Event()

    async def first() -> None:
        await release.wait()

    async def second() -> None:
        second_ran.set()

    await runner.submit("a", first)
    submitting = asyncio.create_task(runner.submit("b", second))
    await asyncio.sleep(0)
    assert runner.admitted == 1 and not submitting.done()  # held back: first still runs
    release.set()
    await submitting
    await asyncio.wait_for(second_ran.wait(), 5)
    await runner.join()


async def test_a_failing_work_does_not_stop_its_keys_later_work() -> None:
    runner = KeyedRunner(2)
    done: list[int] = []

    async def fail() -> None:
        raise RuntimeError("API said no")

    async def ok() -> None:
        done.append(1)

    await runner.submit("pod", fail)
    await runner.submit("pod", ok)
    await runner.join()
    assert done == [1]
    assert runner.admitted == 0


async def test_cancel_drops_queued_work_and_frees_every_slot() -> None:
    runner = KeyedRunner(4)
    started = asyncio.Event()
    ran_after: list[str] = []

    async def blocked() -> None:
        started.set()
        await asyncio.Event().wait()

    async def queued() -> None:
        ran_after.append("queued")

    await runner.submit("pod", blocked)
    await runner.submit("pod", queued)
    await started.wait()
    await runner.cancel()
    assert ran_after == []
    assert runner.admitted == 0
    await asyncio.wait_for(runner.join(), 5)


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        KeyedRunner(0)
