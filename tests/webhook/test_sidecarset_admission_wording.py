"""The SidecarSet validating webhook refuses with OpenKruise's wording: its status code (500, as its
handler answers a failed validation), and per problem the field path, error type and detail its
``field.Error`` carries (the cases of OpenKruise's sidecarset_validating_test.go, which compare type, field
and detail; where Go prints a struct as the value, only the field, type and detail are compared)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.model import sidecarset as ss
from services.webhook import admission
from tests.webhook.test_injection_rules import container, make_sidecarset

pytestmark = pytest.mark.pure


def request(
    obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"uid": "u1", "operation": operation, "object": obj, "oldObject": old}


def refusal(obj: dict[str, Any], existing: tuple[dict[str, Any], ...] = (), **kwargs: Any) -> str:
    response = admission.review_sidecarset(request(obj, **kwargs), [ss.parse_sidecarset(o) for o in existing])
    assert response["allowed"] is False, response
    assert set(response["status"]) == {"code", "message"} and response["status"]["code"] == 500
    message: str = response["status"]["message"]
    return message


def valid(**spec: Any) -> dict[str, Any]:
    return make_sidecarset("test-sidecarset", containers=[container("test-sidecar")], **spec)


def with_spec(change: dict[str, Any]) -> dict[str, Any]:
    obj = valid()
    obj["spec"].update(change)
    return obj


EXACT = {
    "missing-selector": (
        {"selector": None},
        "spec.selector: Required value: no selector defined for SidecarSet",
    ),
    "empty-selector": (
        {"selector": {}},
        "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil),"
        " MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is not valid for sidecarset.",
    ),
    "missing-container": (
        {"containers": []},
        "spec: Required value: no initContainer or container defined for SidecarSet",
    ),
    "container without an image": (
        {"containers": [{"name": "test-sidecar"}]},
        "spec.containers[0].image: Required value",
    ),
    "duplicate container": (
        {"containers": [container("a"), container("a")]},
        'spec.containers[1].name: Duplicate value: "a"',
    ),
    "unsupported podInjectPolicy": (
        {"containers": [container("a", podInjectPolicy="Sometimes")]},
        'spec.container.podInjectPolicy: Invalid value: "Sometimes": unsupported pod inject policy',
    ),
    "unsupported shareVolumePolicy": (
        {"containers": [container("a", shareVolumePolicy={"type": "sometimes"})]},
        'spec.container.shareVolumePolicy: Invalid value: v1beta1.ShareVolumePolicy{Type:"sometimes"}:'
        " unsupported share volume policy",
    ),
    "negative partition": (
        {"updateStrategy": {"type": "RollingUpdate", "partition": -1}},
        "spec.updateStrategy.partition: Invalid value: -1: must be greater than or equal to 0",
    ),
    "maxUnavailable that is no percent": (
        {"updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "abc%"}},
        "spec.updateStrategy.maxUnavailable: Invalid value:"
        ' intstr.IntOrString{Type:1, IntVal:0, StrVal:"abc%"}:'
        " a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%',"
        " regex used for validation is '[0-9]+%')",
    ),
}


@pytest.mark.parametrize("case", sorted(EXACT))
def test_each_rule_is_refused_in_openkruises_words(case: str) -> None:
    change, message = EXACT[case]
    assert refusal(with_spec(change)) == message


POLICY = {"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "cpu*50%"}}}

# (spec change, OpenKruise's field, error type, detail) where Go prints a struct as the value.
STRUCTS = {
    "resources-policy-and-resources-conflict": (
        {"containers": [container("a", resources={"limits": {"cpu": "100m"}}, resourcesPolicy=POLICY)]},
        "spec[0].resourcesPolicy",  # OpenKruise indexes the root path
        "Invalid value",
        "resourcesPolicy and resources cannot be configured together",
    ),
    "initContainer-with-resources-policy-forbidden": (
        {
            "updateStrategy": {"type": "NotUpdate"},
            "initContainers": [container("init", resourcesPolicy=POLICY)],
        },
        "spec[0].resourcesPolicy",
        "Invalid value",
        "resourcesPolicy is only supported for containers with RestartPolicy Always",
    ),
    "unknown revision policy": (
        {"injectionStrategy": {"revision": {"revisionName": "r1", "policy": "Never"}}},
        "revision.policy",
        "Invalid value",
        "Invalid policy Never, supported: [Always, Partial]",
    ),
    "partition with selector": (
        {
            "updateStrategy": {
                "type": "RollingUpdate",
                "partition": 1,
                "selector": {"matchLabels": {"a": "b"}},
            }
        },
        "updateStrategy",
        "Invalid value",
        "Partition and Selector cannot be used together",
    ),
}


@pytest.mark.parametrize("case", sorted(STRUCTS))
def test_rules_with_a_struct_value_have_openkruises_field_type_and_detail(case: str) -> None:
    change, field, kind, detail = STRUCTS[case]
    message = refusal(with_spec(change))
    assert message.startswith(f"{field}: {kind}: ") and message.endswith(f": {detail}"), message


def test_native_sidecars_under_rolling_update_are_accepted() -> None:
    """OpenKruise refuses this case ("The initContainer in-place upgrade is not currently supported.");
    rollbook upgrades native sidecars in place, so a RollingUpdate SidecarSet may carry them."""
    native = with_spec(
        {
            "containers": [],
            "initContainers": [container("init", restartPolicy="Always")],
            "updateStrategy": {"type": "RollingUpdate", "partition": 1, "maxUnavailable": "50%"},
        }
    )
    assert admission.review_sidecarset(request(native), [])["allowed"] is True


def test_the_name_rules() -> None:
    bad = valid()
    bad["metadata"]["name"] = "no_underscores"
    assert refusal(bad) == (
        'metadata.name: Invalid value: "no_underscores": sidecarset name must consist of alphanumeric'
        " characters or '-' (e.g. 'example-com', regex used for validation is '^[a-zA-Z0-9\\-]+$')"
    )
    bad["metadata"]["name"] = "a" * 64
    assert refusal(bad) == f'metadata.name: Invalid value: "{"a" * 64}": must be no more than 63 characters'


def test_update_rules() -> None:
    old = valid()
    renamed = copy.deepcopy(old)
    renamed["spec"]["containers"][0]["name"] = "other"
    assert refusal(renamed, operation="UPDATE", old=old) == (
        'spec.containers.name: Invalid value: "other": container other is not found'
    )
    hot = copy.deepcopy(old)
    hot["spec"]["containers"][0]["upgradeStrategy"] = {"upgradeType": "HotUpgrade"}
    assert refusal(hot, operation="UPDATE", old=old) == (
        'spec.containers.upgradeStrategy.upgradeType: Invalid value: "test-sidecar":'
        " container test-sidecar upgradeType is immutable"
    )


def test_conflicts_with_other_sidecarsets() -> None:
    """TestSidecarSetNameConflict / TestSidecarSetVolumeConflict: one error per clash, aggregated as
    Kubernetes prints an ErrorList."""
    other = make_sidecarset(
        "other",
        containers=[container("test-sidecar")],
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    clash = valid(volumes=[{"name": "v", "hostPath": {"path": "/x"}}])
    assert refusal(clash, (other,)) == (
        '[spec.containers: Invalid value: "test-sidecar": container test-sidecar already exist in other,'
        ' spec.volumes: Invalid value: "v": volume v is in conflict with sidecarset other]'
    )
    same_volume = make_sidecarset(
        "mine", containers=[container("x")], volumes=[{"name": "v", "emptyDir": {}}]
    )
    assert admission.review_sidecarset(request(same_volume), [ss.parse_sidecarset(other)])["allowed"]
