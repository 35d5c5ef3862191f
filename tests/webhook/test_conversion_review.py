"""``/convert``: a ConversionReview v1 answered with every CloneSet at the desired version, by the rules of
services/model/cloneset_conversion.py; what cannot be converted is a Failure with its reason, never a
partial answer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.webhook.conversion import ConversionReviewError, request_of, review_conversion

ALPHA: dict[str, Any] = {
    "apiVersion": "apps.kruise.io/v1alpha1",
    "kind": "CloneSet",
    "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "uid": "u-1"},
    "spec": {
        "replicas": 3,
        "updateStrategy": {
            "type": "InPlaceOnly",
            "partition": 1,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5},
        },
        "scaleStrategy": {"disablePVCReuse": True},
    },
}


def review(objects: list[Any], desired: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "r-1", "desiredAPIVersion": desired, "objects": objects},
    }


def test_v1alpha1_to_v1beta1_and_back_answers_every_object_in_order() -> None:
    other = copy.deepcopy(ALPHA)
    other["metadata"]["name"] = "api"
    answer = review_conversion(request_of(review([ALPHA, other], "apps.kruise.io/v1beta1")))
    assert answer["uid"] == "r-1" and answer["result"] == {"status": "Success"}
    beta = answer["convertedObjects"]
    assert [o["metadata"]["name"] for o in beta] == ["web", "api"]
    assert beta[0]["apiVersion"] == "apps.kruise.io/v1beta1"
    assert beta[0]["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {
            "podUpdatePolicy": "InPlaceOnly",
            "partition": 1,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5},
        },
    }
    assert beta[0]["spec"]["scaleStrategy"] == {}  # disablePVCReuse true = enablePVCReuse false, the default
    assert beta[0]["metadata"] == ALPHA["metadata"]

    back = review_conversion(request_of(review(beta, "apps.kruise.io/v1alpha1")))
    assert back["convertedObjects"][0] == ALPHA


def test_an_object_already_at_the_desired_version_is_returned_as_it_is() -> None:
    answer = review_conversion(request_of(review([ALPHA], "apps.kruise.io/v1alpha1")))
    assert answer["convertedObjects"] == [ALPHA]


@pytest.mark.parametrize(
    ("objects", "desired", "reason"),
    [
        ([ALPHA], "apps.kruise.io/v2", "cannot convert to 'apps.kruise.io/v2'"),
        ([dict(ALPHA, kind="SidecarSet")], "apps.kruise.io/v1beta1", "only CloneSets"),
        ([dict(ALPHA, apiVersion="apps/v1")], "apps.kruise.io/v1beta1", "from apiVersion 'apps/v1'"),
        ([ALPHA, "not an object"], "apps.kruise.io/v1beta1", "must be a JSON object"),
    ],
)
def test_what_cannot_be_converted_fails_whole_with_the_reason(
    objects: list[Any], desired: str, reason: str
) -> None:
    answer = review_conversion(request_of(review(objects, desired)))
    assert answer["convertedObjects"] == []
    assert answer["result"]["status"] == "Failure" and reason in answer["result"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x"}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"objects": []}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": "x"}},
    ],
)
def test_a_body_that_is_not_a_conversion_review_is_refused(body: Any) -> None:
    with pytest.raises(ConversionReviewError):
        request_of(body)
