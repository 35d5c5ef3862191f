"""The CloneSet and SidecarSet CRDs (deploy/base/crds, written by scripts/crds.py): structural, with the
subresources, versions and printer columns OpenKruise's have, and accepting exactly the objects they
should (the seed's YAML in, malformed fields out)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scripts import crds
from tests.deploy.structural import field_type, structural_errors

SEED = Path(__file__).parents[1] / "fixtures" / "seed"
FILES = {"CloneSet": crds.CRD_DIR / "clonesets.yaml", "SidecarSet": crds.CRD_DIR / "sidecarsets.yaml"}


@functools.cache
def _loaded(kind: str) -> str:
    return json.dumps(
        yaml.load(FILES[kind].read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    )


def crd(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(_loaded(kind))  # a fresh copy each time: tests may change it
    return loaded


def version(kind: str, name: str) -> dict[str, Any]:
    [found] = [v for v in crd(kind)["spec"]["versions"] if v["name"] == name]
    return found


def schema(kind: str, name: str = "v1alpha1") -> dict[str, Any]:
    found: dict[str, Any] = version(kind, name)["schema"]["openAPIV3Schema"]
    return found


def seed(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SEED / name).read_text())
    return loaded


def test_the_files_are_what_scripts_crds_writes() -> None:
    assert crds.main(["--check"]) == 0, "run: python scripts/crds.py"


@pytest.mark.parametrize("kind", sorted(FILES))
@pytest.mark.parametrize("name", ["v1alpha1", "v1beta1"])
def test_every_version_is_structural(kind: str, name: str) -> None:
    assert structural_errors(schema(kind, name)) == []


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # CloneSet as on OpenKruise master: both served, v1beta1 stored, converted by rollbook's webhook.
        ("CloneSet", {"v1alpha1": (True, False), "v1beta1": (True, True)}),
        # SidecarSet has no conversion yet: v1beta1 is written down, not served.
        ("SidecarSet", {"v1alpha1": (True, True), "v1beta1": (False, False)}),
    ],
)
def test_served_and_stored_versions(kind: str, expected: dict[str, tuple[bool, bool]]) -> None:
    versions = {v["name"]: (v["served"], v["storage"]) for v in crd(kind)["spec"]["versions"]}
    assert versions == expected
    assert crd(kind)["spec"]["group"] == "apps.kruise.io"
    assert crd(kind)["metadata"]["name"] == f"{crd(kind)['spec']['names']['plural']}.apps.kruise.io"


def test_cloneset_versions_are_converted_by_rollbooks_webhook_service() -> None:
    """The conversion webhook is the Service and certificate of deploy/base/webhook.yaml, at /convert."""
    conversion = crd("CloneSet")["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["conversionReviewVersions"] == ["v1"]
    service = conversion["webhook"]["clientConfig"]["service"]
    assert service == {
        "namespace": "rollbook-system",
        "name": "rollbook-webhook",
        "path": "/convert",
        "port": 443,
    }
    webhook = list(yaml.safe_load_all((crds.ROOT / "deploy" / "base" / "webhook.yaml").read_text()))
    [svc] = [m for m in webhook if m["kind"] == "Service"]
    assert (svc["metadata"]["namespace"], svc["metadata"]["name"]) == (service["namespace"], service["name"])
    assert service["port"] in [p["port"] for p in svc["spec"]["ports"]]
    [cert] = [m for m in webhook if m["kind"] == "Certificate"]
    injected = crd("CloneSet")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert injected == f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"


@pytest.mark.parametrize("name", ["v1alpha1", "v1beta1"])
def test_cloneset_scale_subresource_points_at_fields_of_the_right_type(name: str) -> None:
    served = version("CloneSet", name)
    scale = served["subresources"]["scale"]
    assert "status" in served["subresources"]
    assert field_type(schema("CloneSet", name), scale["specReplicasPath"]) == "integer"
    assert field_type(schema("CloneSet", name), scale["statusReplicasPath"]) == "integer"
    assert field_type(schema("CloneSet", name), scale["labelSelectorPath"]) == "string"


def test_printer_columns_are_openkruises() -> None:
    columns = [
        (c["name"], c["jsonPath"], c.get("priority", 0))
        for c in version("CloneSet", "v1alpha1")["additionalPrinterColumns"]
    ]
    assert columns == [
        ("DESIRED", ".spec.replicas", 0),
        ("UPDATED", ".status.updatedReplicas", 0),
        ("UPDATED_READY", ".status.updatedReadyReplicas", 0),
        ("UPDATED_AVAILABLE", ".status.updatedAvailableReplicas", 0),
        ("READY", ".status.readyReplicas", 0),
        ("TOTAL", ".status.replicas", 0),
        ("AGE", ".metadata.creationTimestamp", 0),
        ("CONTAINERS", ".spec.template.spec.containers[*].name", 1),
        ("IMAGES", ".spec.template.spec.containers[*].image", 1),
        ("SELECTOR", ".status.labelSelector", 1),
    ]
    sidecar = [c["name"] for c in version("SidecarSet", "v1alpha1")["additionalPrinterColumns"]]
    assert sidecar == ["MATCHED", "UPDATED", "READY", "AGE"]
    # Every column names a field the schema specifies (or metadata, which every object has).
    for kind in FILES:
        for column in version(kind, "v1alpha1")["additionalPrinterColumns"]:
            path = column["jsonPath"]
            if not path.startswith(".metadata") and "[*]" not in path:
                assert field_type(schema(kind), path) == column["type"], (kind, path)


def assert_accepted(kind: str, obj: dict[str, Any]) -> None:
    jsonschema.validate(obj, schema(kind))


def assert_refused(kind: str, obj: dict[str, Any], where: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate(obj, schema(kind))
    assert where in ".".join(str(p) for p in refused.value.absolute_path), refused.value


def test_the_seeds_yaml_is_accepted_unchanged() -> None:
    for name in ("cloneset-sample.yaml", "cloneset-sample-data.yaml"):
        assert_accepted("CloneSet", seed(name))
    assert_accepted("SidecarSet", seed("sidecarset-test-sidecarset.yaml"))


def test_a_full_cloneset_status_as_rollbook_writes_it_is_accepted() -> None:
    cloneset = seed("cloneset-sample.yaml")
    cloneset["spec"]["updateStrategy"] = {
        "type": "InPlaceIfPossible",
        "partition": "20%",
        "maxUnavailable": 2,
        "maxSurge": "10%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 2},
    }
    cloneset["spec"]["scaleStrategy"] = {"podsToDelete": ["sample-abcde"], "maxUnavailable": 1}
    cloneset["status"] = {
        "observedGeneration": 3,
        "replicas": 5,
        "readyReplicas": 5,
        "availableReplicas": 5,
        "updatedReplicas": 2,
        "updatedReadyReplicas": 2,
        "updatedAvailableReplicas": 2,
        "expectedUpdatedReplicas": 3,
        "updateRevision": "sample-7d9f8b6c5d",
        "currentRevision": "sample-5c6b7d8e9f",
        "labelSelector": "app=sample",
        "conditions": [{"type": "FailedScale", "status": "False", "reason": "Scaled"}],
    }
    assert_accepted("CloneSet", cloneset)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda c: c["spec"].update(replicas="five"), "spec.replicas"),
        (lambda c: c["spec"].pop("selector"), ""),
        (lambda c: c["spec"].update(updateStrategy={"partition": 1.5}), "spec.updateStrategy.partition"),
        (lambda c: c["spec"].update(updateStrategy={"paused": "yes"}), "spec.updateStrategy.paused"),
        (
            lambda c: c["spec"].update(scaleStrategy={"podsToDelete": "web-1"}),
            "spec.scaleStrategy.podsToDelete",
        ),
        (lambda c: c.update(status={"replicas": 1}), "status"),  # required counters missing
    ],
)
def test_malformed_clonesets_are_refused(change: Any, where: str) -> None:
    cloneset = copy.deepcopy(seed("cloneset-sample.yaml"))
    change(cloneset)
    assert_refused("CloneSet", cloneset, where)


def test_malformed_sidecarsets_are_refused() -> None:
    sidecarset = seed("sidecarset-test-sidecarset.yaml")
    sidecarset["spec"]["containers"][0]["upgradeStrategy"] = {"upgradeType": 1}
    assert_refused("SidecarSet", sidecarset, "spec.containers.0.upgradeStrategy.upgradeType")
    wrong_policy = seed("sidecarset-test-sidecarset.yaml")
    wrong_policy["spec"]["injectionStrategy"] = {"revision": {"policy": "Sometimes"}}
    assert_refused("SidecarSet", wrong_policy, "spec.injectionStrategy.revision.policy")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"type": "object", "properties": {"a": {"description": "untyped"}}}, ".a: type is missing"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, ".a: an array needs items"),
        (
            {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}},
            ".a: type inside anyOf",
        ),
        (
            {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {}}}}},
            "only name and generateName",
        ),
        ({"type": "string"}, "<root>: type must be object"),
    ],
)
def test_the_structural_check_finds_what_the_api_server_refuses(bad: dict[str, Any], error: str) -> None:
    assert any(error in e for e in structural_errors(bad)), structural_errors(bad)
