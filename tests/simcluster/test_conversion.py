"""CRD version conversion as a real API server does it: rollbook's CloneSet CRD (deploy/base/crds) serves
v1alpha1 and v1beta1 and stores v1beta1, so a v1alpha1 read, write or watch goes through rollbook's
conversion webhook (services/webhook/conversion.py) with a ConversionReview over HTTPS. OpenKruise's
v1beta1 examples apply unchanged with kubectl and read back at v1alpha1 as OpenKruise converts them."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster, SimConfig
from services.webhook.server import RunningServer

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import Kubectl
from .rollbook_webhook import rollbook_webhook

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "base" / "crds" / "clonesets.yaml"
EXAMPLES = ROOT / "tests" / "fixtures" / "openkruise-v1beta1"
SEED = ROOT / "tests" / "fixtures" / "seed"
GROUP, PLURAL = "apps.kruise.io", "clonesets"


@dataclass
class Installed:
    sim: SimCluster
    webhook: RunningServer
    custom: client.CustomObjectsApi

    async def get(self, version: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, version, "default", PLURAL, name
        )
        return found


@pytest_asyncio.fixture(loop_scope="session")
async def installed(make_simcluster: MakeSimCluster, tmp_path: Path) -> AsyncIterator[Installed]:
    """A cluster without native CloneSets, rollbook's CloneSet CRD applied, the webhook running."""
    sim = await make_simcluster(SimConfig(disabled_resources=("clonesets",)))
    async with rollbook_webhook(sim, tmp_path / "tls") as webhook, await api_client_for(sim) as api:
        crd = yaml.safe_load(CRD.read_text())
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        yield Installed(sim, webhook, client.CustomObjectsApi(api))


@pytest.fixture
def kubectl_for(installed: Installed, kubectl_binary: Path, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_binary, installed.sim, tmp_path / "kubectl-cache")


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


async def test_openkruises_v1beta1_examples_apply_unchanged_and_read_back_at_v1alpha1(
    installed: Installed, kubectl_for: Kubectl
) -> None:
    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    for name in names:
        assert "created" in await kubectl_for("apply", "-f", str(EXAMPLES / name)), name
    # Applying again changes nothing: what was stored reads back as it was written.
    for name in names:
        again = await kubectl_for("apply", "-f", str(EXAMPLES / name))
        assert "unchanged" in again, (name, again)

    stored = await installed.get("v1beta1", "sample-inplace")
    assert stored["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"] == "InPlaceIfPossible"

    inplace = await installed.get("v1alpha1", "sample-inplace")
    assert inplace["apiVersion"] == "apps.kruise.io/v1alpha1"
    assert inplace["spec"]["updateStrategy"] == {
        "type": "InPlaceIfPossible",
        "partition": 3,
        "maxUnavailable": "20%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10},
    }
    # enablePVCReuse false (the v1beta1 default) is reuse off: disablePVCReuse true in v1alpha1.
    assert inplace["spec"]["scaleStrategy"] == {"maxUnavailable": 1, "disablePVCReuse": True}
    assert inplace["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]

    basic = await installed.get("v1alpha1", "sample")
    assert basic["spec"]["updateStrategy"]["type"] == "ReCreate"
    assert basic["spec"]["scaleStrategy"] == {"disablePVCReuse": True}

    on_delete = await installed.get("v1alpha1", "sample-ondelete")
    assert on_delete["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert on_delete["spec"]["scaleStrategy"] == {}  # reuse on; excludePreparingDelete has no v1alpha1 field
    assert (await installed.get("v1beta1", "sample-ondelete"))["spec"]["scaleStrategy"] == {
        "excludePreparingDelete": True,
        "enablePVCReuse": True,
    }, "stored as v1beta1, nothing a v1beta1 client set is lost"

    predownload = await installed.get("v1alpha1", "sample-predownload")
    # The pre-download fields move to annotations; the strategy object stays, empty (no grace period).
    assert predownload["spec"]["updateStrategy"] == {"type": "InPlaceOnly", "inPlaceUpdateStrategy": {}}
    assert {k: v for k, v in predownload["metadata"]["annotations"].items() if "predownload" in k} == {
        "apps.kruise.io/image-predownload-parallelism": "5",
        "apps.kruise.io/image-predownload-timeout-seconds": "600",
        "apps.kruise.io/image-predownload-min-updated-ready-pods": "1",
    }

    # Discovery prefers v1beta1 (Kubernetes' version order), so kubectl reads the stored version unasked.
    preferred = json.loads(await kubectl_for("get", "clonesets", "-o", "json"))
    assert {i["apiVersion"] for i in preferred["items"]} == {"apps.kruise.io/v1beta1"}
    listed = json.loads(await kubectl_for("get", "clonesets.v1alpha1.apps.kruise.io", "-o", "json"))
    assert {i["apiVersion"] for i in listed["items"]} == {"apps.kruise.io/v1alpha1"}
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == sorted(
        example(n)["metadata"]["name"] for n in names
    )


async def test_a_v1alpha1_write_is_stored_once_and_reads_back_at_both_versions(installed: Installed) -> None:
    seed = yaml.safe_load((SEED / "cloneset-sample.yaml").read_text())
    seed["spec"]["updateStrategy"] = {"type": "InPlaceIfPossible", "partition": 2, "paused": True}
    seed["metadata"]["labels"] = {"apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"}
    created = await installed.custom.create_namespaced_custom_object(
        GROUP, "v1alpha1", "default", PLURAL, seed
    )
    assert created["apiVersion"] == "apps.kruise.io/v1alpha1"
    assert created["spec"]["updateStrategy"] == seed["spec"]["updateStrategy"]

    beta = await installed.get("v1beta1", "sample")
    assert beta["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "partition": 2, "paused": True},
    }
    assert beta["spec"]["scaleStrategy"] == {"enablePVCReuse": True, "excludePreparingDelete": True}
    assert beta["metadata"]["uid"] == created["metadata"]["uid"]

    # A merge patch at v1alpha1 lands in the stored v1beta1 object; an unchanged PUT is no write.
    patched = await installed.custom.patch_namespaced_custom_object(
        GROUP,
        "v1alpha1",
        "default",
        PLURAL,
        "sample",
        {"spec": {"updateStrategy": {"paused": False}}},
        _content_type="application/merge-patch+json",
    )
    assert patched["spec"]["updateStrategy"]["paused"] is False
    assert (await installed.get("v1beta1", "sample"))["spec"]["updateStrategy"]["rollingUpdate"][
        "paused"
    ] is False
    same = await installed.custom.replace_namespaced_custom_object(
        GROUP, "v1alpha1", "default", PLURAL, "sample", copy.deepcopy(patched)
    )
    assert same["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]

    # A write at v1alpha1 is checked by the v1alpha1 schema before it is converted.
    bad = dict(patched, spec=dict(patched["spec"], updateStrategy={"type": "InPlaceOnly", "paused": "no"}))
    with pytest.raises(ApiException) as refused:
        await installed.custom.replace_namespaced_custom_object(
            GROUP, "v1alpha1", "default", PLURAL, "sample", bad
        )
    assert refused.value.status == 422 and "spec.updateStrategy.paused" in str(refused.value.body)


async def test_a_v1alpha1_watch_sees_v1beta1_writes_converted(installed: Installed) -> None:
    events: list[dict[str, Any]] = []
    # The watch starts at this list's resourceVersion, so it sees both writes however late it connects
    # (from no resourceVersion, a watch opened after the patch would see one ADDED and wait on).
    listed = await installed.custom.list_namespaced_custom_object(GROUP, "v1alpha1", "default", PLURAL)
    since = listed["metadata"]["resourceVersion"]

    async def follow() -> None:
        stream = watch.Watch().stream(
            installed.custom.list_namespaced_custom_object,
            GROUP,
            "v1alpha1",
            "default",
            PLURAL,
            resource_version=since,
            timeout_seconds=20,
        )
        async for event in stream:
            events.append(event)
            if event["type"] == "MODIFIED":
                return

    watching = asyncio.create_task(follow())
    beta = example("sample-inplace.yaml")
    beta["metadata"]["namespace"] = "default"
    await installed.custom.create_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL, beta)
    await installed.custom.patch_namespaced_custom_object(
        GROUP,
        "v1beta1",
        "default",
        PLURAL,
        "sample-inplace",
        {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}},
        _content_type="application/merge-patch+json",
    )
    await asyncio.wait_for(watching, 20)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert {e["object"]["apiVersion"] for e in events} == {"apps.kruise.io/v1alpha1"}
    assert events[-1]["object"]["spec"]["updateStrategy"]["partition"] == 1
    assert events[-1]["object"]["spec"]["updateStrategy"]["type"] == "InPlaceIfPossible"


async def test_the_webhook_counts_its_conversions(installed: Installed) -> None:
    await installed.custom.create_namespaced_custom_object(
        GROUP, "v1alpha1", "default", PLURAL, yaml.safe_load((SEED / "cloneset-sample.yaml").read_text())
    )
    await installed.get("v1alpha1", "sample")
    async with aiohttp.ClientSession() as session:
        async with session.get(installed.webhook.base_url + "/metrics", ssl=False) as response:
            text = await response.text()
    counted = [line for line in text.splitlines() if line.startswith("rollbook_webhook_reviews_total{")]
    converted = [line for line in counted if 'endpoint="convert"' in line and 'outcome="converted"' in line]
    # At least the create (in, and back out) and the read: every call the API server made was answered.
    assert converted and float(converted[0].split()[-1]) >= 3, counted


async def test_with_the_webhook_down_v1alpha1_fails_and_the_storage_version_still_serves(
    installed: Installed,
) -> None:
    created = example("sample.yaml")
    await installed.custom.create_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL, created)
    await installed.webhook.stop()
    with pytest.raises(ApiException) as failed:
        await installed.get("v1alpha1", "sample")
    assert failed.value.status == 500
    assert "conversion webhook for apps.kruise.io/v1alpha1, Kind=CloneSet failed" in str(failed.value.body)
    with pytest.raises(ApiException) as refused:
        await installed.custom.create_namespaced_custom_object(
            GROUP,
            "v1alpha1",
            "default",
            PLURAL,
            yaml.safe_load((SEED / "cloneset-sample-data.yaml").read_text()),
        )
    assert refused.value.status == 500
    assert (await installed.get("v1beta1", "sample"))["spec"]["replicas"] == 5
    assert [
        i["metadata"]["name"]
        for i in (await installed.custom.list_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL))[
            "items"
        ]
    ] == ["sample"], "the refused write stored nothing"


async def test_strategy_none_rewrites_only_the_api_version(k8s_client: client.ApiClient) -> None:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "string"}}}},
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": True, "storage": False, "schema": {"openAPIV3Schema": schema}},
                {"name": "v2", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}},
            ],
        },
    }
    await client.ApiextensionsV1Api(k8s_client).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(k8s_client)
    gadget = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"size": "s"},
    }
    await custom.create_namespaced_custom_object("example.com", "v1", "default", "gadgets", gadget)
    v2 = await custom.get_namespaced_custom_object("example.com", "v2", "default", "gadgets", "g")
    assert v2["apiVersion"] == "example.com/v2" and v2["spec"] == {"size": "s"}
    listed = await custom.list_namespaced_custom_object("example.com", "v1", "default", "gadgets")
    assert [(i["apiVersion"], i["metadata"]["uid"]) for i in listed["items"]] == [
        ("example.com/v1", v2["metadata"]["uid"])
    ]


@pytest.mark.parametrize(
    ("conversion", "field", "message"),
    [
        ({"strategy": "Sometimes"}, "spec.conversion.strategy", 'Unsupported value: "Sometimes"'),
        ({"strategy": "Webhook"}, "spec.conversion.webhook", "required when strategy is set to Webhook"),
        (
            {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://127.0.0.1:1/convert"}}},
            "spec.conversion.webhook.conversionReviewVersions",
            "must include at least one of v1, v1beta1",
        ),
        (
            {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {}}},
            "spec.conversion.webhook.clientConfig",
            "exactly one of url or service is required",
        ),
        (
            {"strategy": "None", "webhook": {"conversionReviewVersions": ["v1"]}},
            "spec.conversion.webhook",
            "should not be set when strategy is not set to Webhook",
        ),
    ],
)
async def test_a_crd_whose_conversion_the_api_server_refuses_is_refused(
    k8s_client: client.ApiClient, conversion: dict[str, Any], field: str, message: str
) -> None:
    crd = yaml.safe_load(CRD.read_text())
    crd["spec"]["conversion"] = conversion
    with pytest.raises(ApiException) as refused:
        await client.ApiextensionsV1Api(k8s_client).create_custom_resource_definition(crd)
    assert refused.value.status == 422
    causes = {c["field"]: c["message"] for c in json.loads(refused.value.body)["details"]["causes"]}
    assert message in causes[field], causes
