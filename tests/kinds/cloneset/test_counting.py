"""Table tests of the counting core (services/kinds/cloneset/rules/counting.py): ``classify_pods`` sorts a
round's pods into the classes scale and update count, ``calculate`` turns them into the round's diffs, as
OpenKruise's tests of ``calculateDiffsWithExpectation`` do, row by row: a CloneSet, its pods, the counts
expected."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from services.kinds.cloneset.rules import revisions
from services.kinds.cloneset.rules.context import Context
from services.kinds.cloneset.rules.counting import Classes, Diffs, calculate, classify_pods
from services.kinds.cloneset.rules.names import LIFECYCLE_STATE_LABEL, SPECIFIED_DELETE_LABEL
from services.kinds.cloneset.rules.podstate import parse_time
from services.kinds.cloneset.rules.spec import resolve
from tests.planner.builders import IDS, NOW, cloneset, revision_record, running_pod, with_image


@dataclass(frozen=True)
class Pod:
    """One pod of a row: at the update revision (``new``) or the one before, and its state."""

    new: bool = False
    ready: bool = True
    specified_delete: bool = False
    named_in_pods_to_delete: bool = False
    preparing_delete: bool = False


@dataclass(frozen=True)
class Row:
    name: str
    pods: list[Pod]
    replicas: int = 5
    strategy: dict[str, Any] = field(default_factory=dict)
    scale: dict[str, Any] = field(default_factory=dict)


def context(row: Row) -> Context:
    """The round's Context as the planner builds it (plan.py): v1's pods, the CloneSet changed to v2."""
    v1 = cloneset(replicas=row.replicas, strategy=row.strategy)
    v2 = with_image(v1, "nginx:mainline")
    pods, named = [], []
    for instance_id, pod in zip(IDS, row.pods, strict=False):
        obj = running_pod(v2 if pod.new else v1, instance_id, ready=pod.ready)
        labels = obj["metadata"]["labels"]
        if pod.specified_delete:
            labels[SPECIFIED_DELETE_LABEL] = "true"
        if pod.preparing_delete:
            labels[LIFECYCLE_STATE_LABEL] = "PreparingDelete"
        if pod.named_in_pods_to_delete:
            named.append(obj["metadata"]["name"])
        pods.append(obj)
    if named or row.scale:
        v2["spec"]["scaleStrategy"] = {**row.scale, "podsToDelete": named}
    spec = resolve(v2)
    recorded = revisions.read_revisions([revision_record(v1, 1)])
    plan = revisions.plan_revisions(spec, recorded, recorded[0].name, 0)
    now = parse_time(NOW)
    assert now is not None
    return Context.build(spec, now, NOW, plan, pods, [], {})


def counts(classes: Classes) -> dict[str, int]:
    """The classes as numbers (the pod lists by their length)."""
    return {k: (len(v) if isinstance(v, list) else v) for k, v in asdict(classes).items()}


OLD, NEW = Pod(), Pod(new=True)
RECREATE = {"type": "ReCreate"}
IN_PLACE = {"type": "InPlaceIfPossible"}

# (row, the classes' counts that differ from zero)
CLASSIFY: list[tuple[Row, dict[str, int]]] = [
    (Row("all old, ready", [OLD] * 5), {"old": 5, "needs_recreate_old": 5}),
    (Row("all new, ready", [NEW] * 5), {"new": 5}),
    (
        Row("in place: old pods need no recreation", [OLD] * 3 + [NEW] * 2, strategy=IN_PLACE),
        {"old": 3, "new": 2},
    ),
    (
        Row("unready pods of each revision", [Pod(ready=False), OLD, Pod(new=True, ready=False), NEW]),
        {
            "old": 2,
            "new": 2,
            "unavailable": 2,
            "unavailable_all": 2,
            "unavailable_new": 1,
            "needs_recreate_old": 2,
        },
    ),
    (
        Row(
            "specified-delete: an old one in flight, a new one",
            [Pod(specified_delete=True), Pod(new=True, specified_delete=True), OLD],
        ),
        {
            "old": 2,
            "new": 1,
            "to_delete": 2,
            "to_delete_old": 1,
            "to_delete_new": 1,
            "in_flight_old": 1,
            "needs_recreate_old": 1,
        },
    ),
    (
        Row("podsToDelete names one", [Pod(named_in_pods_to_delete=True), OLD, NEW]),
        {"old": 2, "new": 1, "to_delete": 1, "to_delete_old": 1, "in_flight_old": 1, "needs_recreate_old": 1},
    ),
    (
        Row(
            "PreparingDelete: neither to delete nor unavailable, still unavailable to the update",
            [Pod(preparing_delete=True, ready=False), OLD],
        ),
        {"old": 2, "pre_deleting": 1, "unavailable_all": 1, "needs_recreate_old": 1},
    ),
]


@pytest.mark.parametrize(("row", "expected"), CLASSIFY, ids=[row.name for row, _ in CLASSIFY])
def test_classify_pods(row: Row, expected: dict[str, int]) -> None:
    zero = dict.fromkeys(counts(classify_pods(context(Row("none", [])))), 0)
    assert counts(classify_pods(context(row))) == {**zero, **expected}


# (row, the diffs that differ from zero)
CALCULATE: list[tuple[Row, dict[str, int]]] = [
    (Row("settled: nothing to do", [NEW] * 5), {}),
    (Row("scale up 3 -> 5", [NEW] * 3), {"scale_up_num": 2, "scale_up_limit": 2}),
    (
        Row("scale up keeps partition pods at the old revision", [OLD] * 3, strategy={"partition": 4}),
        {"scale_up_num": 2, "scale_up_old": 1, "scale_up_limit": 2},
    ),
    (
        Row(
            "scale up limited by scaleStrategy.maxUnavailable",
            [NEW, NEW, Pod(new=True, ready=False)],
            scale={"maxUnavailable": 2},
        ),
        {"scale_up_num": 2, "scale_up_limit": 1},
    ),
    (
        Row("scale down 5 -> 3", [NEW] * 5, replicas=3),
        {"scale_down_num": 2, "delete_ready_limit": 3},
    ),
    (
        Row("scale down prefers old pods", [OLD] * 2 + [NEW] * 3, replicas=3, strategy={"partition": 1}),
        {"scale_down_num": 2, "scale_down_old": 1, "delete_ready_limit": 3, "update_num": 0},
    ),
    (
        Row("update all 5, maxUnavailable 2", [OLD] * 5, strategy={"maxUnavailable": 2}),
        {"update_num": 5, "update_max_unavailable": 2},
    ),
    (
        Row("partition 2 keeps 2 old", [OLD] * 5, strategy={"partition": 2, "maxUnavailable": 2}),
        {"update_num": 3, "update_max_unavailable": 2},
    ),
    (
        Row("partition reached", [OLD] * 2 + [NEW] * 3, strategy={"partition": 2}),
        {},
    ),
    (
        Row("partition raised: updated pods stay", [OLD] + [NEW] * 4, strategy={"partition": 3}),
        {},
    ),
    (
        Row(
            "recreate with surge 1, maxUnavailable 0",
            [OLD] * 5,
            strategy={**RECREATE, "maxSurge": 1, "maxUnavailable": 0},
        ),
        {"use_surge": 1, "scale_up_num": 1, "scale_up_limit": 1, "update_num": 5},
    ),
    (
        Row(
            "recreate with surge 2 and maxUnavailable 1",
            [OLD] * 5,
            strategy={**RECREATE, "maxSurge": 2, "maxUnavailable": 1},
        ),
        {
            "use_surge": 2,
            "scale_up_num": 2,
            "scale_up_limit": 2,
            "update_num": 5,
            "update_max_unavailable": 1,
        },
    ),
    (
        Row(
            "in place spends no surge (kruise#2369)",
            [OLD] * 5,
            strategy={**IN_PLACE, "maxSurge": 1, "maxUnavailable": 1},
        ),
        {"update_num": 5, "update_max_unavailable": 1},
    ),
    (
        Row(
            "in place with maxUnavailable 0: surge is its only budget",
            [OLD] * 5,
            strategy={**IN_PLACE, "maxSurge": 1, "maxUnavailable": 0},
        ),
        {"use_surge": 1, "scale_up_num": 1, "scale_up_limit": 1, "update_num": 5},
    ),
    (
        Row(
            "surge capped by the pods left to update",
            [OLD] + [NEW] * 4,
            strategy={**RECREATE, "maxSurge": 3, "maxUnavailable": 1},
        ),
        {
            "use_surge": 1,
            "scale_up_num": 1,
            "scale_up_limit": 1,
            "update_num": 1,
            "update_max_unavailable": 1,
        },
    ),
    (
        Row(
            "an old pod marked for recreation is not picked again",
            [Pod(specified_delete=True)] + [OLD] * 4,
            strategy={"maxUnavailable": 2},
        ),
        {"update_num": 4, "update_max_unavailable": 2, "delete_ready_limit": 2},
    ),
    (
        Row(
            "an old pod to delete with surge: replaced first, at the update revision",
            [Pod(named_in_pods_to_delete=True)] + [NEW] * 4,
            strategy={"maxSurge": 1, "maxUnavailable": 0},
        ),
        {"use_surge": 1, "use_surge_old": 1, "scale_up_num": 1, "scale_up_limit": 1},
    ),
    (
        Row(
            "unavailable pods use up the delete budget",
            [Pod(new=True, specified_delete=True), Pod(new=True, ready=False), Pod(new=True, ready=False)]
            + [NEW] * 2,
            strategy={"maxUnavailable": 2},
        ),
        {},
    ),
]


@pytest.mark.parametrize(("row", "expected"), CALCULATE, ids=[row.name for row, _ in CALCULATE])
def test_calculate(row: Row, expected: dict[str, int]) -> None:
    ctx = context(row)
    assert asdict(calculate(ctx, classify_pods(ctx))) == {**asdict(Diffs()), **expected}
