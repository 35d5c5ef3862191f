"""Decisions do not change when the planner plans on redacted records (docs/events.md, "Redaction"): the
same revision names, the same in-place classes (an env change is seen from its digest), pod bodies that
are the real ones once restored, and an installation upgraded with recorded real revisions rolls nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import plan
from services.model.redaction import MARK, RedactionPolicy, contains_digest, digest_map, restore
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod

POLICY = RedactionPolicy(b"r" * 32)
SECRET = "hunter2-canary"
EXTENDED = {"rollbook.io/inplace-mode": "extended"}


def _with_env(cs: dict[str, Any], value: str) -> dict[str, Any]:
    cs = copy.deepcopy(cs)
    cs["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "API_TOKEN", "value": value}]
    return cs


def _redacted(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    result = POLICY.redact_object(kind, obj)
    assert result is not None
    return result


def _recorded_revisions(result: model.Plan) -> list[dict[str, Any]]:
    return [copy.deepcopy(r) for r in result.revisions]


@pytest.mark.parametrize("collision_count", [0, 3])
def test_a_redacted_template_gets_the_real_templates_revision_name(collision_count: int) -> None:
    real = _with_env(cloneset(), SECRET)
    real["status"] = {"collisionCount": collision_count}
    pods = [running_pod(real, i) for i in IDS[:2]]
    from_real = plan(plan_input(real, pods))
    from_redacted = plan(plan_input(_redacted("CloneSet", real), [_redacted("Pod", p) for p in pods]))
    assert from_redacted.update_revision == from_real.update_revision
    assert [r["metadata"]["name"] for r in from_redacted.revisions] == [from_real.update_revision]
    assert SECRET not in str(from_redacted)
    # the recorded revision carries the real FNV beside its redacted template
    assert MARK in from_redacted.revisions[0]


def test_an_upgraded_installation_rolls_nothing_and_records_its_revision_again_redacted() -> None:
    real = _with_env(cloneset(strategy={"type": "InPlaceIfPossible"}), SECRET)
    pods = [running_pod(real, i) for i in IDS[:5]]
    recorded_before = [revision_record(real, 1)]  # a trail recorded before redaction: the real template
    result = plan(
        plan_input(_redacted("CloneSet", real), [_redacted("Pod", p) for p in pods], recorded_before)
    )
    assert result.actions == []
    assert result.update_revision == recorded_before[0]["metadata"]["name"]
    [again] = result.revisions
    assert again["metadata"]["name"] == result.update_revision and again["revision"] == 1
    assert SECRET not in str(again) and MARK in again
    # the next round, on the redacted record, is as quiet
    following = plan(plan_input(_redacted("CloneSet", real), [_redacted("Pod", p) for p in pods], [again]))
    assert following.actions == [] and following.revisions == []


@pytest.mark.parametrize(
    ("annotations", "strategy", "expected"),
    [
        (None, "InPlaceIfPossible", ("RecreatePod", None)),  # env is Static by default
        (EXTENDED, "InPlaceOnly", ("UpdateInPlace", "Rebuild")),  # and Rebuild in the extended mode
    ],
)
def test_an_env_change_is_seen_from_its_digest_with_the_same_class(
    annotations: dict[str, str] | None, strategy: str, expected: tuple[str, str | None]
) -> None:
    v1 = _with_env(cloneset(strategy={"type": strategy}, annotations=annotations), "old-" + SECRET)
    v2 = _with_env(v1, "new-" + SECRET)
    pods = [running_pod(v1, i) for i in IDS[:5]]
    first = plan(plan_input(_redacted("CloneSet", v1), [_redacted("Pod", p) for p in pods]))
    revisions = _recorded_revisions(first)
    real = plan(plan_input(v2, pods, [revision_record(v1, 1)]))
    redacted = plan(plan_input(_redacted("CloneSet", v2), [_redacted("Pod", p) for p in pods], revisions))
    assert redacted.update_revision == real.update_revision
    for result in (real, redacted):
        action = result.actions[0]
        assert (type(action).__name__, getattr(action, "change", None)) == expected
    assert [type(a).__name__ for a in redacted.actions] == [type(a).__name__ for a in real.actions]
    assert "new-" + SECRET not in str(redacted) and "old-" + SECRET not in str(redacted)
    if expected[0] == "UpdateInPlace":
        patch = redacted.actions[0].patch  # type: ignore[union-attr]
        assert contains_digest(patch)
        restored, missing = restore(patch, digest_map(POLICY, [v2["spec"]["template"]]))
        assert missing == [] and restored == real.actions[0].patch  # type: ignore[union-attr]


def test_a_pod_planned_from_a_redacted_template_is_the_real_pod_once_restored() -> None:
    real = _with_env(cloneset(replicas=1), SECRET)
    real["spec"]["template"]["metadata"]["annotations"] = {"example.com/api-token": SECRET}
    from_real = plan(plan_input(real, []))
    from_redacted = plan(plan_input(_redacted("CloneSet", real), []))
    [create_real] = from_real.actions
    [create_redacted] = from_redacted.actions
    assert isinstance(create_redacted, model.CreatePod) and isinstance(create_real, model.CreatePod)
    assert SECRET not in str(create_redacted.object)
    restored, missing = restore(create_redacted.object, digest_map(POLICY, [real["spec"]["template"]]))
    assert missing == [] and restored == create_real.object
