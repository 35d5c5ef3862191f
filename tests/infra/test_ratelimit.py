"""TokenBucket: client-go's QPS and burst, decided on a given clock (table tests), and ``acquire``."""

from __future__ import annotations

import asyncio

import pytest

from services.infra.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("qps", "burst", "times", "waits"),
    [
        # A full bucket lets the burst through at once, then one request per 1/qps.
        (10.0, 3, [0, 0, 0, 0, 0], [0, 0, 0, 0.1, 0.2]),
        # Tokens come back with time, never more than the burst.
        (10.0, 2, [0, 0, 10, 10, 10], [0, 0, 0, 0, 0.1]),
        # Half a token's time later: the next request waits for the other half.
        (4.0, 1, [0, 0.125], [0, 0.125]),
        # Waiters queue up: each reserved token is further in the future.
        (2.0, 1, [0, 0, 0, 0.5], [0, 0.5, 1.0, 1.0]),
        # No limit.
        (0.0, 0, [0, 0, 0], [0, 0, 0]),
    ],
)
def test_reserve(qps: float, burst: int, times: list[float], waits: list[float]) -> None:
    clock = Clock()
    bucket = TokenBucket(qps, burst, clock=clock)
    got = []
    for at in times:
        clock.now = at
        got.append(round(bucket.reserve(clock.now), 6))
    assert got == waits


@pytest.mark.parametrize(
    ("grain", "times", "waits"),
    [
        # 10 QPS, burst 1, grain 0.5 s: tokens due at 0.1, 0.2, ... wait for the next multiple of 0.5 s,
        # so those due within one grain go together.
        (0.5, [0, 0, 0, 0, 0, 0, 0], [0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0]),
        # Due at 0.15: put off to 0.5.
        (0.5, [0, 0.05], [0, 0.45]),
        # A token due exactly on the grid waits for nothing more.
        (0.5, [0, 0.4, 0.4], [0, 0, 0.1]),
        # A request the bucket lets through at once is never held back.
        (0.5, [0, 0.2, 0.7], [0, 0, 0]),
        # No grain: each token when it is due.
        (0.0, [0, 0, 0], [0, 0.1, 0.2]),
    ],
)
def test_reserve_with_a_grain(grain: float, times: list[float], waits: list[float]) -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 1, grain=grain, clock=clock)
    got = []
    for at in times:
        clock.now = at
        got.append(round(bucket.reserve(clock.now), 6))
    assert got == waits


def test_a_grain_keeps_the_rate() -> None:
    """Over a long queue the grain costs no throughput: the n-th waiter goes when its token is due, at
    most one grain later."""
    clock = Clock()
    bucket = TokenBucket(100.0, 5, grain=0.05, clock=clock)
    waits = [bucket.reserve(0.0) for _ in range(1005)]
    assert waits[:5] == [0.0] * 5
    for n, wait in enumerate(waits[5:], start=1):
        due = n / 100.0
        assert due - 1e-9 <= wait <= due + 0.05 + 1e-9
    assert len(set(round(w, 6) for w in waits[5:])) == 1000 // 5  # 5 a group


def test_a_token_given_back_serves_the_next_request() -> None:
    clock = Clock()
    bucket = TokenBucket(1.0, 1, clock=clock)
    assert bucket.reserve(0) == 0
    assert bucket.reserve(0) == 1.0
    bucket.give_back()
    assert bucket.reserve(0) == 1.0  # the cancelled waiter's place is free again


def test_a_limit_needs_a_burst_of_at_least_one() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5.0, 0)


async def test_acquire_waits_its_turn_and_reports_the_wait() -> None:
    bucket = TokenBucket(200.0, 1)
    waits = await asyncio.gather(*(bucket.acquire() for _ in range(3)))
    assert waits == [0.0, pytest.approx(0.005, abs=1e-3), pytest.approx(0.010, abs=1e-3)]


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    bucket = TokenBucket(1.0, 1)
    assert await bucket.acquire() == 0.0
    waiter = asyncio.create_task(bucket.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert bucket.reserve(bucket._clock()) <= 1.0  # one token's wait, not two
