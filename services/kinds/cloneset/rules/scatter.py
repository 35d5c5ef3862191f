"""``updateStrategy.scatterStrategy``: spread the pods of a label value through the update order, as
OpenKruise's scatter sorter (pkg/util/updatesort/scatter_sort.go) does. Pure, over any items with labels.

For each term (several terms: those matching most candidates first), the candidates matching it are
interleaved with the others in groups sized by the matched/unmatched density over **all** pods (or over
the candidates when they are sparser), the last matching candidate moved to the very end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Labels = Callable[[T], dict[str, str]]


def _round(value: float) -> int:
    """Go's ``math.Round``: half away from zero (the values here are positive)."""
    return math.floor(value + 0.5)


@dataclass(frozen=True, slots=True)
class _Group:
    number: int = 0
    matched_size: int = 0
    unmatched_size: int = 0
    unmatched_remainder: int = 0


def _group(matched: int, unmatched: int) -> _Group:
    number = min(matched, unmatched)
    return _Group(number, _round(matched / number), _round(unmatched / number))


def _group_by_density(total_matched: int, total_unmatched: int, matched: int, unmatched: int) -> _Group:
    total = _group(total_matched, total_unmatched)
    update = _group(matched, unmatched)
    if total_unmatched / total_matched >= unmatched / matched:
        return update
    number = min(matched // total.matched_size, unmatched // total.unmatched_size)
    return _Group(number, total.matched_size, total.unmatched_size, unmatched - number * total.unmatched_size)


def _terms(
    strategy: Sequence[dict[str, str]], order: Sequence[T], labels: Labels[T]
) -> list[tuple[str, str]]:
    if len(strategy) == 1:
        return [(strategy[0]["key"], strategy[0]["value"])]
    counts: dict[tuple[str, str], int] = {}
    for term in strategy:
        key, value = term["key"], term["value"]
        for item in order:
            if labels(item).get(key) == value:
                counts[(key, value)] = counts.get((key, value), 0) + 1
    # Stable: terms matching more candidates first, ties in strategy order.
    return sorted(counts, key=lambda term: -counts[term])


def _by_term(term: tuple[str, str], order: list[T], every: Sequence[T], labels: Labels[T]) -> list[T]:
    key, value = term
    matched = [item for item in order if labels(item).get(key) == value]
    unmatched = [item for item in order if labels(item).get(key) != value]
    if len(matched) <= 1 or len(unmatched) <= 1:
        return order
    total_matched = sum(1 for item in every if labels(item).get(key) == value)
    total_unmatched = len(every) - total_matched
    last = matched.pop()
    group = _group_by_density(total_matched - 1, total_unmatched, len(matched), len(unmatched))
    result: list[T] = []
    if group.unmatched_remainder > 0:
        result.extend(unmatched[: group.unmatched_remainder])
        unmatched = unmatched[group.unmatched_remainder :]
    for _ in range(group.number):
        result.extend(matched[: group.matched_size])
        matched = matched[group.matched_size :]
        result.extend(unmatched[: group.unmatched_size])
        unmatched = unmatched[group.unmatched_size :]
    return [*result, *matched, *unmatched, last]


def scatter(
    order: list[T], every: Sequence[T], strategy: Sequence[dict[str, str]] | None, labels: Labels[T]
) -> list[T]:
    """``order`` (update candidates, already sorted) scattered by ``strategy``; ``every`` is all pods."""
    if not strategy or len(order) <= 1:
        return order
    for term in _terms(strategy, order, labels):
        order = _by_term(term, order, every, labels)
    return order
