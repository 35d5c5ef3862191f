"""When the executor tries an API call again before reporting it failed: transient answers (500, 502,
503, 504, 408, 429) and transport trouble (timeout, refused or cut connection) are retried a few times
with jittered backoff; a 429 or 503 that says ``Retry-After`` waits that long instead (up to 5 s). Anything
else, and the last failure, goes to the caller, which reports the action failed (or leaves it to the
bus's slower redelivery). Retrying a whole pod action is safe: each one first looks for its action id
on the object, so a write that did land before its answer was lost is found, not repeated.

``retry_delay`` is the pure decision (table-tested); ``call_with_retries`` is the loop around it.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
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
    attempts: int = 5  # tries of one call in all, the first included
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.1, maximum=2.0))
    # Longest Retry-After waited here (the pod's later actions wait meanwhile); a longer one ends the
    # tries and the bus redelivers the action later.
    max_retry_after: float = 5.0


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
    error: BaseException, failures: int, policy: ApiRetryPolicy, unit_random: float
) -> float | None:
    """Seconds to wait before trying again after the ``failures``-th failed try (1 = the first), or
    None: do not retry (a permanent error, or the tries are used up)."""
    if failures >= policy.attempts:
        return None
    if isinstance(error, ApiException):
        status = error.status
        if status not in RETRYABLE_STATUSES:
            return None
        if status in _RETRY_AFTER_STATUSES:
            asked = retry_after_seconds(error.headers)
            if asked is not None:
                # Longer than we hold an action: leave it to the bus's redelivery, which waits longer.
                return asked if asked <= policy.max_retry_after else None
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
) -> _T:
    """``await call()``, tried again per ``retry_delay``; raises the last error when it says stop."""
    failures = 0
    while True:
        try:
            return await call()
        except Exception as error:
            failures += 1
            delay = retry_delay(error, failures, policy, random.random())
            if delay is None:
                raise
            RETRIES.labels(_label(error)).inc()
            log.info("api_retry", what=what, attempt=failures, delay=round(delay, 3), error=_label(error))
            await sleep(delay)
