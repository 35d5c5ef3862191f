"""Int-or-percent values (``partition``, ``maxUnavailable``, ``maxSurge``), one parser for all of them.

OpenKruise has two parsers: the Kubernetes one (integer percents only, used by the
controller for maxUnavailable/maxSurge, which silently turns ``"12.5%"`` into 0) and the Kruise one
(decimal percents, used for partition and by the validating webhook). rollbook uses the Kruise parser
everywhere, so a value the webhook accepts never silently becomes 0 (docs/plan.md, "Choices").
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

IntOrPercent = int | str


class IntOrPercentError(ValueError):
    pass


def parse(value: Any) -> tuple[Fraction, bool]:
    """Return (number, is_percent). Raises IntOrPercentError for anything but an int or ``"<decimal>%"``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise IntOrPercentError(f"must be an integer or a percent string like '20%', got {value!r}")
    if isinstance(value, int):
        return Fraction(value), False
    if not value.endswith("%"):
        raise IntOrPercentError(f"must be an integer or a percent string like '20%', got {value!r}")
    text = value[:-1].strip()
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise IntOrPercentError(f"invalid percent {value!r}") from None
    if not number.is_finite() or text.startswith(("+",)) or not text:
        raise IntOrPercentError(f"invalid percent {value!r}")
    return Fraction(number), True


def scaled(value: Any, total: int, round_up: bool) -> int:
    """Resolve against ``total``: an int as is, a percent of total rounded up or down (exact arithmetic)."""
    number, is_percent = parse(value)
    if not is_percent:
        return int(number)
    exact = number * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def partition_count(partition: Any, replicas: int) -> int:
    """Pods kept at the old revision (OpenKruise's ``CalculatePartitionReplicas``)."""
    if partition is None:
        return 0
    _, is_percent = parse(partition)
    kept = scaled(partition, replicas, round_up=True)
    # A percent below 100% always lets at least one pod update.
    if replicas > 1 and is_percent and partition.strip() != "100%" and kept == replicas:
        kept = replicas - 1
    return max(0, min(kept, replicas))


def expected_updated(replicas: int, partition: int) -> int:
    """Pods wanted at the update revision: those the partition does not keep (OpenKruise's
    ``expectedUpdatedReplicas``). The one place this difference is taken."""
    return max(replicas - partition, 0)
