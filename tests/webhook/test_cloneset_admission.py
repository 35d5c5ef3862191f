"""The CloneSet validating webhook (services/webhook/admission.py ``review_cloneset``) refuses what the
planner would reject, with OpenKruise's status code, field path and message.

The cases are OpenKruise's own table (pkg/webhook/cloneset/validating/validation_test.go ``TestValidate``,
which asserts only admitted / refused); the messages are what its ``field.Error`` prints for them. Three of
its error cases are left out on purpose: an empty ``updateStrategy.type`` (its defaulting webhook sets
ReCreate before validation, as rollbook reads an absent type), a ``podsToDelete`` naming a pod that does not
exist (OpenKruise reads the cluster; the planner ignores such a name) and the in-place-only template check
of an update (the planner judges the pods, not the two templates)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.model.cloneset_conversion import to_v1beta1
from services.model.cloneset_validation import validate
from services.webhook.admission import review_cloneset

VALID_LABELS = {"a": "b"}


def cloneset(*, strategy: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": VALID_LABELS},
        "template": {
            "metadata": {"labels": VALID_LABELS},
            "spec": {
                "restartPolicy": "Always",
                "dnsPolicy": "ClusterFirst",
                "containers": [{"name": "abc", "image": "image", "imagePullPolicy": "IfNotPresent"}],
            },
        },
        "updateStrategy": {
            "type": "InPlaceIfPossible",
            "partition": 2,
            "maxUnavailable": 1,
            **(strategy or {}),
        },
    }
    body.update(spec)
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "cs", "namespace": "default", "uid": "u1"},
        "spec": body,
    }


def review(
    obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None
) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "req-1", "operation": operation, "object": obj}
    if old is not None:
        request["oldObject"] = old
    return review_cloneset(request)


SUCCESS = {
    "podsToDelete": cloneset(scaleStrategy={"podsToDelete": ["p0"]}),
    "maxSurge": cloneset(strategy={"maxSurge": 1}),
    "maxUnavailable 0 with maxSurge 1": cloneset(strategy={"maxUnavailable": 0, "maxSurge": 1}),
    "maxUnavailable 120%": cloneset(strategy={"maxUnavailable": "120%"}),
    "priorityStrategy": cloneset(
        strategy={
            "maxUnavailable": "120%",
            "priorityStrategy": {
                "weightPriority": [{"weight": 20, "matchSelector": {"matchLabels": {"key": "foo"}}}]
            },
        }
    ),
}

INT0 = 'intstr.IntOrString{Type:0, IntVal:0, StrVal:""}'
ERRORS: dict[str, tuple[dict[str, Any], str, str]] = {
    "invalid-replicas": (
        cloneset(replicas=-1),
        "spec.replicas",
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
    ),
    "invalid-template": (
        cloneset(
            template={"metadata": {"labels": {"NoUppercaseOrSpecialCharsLike=Equals": "b"}}, "spec": {}}
        ),
        "spec.template.metadata.labels",
        "spec.template.metadata.labels: Invalid value:"
        ' map[string]string{"NoUppercaseOrSpecialCharsLike=Equals":"b"}:'
        " `selector` does not match template `labels`",
    ),
    "invalid-selector": (
        cloneset(selector={"matchLabels": {"a": "b", "c": "d"}}),
        "spec.template.metadata.labels",
        'spec.template.metadata.labels: Invalid value: map[string]string{"a":"b"}:'
        " `selector` does not match template `labels`",
    ),
    "invalid-partition": (
        cloneset(strategy={"partition": -1}),
        "spec.updateStrategy.partition",
        "spec.updateStrategy.partition: Invalid value: -1: must be greater than or equal to 0",
    ),
    "invalid-maxUnavailable": (
        cloneset(strategy={"maxUnavailable": 0}),
        "spec.updateStrategy.maxUnavailable",
        f"spec.updateStrategy.maxUnavailable: Invalid value: {INT0}:"
        " maxUnavailable and maxSurge should not both be less than 1",
    ),
    "invalid-maxSurge": (
        cloneset(strategy={"maxUnavailable": 0, "maxSurge": 0}),
        "spec.updateStrategy.maxUnavailable",
        f"spec.updateStrategy.maxUnavailable: Invalid value: {INT0}:"
        " maxUnavailable and maxSurge should not both be less than 1",
    ),
    "invalid-podsToDelete-1": (
        cloneset(scaleStrategy={"podsToDelete": ["p0", "p0"]}),
        "spec.scaleStrategy.podsToDelete",
        'spec.scaleStrategy.podsToDelete: Invalid value: []string{"p0", "p0"}: duplicated items [p0]',
    ),
    # the cases
    "partition abc%": (
        cloneset(strategy={"partition": "abc%"}),
        "spec.updateStrategy.partition",
        'spec.updateStrategy.partition: Invalid value: "abc%": failed GetScaledValueFromIntOrPercent for'
        ' partition: invalid value for IntOrString: invalid value "abc%": strconv.Atoi: parsing "abc":'
        " invalid syntax",
    ),
    "replicas ten": (
        cloneset(replicas="ten"),
        "spec.replicas",
        'spec.replicas: Invalid value: "ten": must be an integer',
    ),
    "maxSurge with InPlaceOnly": (
        cloneset(strategy={"type": "InPlaceOnly", "maxSurge": 1}),
        "spec.updateStrategy.maxSurge",
        'spec.updateStrategy.maxSurge: Invalid value: "1":'
        " can not use maxSurge with strategy type InPlaceOnly",
    ),
}


@pytest.mark.parametrize("name", sorted(SUCCESS))
def test_openkruise_success_cases_are_admitted(name: str) -> None:
    obj = SUCCESS[name]
    assert review(obj) == {"uid": "req-1", "allowed": True}
    assert review(obj, "UPDATE", old=cloneset()) == {"uid": "req-1", "allowed": True}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_openkruise_error_cases_are_refused_with_its_code_field_and_message(name: str) -> None:
    obj, field, message = ERRORS[name]
    for operation in ("CREATE", "UPDATE"):
        response = review(obj, operation, old=cloneset() if operation == "UPDATE" else None)
        assert response["allowed"] is False
        status = response["status"]
        assert (status["code"], status["reason"], status["message"]) == (422, "Invalid", message)
        assert status["details"]["causes"] == [
            {"reason": "FieldValueInvalid", "message": message, "field": field}
        ]
    # the planner rejects exactly this (the same function), so an object stored while the webhook was
    # down is still rejected by the planner, with the same field
    problem = validate(obj)
    assert problem is not None and problem.field == field


def test_a_v1beta1_cloneset_is_judged_as_the_planner_reads_it() -> None:
    bad = to_v1beta1(copy.deepcopy(ERRORS["invalid-maxSurge"][0]))
    assert bad["apiVersion"] == "apps.kruise.io/v1beta1"
    response = review(bad)
    assert response["allowed"] is False and response["status"]["message"] == ERRORS["invalid-maxSurge"][2]
    assert review(to_v1beta1(copy.deepcopy(SUCCESS["maxSurge"]))) == {"uid": "req-1", "allowed": True}


def test_deletes_and_unmanaged_clonesets_pass() -> None:
    bad = ERRORS["partition abc%"][0]
    assert review(bad, "DELETE")["allowed"] is True
    opted_out = copy.deepcopy(bad)
    opted_out["metadata"]["labels"] = {"rollbook.io/manage": "false"}
    assert review(opted_out)["allowed"] is True  # its controller judges it
