"""Agreement between an observed pod action and rollbook's decision (services/planner/shadow_compare.py)."""

from __future__ import annotations

from typing import Any

import pytest

from services.planner.shadow_compare import (
    ABOVE_MAX_UNAVAILABLE,
    SURGE_THRASH,
    Intent,
    compare,
    observed_intent,
    rollbook_intents,
)


def test_rollbook_actions_reduce_to_intents() -> None:
    actions: list[dict[str, Any]] = [
        {"action": "markNotReady", "pod": "a"},
        {"action": "updateInPlace", "pod": "b"},
        {"action": "markReady", "pod": "c"},
        {"action": "deletePod", "pod": "d"},
        {"action": "createPod", "pod": "e", "revision": "sample-new"},
        {"action": "recreatePod", "pod": "f", "revision": "sample-new"},
        {"action": "setPodsToDelete", "pod": "sample"},
    ]
    assert rollbook_intents(actions, "sample-new") == {
        ("update", "a"),
        ("update", "b"),
        ("update", "c"),
        ("delete", "d"),
        ("create", "new"),
        ("delete", "f"),
    }


@pytest.mark.parametrize(
    ("action", "revision", "expected"),
    [
        ("createPod", "sample-new", ("create", "new")),
        ("recreatePod", "new", ("create", "new")),
        ("deletePod", "x", ("delete", "p")),
        ("updateInPlace", "sample-new", ("update", "p")),
        ("becameReady", "sample-new", None),
    ],
)
def test_observed_intents(action: str, revision: str, expected: Intent | None) -> None:
    assert observed_intent(action, "p", revision) == expected


UPDATE_A: set[Intent] = {("update", "a")}
CASES = [
    # name, intent, decision, unavailable, max unavailable, thrash -> verdict, pattern, reason contains
    ("same pod", ("update", "a"), UPDATE_A, 1, 1, False, "agree", None, "updated in place a too"),
    ("other pod", ("update", "b"), UPDATE_A, 1, 1, False, "differ", None, "updated in place a instead"),
    ("batch above maxUnavailable", ("update", "b"), set(), 2, 1, False, "differ", ABOVE_MAX_UNAVAILABLE,
     "waited; 2 pods unavailable, maxUnavailable 1"),
    ("rollbook would delete instead", ("update", "b"), {("delete", "a")}, 1, 1, False, "differ", None,
     "deleted a instead"),
    ("create at the update revision", ("create", "new"), {("create", "new")}, 1, 1, False, "agree", None, ""),
    ("create at the old revision", ("create", "old"), {("create", "new")}, 1, 1, False, "differ", None,
     "created a pod at revision new instead"),
    ("surge thrash", ("delete", "s"), set(), 0, 1, True, "differ", SURGE_THRASH, "created at the update"),
    ("surge pod deleted as rollbook would", ("delete", "s"), {("delete", "s")}, 0, 1, True, "agree",
     SURGE_THRASH, ""),
    ("no decision", ("update", "a"), None, 1, 1, False, "unknown", None, "no decision"),
    ("outside a rollout", ("delete", "a"), set(), 3, None, False, "differ", None, "waited"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("intent", "decision", "unavailable", "max_unavailable", "thrash", "verdict", "pattern", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_compare(
    intent: Intent,
    decision: set[Intent] | None,
    unavailable: int,
    max_unavailable: int | None,
    thrash: bool,
    verdict: str,
    pattern: str | None,
    reason: str,
) -> None:
    result = compare(
        intent, decision, unavailable=unavailable, max_unavailable=max_unavailable, thrash=thrash
    )
    assert (result.verdict, result.pattern) == (verdict, pattern)
    assert reason in result.reason
