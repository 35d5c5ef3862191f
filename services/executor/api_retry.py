"""When the executor tries an API call again before reporting it failed: transient answers (500, 502,
503, 504, 408, 429) and transport trouble (timeout, refused or cut connection) are retried with jittered
backoff; a 429 or 503 that says ``Retry-After`` waits that long instead, no more. The tries have a budget
in time, not in count: another try starts only within ``budget`` seconds of the first. Anything else, and
the failure that leaves no time for another try, goes to the caller, which reports the action failed (or
leaves it to the bus's slower redelivery). Retrying a whole pod action is safe: each one first looks for
its action id on the object, so a write that did land before its answer was lost is found, not repeated.

``retry_delay`` is the pure decision (table-tested); ``call_with_retries`` is the loop around it.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import aiohttp
import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra.metrics import RETRIES
from services.infra.retry import Backoff

log = structlog.get_logger("executor")

_T = TypeVar("_T")

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class ApiRetryPolicy:
    # Seconds after the first try within which another may start. In time rather than in tries: a 500
    # costs a backoff step (20 ms at first) and a 429 its Retry-After (often 1 s), so a count of tries
    # (5, when the first step was 0.1 s) was 1.5 s of the one and 4 s of the other. The consumer reports
    # the action in progress meanwhile (services/infra/bus.py), so the bus does not hand it to another
    # executor while it is retried. Past it the action goes back to the bus (a redelivery 0.5 s or more
    # later, its pod's later actions with it; on the last delivery a failure and a new planning round),
    # which costs more than waiting.
    budget: float = 7.0
    # A ceiling on tries all the same (client-go's is 10 retries), so a server answering Retry-After: 0
    # again and again is not asked again in a tight loop for the whole budget.
    attempts: int = 10
    # A first wait of 20 ms (10-30 ms jittered), doubling to 2 s. A 500 refused before the write costs the
    # server next to nothing, and the pod, often the slowest of its step, waits for the retry: with 0.1 s
    # at first, 30% of writes answered 500 spent 4.5-15.5 s of waits per 30-pod rollout, a large share of
    # the time the errors added (docs/reliability.md, "Where 30% write errors go"). The doubling, the
    # jitter and the ceiling on tries still spread and bound what a failing server is asked; the first
    # wait is of the order of controller-runtime's per-item requeue backoff (5 ms, doubling).
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.02, maximum=2.0))


DEFAULT_API_RETRY = ApiRetryPolicy()


def retry_after_seconds(headers: Mapping[str, str] | None, now: datetime | None = None) -> float | None:
    """The ``Retry-After`` header in seconds (delta-seconds or an HTTP date), None if absent or bad."""
    if not headers:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_delay(
    error: BaseException, failures: int, elapsed: float, policy: ApiRetryPolicy, unit_random: float
) -> float | None:
    """Seconds to wait before trying again after the ``failures``-th failed try (1 = the first),
    ``elapsed`` seconds after the first try began; None: do not retry (a permanent error, the wait would
    end past the budget, or the tries are used up)."""
    if failures >= policy.attempts:
        return None
    delay = _wanted_delay(error, failures, policy, unit_random)
    if delay is None or elapsed + delay > policy.budget:
        return None
    return delay


def _wanted_delay(
    error: BaseException, failures: int, policy: ApiRetryPolicy, unit_random: float
) -> float | None:
    if isinstance(error, ApiException):
        status = error.status
        if status not in RETRYABLE_STATUSES:
            return None
        if status in _RETRY_AFTER_STATUSES:
            asked = retry_after_seconds(error.headers)
            if asked is not None:
                return asked  # the server's rule: this long, and no longer (no backoff on top)
        return policy.backoff.delay(failures - 1, unit_random)
    if isinstance(
        error, (TimeoutError, ConnectionError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
    ):
        return policy.backoff.delay(failures - 1, unit_random)
    return None


def _label(error: BaseException) -> str:
    return f"api_{error.status}" if isinstance(error, ApiException) else f"api_{type(error).__name__}"


async def call_with_retries(
    call: Callable[[], Awaitable[_T]],
    *,
    what: str,
    policy: ApiRetryPolicy = DEFAULT_API_RETRY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    before_retry: Callable[[], Awaitable[None]] | None = None,
) -> _T:
    """``await call()``, tried again per ``retry_delay``; raises the last error when it says stop.
    ``before_retry`` is awaited alongside each wait for another try (the executor records the action in
    hand): the next try starts once both are done."""
    failures = 0
    began = clock()
    while True:
        try:
            return await call()
        except Exception as error:
            failures += 1
            delay = retry_delay(error, failures, clock() - began, policy, random.random())
            if delay is None:
                raise
            RETRIES.labels(_label(error)).inc()
            log.info("api_retry", what=what, attempt=failures, delay=round(delay, 3), error=_label(error))
            if before_retry is None:
                await sleep(delay)
            else:
                # During the wait, not before it: the record (a store append) is no reason to try later.
                await asyncio.gather(before_retry(), sleep(delay))
