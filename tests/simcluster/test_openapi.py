"""simcluster publishes OpenAPI v3 for the custom resources it serves, so `kubectl explain cloneset.spec`
works against it (it failed: "couldn't find resource"): its own CloneSets and SidecarSets with the schemas
of rollbook's CRDs, and a CRD installed on it with that CRD's schema."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.simcluster import SimCluster
from services.simcluster.kruise_crds import cloneset_crd
from services.simcluster.openapi import documents, schema_name

KUBECTL = shutil.which("kubectl")


@pytest.mark.pure
def test_a_document_per_group_version_with_the_kind_on_its_paths() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    docs = documents([("apps.kruise.io", "v1alpha1", "CloneSet", "clonesets", True, schema)], "v1.30.0")
    doc = docs["apis/apps.kruise.io/v1alpha1"]
    name = schema_name("apps.kruise.io", "v1alpha1", "CloneSet")
    assert name == "io.kruise.apps.v1alpha1.CloneSet"
    gvk = {"group": "apps.kruise.io", "kind": "CloneSet", "version": "v1alpha1"}
    assert doc["components"]["schemas"][name]["x-kubernetes-group-version-kind"] == [gvk]
    namespaced = doc["paths"]["/apis/apps.kruise.io/v1alpha1/namespaces/{namespace}/clonesets"]
    assert namespaced["get"]["x-kubernetes-group-version-kind"] == gvk


async def kubectl(simcluster: SimCluster, *args: str) -> tuple[int, str, str]:
    assert KUBECTL is not None
    env = {**os.environ, "KUBECONFIG": str(simcluster.kubeconfig_path)}
    process = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl")
@pytest.mark.asyncio(loop_scope="session")
async def test_kubectl_explain_works_against_simcluster(simcluster: SimCluster) -> None:
    code, out, err = await kubectl(simcluster, "explain", "cloneset.spec")
    assert code == 0, err
    assert "KIND:       CloneSet" in out and "VERSION:    v1alpha1" in out
    described = cloneset_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "updateStrategy\t<Object>" in out and described["description"] in out
    code, out, err = await kubectl(simcluster, "explain", "clone.spec.updateStrategy.partition")
    assert code == 0 and "FIELD: partition" in out, err
    code, out, err = await kubectl(simcluster, "explain", "sidecarset.spec.containers")
    assert code == 0 and "KIND:       SidecarSet" in out, err
    code, _, err = await kubectl(simcluster, "explain", "cloneset.spec.nothere")
    assert code != 0 and 'field "nothere" does not exist' in err


@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl")
@pytest.mark.asyncio(loop_scope="session")
async def test_an_installed_crd_is_explained_from_its_own_schema(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A widget.",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "description": "How big."}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    extensions = client.ApiextensionsV1Api(k8s_client)
    await extensions.create_custom_resource_definition(body=crd)
    try:
        for _ in range(100):  # until kubectl's discovery knows the new group (it may cache the old list)
            code, out, err = await kubectl(simcluster, "explain", "widget.spec.size")
            if code == 0:
                break
            await asyncio.sleep(0.2)
    finally:
        await extensions.delete_custom_resource_definition("widgets.example.com")
    assert code == 0, err
    assert "KIND:       Widget" in out and "How big." in out
