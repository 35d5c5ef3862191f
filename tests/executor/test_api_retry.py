"""The executor's retry policy for API calls: what is retried, how long it waits, when it stops."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.api_retry import (
    DEFAULT_API_RETRY,
    ApiRetryPolicy,
    call_with_retries,
    retry_after_seconds,
    retry_delay,
)
from services.infra.retry import Backoff

NO_JITTER = ApiRetryPolicy(budget=7.0, attempts=10, backoff=Backoff(initial=0.1, maximum=2.0, jitter=0.0))


def api_error(status: int, retry_after: str | None = None) -> ApiException:
    error = ApiException(status=status, reason="injected")
    error.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return error


@pytest.mark.parametrize(
    ("error", "failures", "elapsed", "expected"),
    [
        (api_error(500), 1, 0.0, 0.1),
        (api_error(500), 2, 0.1, 0.2),
        (api_error(503), 3, 0.3, 0.4),
        (api_error(500), 5, 1.5, 1.6),  # a fifth failure is retried while there is time
        (api_error(500), 7, 4.9, 2.0),  # the backoff stops growing at 2 s
        (api_error(500), 8, 5.5, None),  # 5.5 + 2 s would end past the 7 s budget: report it
        (api_error(500), 10, 0.5, None),  # the tenth failure: tries used up, time or not
        (api_error(502), 1, 0.0, 0.1),
        (api_error(504), 1, 0.0, 0.1),
        (api_error(408), 1, 0.0, 0.1),
        (api_error(429, "1"), 1, 0.0, 1.0),  # Retry-After honoured, nothing added to it
        (api_error(429, "1"), 6, 5.0, 1.0),  # six 429s in a row: a count of five would have stopped
        (api_error(429, "1"), 7, 6.2, None),  # 6.2 + 1 s is past the budget
        (api_error(429, "2"), 3, 2.0, 2.0),
        (api_error(429, "0"), 3, 0.1, 0.0),
        (api_error(429), 1, 0.0, 0.1),  # no Retry-After: backoff
        (api_error(429, "soon"), 1, 0.0, 0.1),  # unreadable: backoff
        (api_error(429, "60"), 1, 0.0, None),  # longer than we hold an action: to the bus
        (api_error(429, "7"), 1, 0.0, 7.0),  # just fits
        (api_error(503, "1"), 2, 0.1, 1.0),
        (api_error(400), 1, 0.0, None),  # permanent
        (api_error(403), 1, 0.0, None),
        (api_error(404), 1, 0.0, None),
        (api_error(409), 1, 0.0, None),  # conflicts are the action's own business (re-read and patch)
        (api_error(422), 1, 0.0, None),
        (TimeoutError(), 1, 0.0, 0.1),
        (aiohttp.ServerDisconnectedError(), 2, 0.1, 0.2),  # a cut connection
        (aiohttp.ClientConnectionError("refused"), 1, 0.0, 0.1),
        (ConnectionResetError(), 1, 0.0, 0.1),
        (ValueError("bug"), 1, 0.0, None),
    ],
    ids=lambda v: repr(v) if isinstance(v, BaseException) else str(v),
)
def test_retry_delay(error: BaseException, failures: int, elapsed: float, expected: float | None) -> None:
    delay = retry_delay(error, failures, elapsed, NO_JITTER, 0.5)
    assert delay == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("error", "failures", "unit_random", "expected"),
    [
        (api_error(500), 1, 0.5, 0.02),  # the first wait: 20 ms
        (api_error(500), 1, 0.0, 0.01),  # jittered by [0.5, 1.5): 10-30 ms
        (api_error(500), 1, 0.999, 0.02998),
        (api_error(500), 2, 0.5, 0.04),  # doubling
        (api_error(500), 5, 0.5, 0.32),
        (api_error(500), 8, 0.5, 2.0),  # up to 2 s
        (api_error(500), 8, 0.0, 1.0),  # the jitter applies at the ceiling too
        (TimeoutError(), 1, 0.5, 0.02),
        (api_error(429, "1"), 1, 0.5, 1.0),  # Retry-After exactly, whatever the backoff
        (api_error(429, "1"), 1, 0.0, 1.0),  # and no jitter on it
        (api_error(429), 1, 0.5, 0.02),  # no Retry-After: the backoff
    ],
    ids=lambda v: repr(v) if isinstance(v, BaseException) else str(v),
)
def test_default_policy_waits(
    error: BaseException, failures: int, unit_random: float, expected: float
) -> None:
    """The executor's own policy: a 500 costs a pod 10-30 ms before its first retry, not 50-150 ms."""
    assert retry_delay(error, failures, 0.0, DEFAULT_API_RETRY, unit_random) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "0"}, 0.0),
        ({"Retry-After": "Tue, 01 Dec 2026 12:00:07 GMT"}, 7.0),
        ({"Retry-After": "Tue, 01 Dec 2026 11:59:00 GMT"}, 0.0),  # in the past
        ({"Retry-After": "later"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str] | None, expected: float | None) -> None:
    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds(headers, now) == expected


async def test_call_with_retries_sleeps_as_decided_then_succeeds_or_raises() -> None:
    now = 0.0
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        nonlocal now
        now += seconds
        slept.append(seconds)

    answers: list[BaseException | str] = [api_error(500), api_error(429, "1"), "created"]

    async def create() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def clock() -> float:
        return now

    assert (
        await call_with_retries(create, what="createPod", policy=NO_JITTER, sleep=sleep, clock=clock)
        == "created"
    )
    assert slept == [pytest.approx(0.1), 1.0]

    async def always_500() -> str:
        nonlocal now
        now += 0.05  # each try takes a little time, counted in the budget
        raise api_error(500)

    slept.clear()
    with pytest.raises(ApiException) as raised:
        await call_with_retries(always_500, what="createPod", policy=NO_JITTER, sleep=sleep, clock=clock)
    # 0.1, 0.2, 0.4, 0.8, 1.6, 2.0: 5.1 s of waits and 0.35 s of tries; another 2 s would pass 7 s
    assert raised.value.status == 500 and slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0])

    async def always_429() -> str:
        raise api_error(429, "1")

    slept.clear()
    with pytest.raises(ApiException):
        await call_with_retries(always_429, what="createPod", policy=NO_JITTER, sleep=sleep, clock=clock)
    assert slept == [1.0] * 7  # as many seconds as the budget holds: eight tries, not five

    async def forbidden() -> str:
        raise api_error(403)

    slept.clear()
    with pytest.raises(ApiException):
        await call_with_retries(forbidden, what="createPod", policy=NO_JITTER, sleep=sleep, clock=clock)
    assert slept == []


async def test_the_record_before_a_retry_runs_during_the_wait_not_before_it() -> None:
    """``before_retry`` (the executor's PodActionStarted append) and the backoff wait run together: the
    next try starts when both are done, not after the one and then the other."""
    waiting = asyncio.Event()
    recorded_while_waiting = False
    answers: list[BaseException | str] = [api_error(500), "patched"]

    async def patch() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def sleep(seconds: float) -> None:
        waiting.set()
        await asyncio.sleep(0)

    async def record() -> None:
        nonlocal recorded_while_waiting
        # Done only once the wait has begun: awaited before the wait, this would never return.
        await asyncio.wait_for(waiting.wait(), timeout=2.0)
        recorded_while_waiting = True

    result = await call_with_retries(
        patch, what="markReady", policy=NO_JITTER, sleep=sleep, before_retry=record
    )
    assert result == "patched" and recorded_while_waiting and not answers
