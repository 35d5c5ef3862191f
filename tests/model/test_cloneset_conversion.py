"""CloneSet apps.kruise.io/v1beta1 <-> v1alpha1 as OpenKruise master converts it
(apis/apps/v1alpha1/cloneset_conversion.go), and the planner accepting v1beta1 and OnDelete."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from services.kinds.cloneset.rules import model
from services.kinds.cloneset.rules.plan import encode_plan, plan, plan_json
from services.model.cloneset_conversion import (
    ConversionError,
    as_v1alpha1,
    to_v1alpha1,
    to_v1beta1,
)
from tests.planner.builders import IDS, cloneset, plan_input, revision_record, running_pod, with_image

PARALLELISM = "imagePreDownloadParallelism"
TEMPLATE = {
    "metadata": {"labels": {"app": "sample"}},
    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]},
}


def v1alpha1_example() -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {
            "name": "sample",
            "labels": {"apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"},
            "annotations": {
                "apps.kruise.io/image-predownload-parallelism": "5",
                "apps.kruise.io/image-predownload-min-updated-ready-pods": "2",
            },
        },
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "sample"}},
            "template": copy.deepcopy(TEMPLATE),
            "lifecycle": {"preDelete": {"labelsHandler": {"example.io/hook": "true"}}},
            "scaleStrategy": {"maxUnavailable": 1},
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "partition": 2,
                "maxUnavailable": "20%",
                "maxSurge": 0,
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10},
            },
            "progressDeadlineSeconds": 600,
        },
    }


def v1beta1_example() -> dict[str, Any]:
    obj = v1alpha1_example()
    obj["apiVersion"] = "apps.kruise.io/v1beta1"
    obj["spec"]["scaleStrategy"] = {
        "maxUnavailable": 1,
        "enablePVCReuse": True,
        "excludePreparingDelete": True,
    }
    obj["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible",
            "partition": 2,
            "maxUnavailable": "20%",
            "maxSurge": 0,
            "inPlaceUpdateStrategy": {
                "gracePeriodSeconds": 10,
                "imagePreDownloadParallelism": 5,
                "imagePreDownloadMinUpdatedReadyPods": 2,
            },
        },
    }
    return obj


def test_v1alpha1_to_v1beta1_as_openkruise() -> None:
    source = v1alpha1_example()
    assert to_v1beta1(source) == v1beta1_example()
    assert source == v1alpha1_example()  # the input is not modified


def test_v1beta1_to_v1alpha1_as_openkruise() -> None:
    # excludePreparingDelete is not converted back: only the label (still on the object) survives.
    assert to_v1alpha1(v1beta1_example()) == v1alpha1_example()


def test_v1beta1_without_enable_pvc_reuse_means_reuse_off() -> None:
    obj = v1beta1_example()
    del obj["spec"]["scaleStrategy"]["enablePVCReuse"]
    assert to_v1alpha1(obj)["spec"]["scaleStrategy"]["disablePVCReuse"] is True


@pytest.mark.parametrize(
    ("rolling", "expected_type"),
    [
        (None, "ReCreate"),
        ({"podUpdatePolicy": ""}, "ReCreate"),
        ({"podUpdatePolicy": "InPlaceOnly"}, "InPlaceOnly"),
    ],
)
def test_update_type_from_pod_update_policy(rolling: dict[str, Any] | None, expected_type: str) -> None:
    obj = v1beta1_example()
    obj["spec"]["updateStrategy"] = {"type": "RollingUpdate"}
    if rolling is not None:
        obj["spec"]["updateStrategy"]["rollingUpdate"] = rolling
    assert to_v1alpha1(obj)["spec"]["updateStrategy"]["type"] == expected_type


def test_on_delete_keeps_its_rolling_fields_and_empty_in_place_strategy_disappears() -> None:
    # OpenKruise drops them; rollbook keeps them so a v1alpha1 write of a v1beta1-stored object (each goes
    # through both conversions) never erases the partition set for a later RollingUpdate.
    source = v1alpha1_example()
    source["spec"]["updateStrategy"]["type"] = "OnDelete"
    on_delete = to_v1beta1(source)["spec"]["updateStrategy"]
    assert on_delete["type"] == "OnDelete" and "podUpdatePolicy" not in on_delete["rollingUpdate"]
    assert on_delete["rollingUpdate"]["partition"] == source["spec"]["updateStrategy"]["partition"]
    bare = v1alpha1_example()
    bare["spec"]["updateStrategy"] = {"type": "OnDelete"}
    bare["metadata"].pop("annotations", None)
    assert to_v1beta1(bare)["spec"]["updateStrategy"] == {"type": "OnDelete"}
    empty = v1beta1_example()
    empty["spec"]["updateStrategy"]["rollingUpdate"]["inPlaceUpdateStrategy"] = {}
    assert "inPlaceUpdateStrategy" not in to_v1alpha1(empty)["spec"]["updateStrategy"]


def _on_delete_v1beta1() -> dict[str, Any]:
    obj = v1beta1_example()
    obj["metadata"]["labels"].pop("apps.kruise.io/cloneset-scaling-exclude-preparing-delete", None)
    obj["metadata"].pop("annotations", None)  # no image pre-download settings
    obj["spec"]["updateStrategy"] = {
        "type": "OnDelete",
        "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "partition": 3, "maxUnavailable": 1},
    }
    return obj


@pytest.mark.parametrize(
    "make",
    [v1beta1_example, _on_delete_v1beta1],
    ids=["rolling-update", "on-delete-with-rolling-fields"],
)
def test_a_v1beta1_cloneset_survives_a_round_trip_through_v1alpha1(make: Any) -> None:
    # What the API server does to a v1beta1-stored object on every v1alpha1 write (rollbook's status
    # patch included): convert to v1alpha1, apply, convert back. The user's spec must come back whole.
    original = make()
    assert to_v1beta1(to_v1alpha1(original))["spec"] == original["spec"]


def test_exclude_preparing_delete_set_only_in_v1beta1_reaches_the_v1alpha1_reader() -> None:
    obj = v1beta1_example()
    obj["metadata"]["labels"].pop("apps.kruise.io/cloneset-scaling-exclude-preparing-delete", None)
    labels = to_v1alpha1(obj)["metadata"]["labels"]
    assert labels["apps.kruise.io/cloneset-scaling-exclude-preparing-delete"] == "true"
    obj["spec"]["scaleStrategy"]["excludePreparingDelete"] = False
    obj["metadata"]["labels"]["apps.kruise.io/cloneset-scaling-exclude-preparing-delete"] = "true"
    assert "apps.kruise.io/cloneset-scaling-exclude-preparing-delete" not in (
        to_v1alpha1(obj)["metadata"].get("labels") or {}
    )


def test_unparsable_predownload_annotation_is_dropped_parallelism_kept_as_string() -> None:
    source = v1alpha1_example()
    source["metadata"]["annotations"]["apps.kruise.io/image-predownload-min-updated-ready-pods"] = "50%"
    source["metadata"]["annotations"]["apps.kruise.io/image-predownload-parallelism"] = "50%"
    in_place = to_v1beta1(source)["spec"]["updateStrategy"]["rollingUpdate"]["inPlaceUpdateStrategy"]
    assert in_place == {"gracePeriodSeconds": 10, "imagePreDownloadParallelism": "50%"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": "Rolling"}, "spec.updateStrategy.type"),
        ({"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "Blue"}},
         "spec.updateStrategy.rollingUpdate.podUpdatePolicy"),
        ({"type": "RollingUpdate", "rollingUpdate": {"inPlaceUpdateStrategy": {PARALLELISM: "50%"}}},
         f"spec.updateStrategy.rollingUpdate.inPlaceUpdateStrategy.{PARALLELISM}"),
    ],
)  # fmt: skip
def test_v1beta1_admission_refusals_name_the_field(change: dict[str, Any], field: str) -> None:
    obj = v1beta1_example()
    obj["spec"]["updateStrategy"] = change
    with pytest.raises(ConversionError) as error:
        as_v1alpha1(obj)
    assert error.value.field == field
    out = json.loads(plan_json(json.dumps({"cloneSet": obj, "now": "2026-11-30T12:00:00Z"}).encode()))
    assert out["rejected"]["field"] == field


def test_planner_plans_a_v1beta1_cloneset_as_its_v1alpha1_form() -> None:
    v1 = cloneset(strategy={"type": "InPlaceIfPossible", "maxUnavailable": 2})
    pods = [running_pod(v1, i) for i in IDS[:5]]
    v2 = with_image(v1, "nginx:mainline")
    revs = [revision_record(v1, 1)]
    alpha = plan(plan_input(v2, pods, revs))
    beta = plan(plan_input(to_v1beta1(v2), pods, revs))
    assert beta.rejected is None and len(beta.actions) == 2  # two pods, one updateInPlace each
    assert encode_plan(beta) == encode_plan(alpha)


def test_on_delete_updates_no_pod_and_a_deleted_pod_comes_back_at_the_update_revision() -> None:
    v1 = cloneset(replicas=3, strategy={"type": "OnDelete"})
    pods = [running_pod(v1, i) for i in IDS[:3]]
    v2 = with_image(v1, "nginx:mainline")
    revs = [revision_record(v1, 1)]
    nothing = plan(plan_input(v2, pods, revs))
    assert nothing.rejected is None and nothing.actions == []
    assert nothing.status is not None and nothing.status["expectedUpdatedReplicas"] == 3
    # maxUnavailable without a rollingUpdate block: 20% of 3 rounded down = 0 (OpenKruise).
    assert nothing.max_unavailable == 0
    replaced = plan(plan_input(v2, pods[1:], revs + nothing.revisions))
    creates = [a for a in replaced.actions if isinstance(a, model.CreatePod)]
    assert [c.revision for c in creates] == [nothing.update_revision]
