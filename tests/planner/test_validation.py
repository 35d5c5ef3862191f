"""Invalid specs are rejections naming the field; out-of-range but well-formed values are clamped."""

from __future__ import annotations

import json

import pytest

from services.kinds.cloneset.rules.plan import plan, plan_json
from services.model import intorpercent
from tests.planner.builders import IDS, cloneset, plan_input, running_pod


@pytest.mark.parametrize(
    ("partition", "replicas", "kept"),
    [
        ("40%", 5, 2),
        ("50%", 5, 3),
        ("99%", 9, 8),
        ("100%", 99, 99),
        ("1%", 10, 1),
        ("0.01%", 9, 1),
        ("99%", 0, 0),
        (10, 10, 10),
        (7, 5, 5),
        ("120%", 5, 5),
        (None, 5, 0),
        (2, 5, 2),
    ],
)
def test_partition_resolves_like_openkruise(partition: object, replicas: int, kept: int) -> None:
    assert intorpercent.partition_count(partition, replicas) == kept


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"replicas": -1}, "spec.replicas"),
        ({"updateStrategy": {"partition": "abc"}}, "spec.updateStrategy.partition"),
        ({"updateStrategy": {"partition": "-1"}}, "spec.updateStrategy.partition"),
        ({"updateStrategy": {"partition": -1}}, "spec.updateStrategy.partition"),
        ({"updateStrategy": {"partition": "99"}}, "spec.updateStrategy.partition"),
        ({"updateStrategy": {"type": "RollingUpdate"}}, "spec.updateStrategy.type"),
        ({"updateStrategy": {"maxUnavailable": "x%"}}, "spec.updateStrategy.maxUnavailable"),
        ({"updateStrategy": {"maxUnavailable": 0, "maxSurge": 0}}, "spec.updateStrategy.maxUnavailable"),
        ({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 1}}, "spec.updateStrategy.maxSurge"),
        ({"selector": {"matchLabels": {"app": "other"}}}, "spec.template.metadata.labels"),
        ({"selector": {}}, "spec.selector"),
        ({"scaleStrategy": {"podsToDelete": ["a", "a"]}}, "spec.scaleStrategy.podsToDelete"),
        ({"minReadySeconds": -3}, "spec.minReadySeconds"),
        ({"lifecycle": {"preDelete": {"labelsHandler": {"k": 1}}}}, "spec.lifecycle.preDelete.labelsHandler"),
        (
            {"lifecycle": {"inPlaceUpdate": {"finalizersHandler": "f"}}},
            "spec.lifecycle.inPlaceUpdate.finalizersHandler",
        ),
        (
            {"lifecycle": {"preNormal": {"markPodNotReady": "yes"}}},
            "spec.lifecycle.preNormal.markPodNotReady",
        ),
    ],
)
def test_invalid_spec_is_rejected_naming_the_field(change: dict[str, object], field: str) -> None:
    cs = cloneset()
    cs["spec"].update(change)
    result = plan(plan_input(cs, [running_pod(cloneset(), i) for i in IDS[:2]]))
    assert result.rejected is not None
    assert result.rejected.field == field
    assert result.actions == []
    assert result.status is not None
    rejected = [c for c in result.status["conditions"] if c["type"] == "Rejected"]
    assert rejected and field in rejected[0]["message"]


def test_template_restart_policy_and_deadline_are_rejected() -> None:
    cs = cloneset()
    cs["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert plan(plan_input(cs, [])).rejected.field == "spec.template.spec.restartPolicy"  # type: ignore[union-attr]


def test_out_of_range_partition_is_clamped_not_rejected() -> None:
    for partition in ("120%", 9):
        result = plan(plan_input(cloneset(strategy={"partition": partition}), []))
        assert result.rejected is None
        assert result.partition == 5
        assert result.status is not None and result.status["expectedUpdatedReplicas"] == 0


@pytest.mark.parametrize("data", [b"not json", b"{}", b'{"cloneSet": 3, "now": "x"}', b"[1,2]"])
def test_undecodable_input_is_a_rejection_not_an_exception(data: bytes) -> None:
    out = json.loads(plan_json(data))
    assert out["rejected"]["field"] == "input"
    assert out["actions"] == []


def test_malformed_pod_is_a_rejection() -> None:
    result = plan(plan_input(cloneset(), [{"metadata": {}}]))
    assert result.rejected is not None and result.rejected.field == "pods[0].metadata.name"


def test_valid_plan_clears_a_previous_rejection_condition() -> None:
    cs = cloneset()
    cs["status"] = {"conditions": [{"type": "Rejected", "status": "True", "message": "old"}]}
    result = plan(plan_input(cs, []))
    assert result.status is not None
    assert all(c["type"] != "Rejected" for c in result.status["conditions"])
