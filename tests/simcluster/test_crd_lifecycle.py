"""A CRD's life as kube-apiserver lives it: created over CloneSets that exist already, or replaced with a
new storage version, it keeps every object, each at the version it was stored at (`status.storedVersions`)
and converted when read; a conversion webhook that cannot be reached fails the request with the reason
(the Service missing, or without endpoints) and the objects stay."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .rollbook_webhook import rollbook_webhook

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
CLONESET_CRD = ROOT / "deploy" / "base" / "crds" / "clonesets.yaml"
WIDGET_CRD = ROOT / "tests" / "fixtures" / "install" / "crd.yaml"
SEED = ROOT / "tests" / "fixtures" / "seed"
GROUP, PLURAL = "apps.kruise.io", "clonesets"


async def names(custom: client.CustomObjectsApi, version: str) -> list[str]:
    listed = await custom.list_namespaced_custom_object(GROUP, version, "default", PLURAL)
    return [c["metadata"]["name"] for c in listed["items"]]


async def test_the_cloneset_crd_applied_over_existing_clonesets_keeps_them(
    make_simcluster: MakeSimCluster, tmp_path: Path
) -> None:
    sim = await make_simcluster(SimConfig())  # CloneSets served natively, at v1alpha1
    async with await api_client_for(sim) as api:
        custom = client.CustomObjectsApi(api)
        sample = yaml.safe_load((SEED / "cloneset-sample.yaml").read_text())
        await custom.create_namespaced_custom_object(GROUP, "v1alpha1", "default", PLURAL, sample)
        before = await custom.get_namespaced_custom_object(GROUP, "v1alpha1", "default", PLURAL, "sample")

        extensions = client.ApiextensionsV1Api(api)
        await extensions.create_custom_resource_definition(yaml.safe_load(CLONESET_CRD.read_text()))
        crd = await extensions.read_custom_resource_definition("clonesets.apps.kruise.io")
        assert crd.status.stored_versions == ["v1alpha1", "v1beta1"]

        # Stored at v1alpha1, read at v1alpha1: no conversion needed, the object is there as it was.
        after = await custom.get_namespaced_custom_object(GROUP, "v1alpha1", "default", PLURAL, "sample")
        assert after["metadata"]["uid"] == before["metadata"]["uid"] and after["spec"] == before["spec"]
        assert await names(custom, "v1alpha1") == ["sample"]

        # At v1beta1 it needs rollbook's webhook, whose Service does not exist yet: a 500 with the reason.
        with pytest.raises(ApiException) as failed:
            await names(custom, "v1beta1")
        message = json.loads(failed.value.body)["message"]
        assert failed.value.status == 500
        assert message == (
            "Internal error occurred: conversion webhook for apps.kruise.io/v1beta1, Kind=CloneSet failed: "
            'Post "https://rollbook-webhook.rollbook-system.svc:443/convert?timeout=30s": '
            'service "rollbook-webhook" not found'
        )
        assert await names(custom, "v1alpha1") == ["sample"]  # the objects stay

        # The Service without a ready pod behind it: kube-apiserver's "no endpoints available".
        core = client.CoreV1Api(api)
        await core.create_namespace({"metadata": {"name": "rollbook-system"}})
        service = {
            "metadata": {"name": "rollbook-webhook"},
            "spec": {
                "selector": {"app": "rollbook-webhook"},
                "ports": [{"name": "https", "port": 443, "targetPort": 9443}],
            },
        }
        await core.create_namespaced_service("rollbook-system", service)
        with pytest.raises(ApiException) as failed:
            await names(custom, "v1beta1")
        assert json.loads(failed.value.body)["message"].endswith(
            'no endpoints available for service "rollbook-webhook"'
        )

        # With the webhook up, both versions read, and a write stores the object at v1beta1.
        async with rollbook_webhook(sim, tmp_path / "tls"):
            assert await names(custom, "v1beta1") == ["sample"]
            converted = await custom.get_namespaced_custom_object(
                GROUP, "v1beta1", "default", PLURAL, "sample"
            )
            assert converted["apiVersion"] == "apps.kruise.io/v1beta1"
            await custom.patch_namespaced_custom_object(
                GROUP,
                "v1beta1",
                "default",
                PLURAL,
                "sample",
                {"metadata": {"labels": {"touched": "yes"}}},
                _content_type="application/merge-patch+json",
            )
        stored = sim.store.find(
            next(rt for rt in sim.store.objects if rt.key == (GROUP, "v1beta1", PLURAL)), "default", "sample"
        )
        assert stored is not None and stored["apiVersion"] == "apps.kruise.io/v1beta1"
        assert (await custom.get_namespaced_custom_object(GROUP, "v1beta1", "default", PLURAL, "sample"))[
            "metadata"
        ]["labels"]["touched"] == "yes"


def widget_crd_v2(crd: dict[str, Any]) -> dict[str, Any]:
    """The widget CRD replaced: v2 added as the storage version, v1 still served."""
    replaced = copy.deepcopy(crd)
    v1 = replaced["spec"]["versions"][0]
    v1["storage"] = False
    v2 = copy.deepcopy(v1)
    v2["name"], v2["storage"] = "v2", True
    replaced["spec"]["versions"].append(v2)
    return replaced


async def test_replacing_a_crd_keeps_its_objects_at_their_stored_version(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await make_simcluster(SimConfig())
    async with await api_client_for(sim) as api:
        extensions = client.ApiextensionsV1Api(api)
        crd = yaml.safe_load(WIDGET_CRD.read_text())
        await extensions.create_custom_resource_definition(crd)
        custom = client.CustomObjectsApi(api)
        body = {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": "small"},
        }
        created = await custom.create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", body
        )

        current = await extensions.read_custom_resource_definition("widgets.example.com")
        replaced = widget_crd_v2(crd)
        replaced["metadata"]["resourceVersion"] = current.metadata.resource_version
        await extensions.replace_custom_resource_definition("widgets.example.com", replaced)
        crd_now = await extensions.read_custom_resource_definition("widgets.example.com")
        assert crd_now.status.stored_versions == ["v1", "v2"]

        for version in ("v1", "v2"):
            got = await custom.get_namespaced_custom_object("example.com", version, "default", "widgets", "w")
            assert (
                got["apiVersion"] == f"example.com/{version}"
                and got["metadata"]["uid"] == created["metadata"]["uid"]
            )
            listed = await custom.list_namespaced_custom_object("example.com", version, "default", "widgets")
            assert [w["apiVersion"] for w in listed["items"]] == [f"example.com/{version}"]

        # Deleting the CRD still takes its objects with it.
        await extensions.delete_custom_resource_definition("widgets.example.com")
        with pytest.raises(ApiException) as gone:
            await custom.list_namespaced_custom_object("example.com", "v2", "default", "widgets")
        assert gone.value.status == 404
