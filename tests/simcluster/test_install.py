"""What an install applies is stored and served as by an API server without controllers (as envtest):
`kubectl apply -k` of a kustomization holding every kind rollbook's deploy/ uses, CRDs registered from
their manifests (apiextensions-apiserver: NamesAccepted/Established conditions, discovery, structural
schema pruning, defaults and validation with its messages, status and scale subresources), and rollbook's
own CRDs from deploy/ serving the seed CloneSets."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster, SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import Kubectl, rows
from .rollbook_webhook import rollbook_webhook

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as exits:
        yield exits


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "install"
ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "seed"


async def test_kubectl_apply_k_of_every_install_kind(kubectl: Kubectl, k8s_client: client.ApiClient) -> None:
    out = await kubectl("apply", "-k", str(FIXTURE))
    for created in (
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created",
        "namespace/widgets-system created",
        "serviceaccount/widget-controller created",
        "clusterrole.rbac.authorization.k8s.io/widget-controller created",
        "clusterrolebinding.rbac.authorization.k8s.io/widget-controller created",
        "role.rbac.authorization.k8s.io/widget-lease created",
        "rolebinding.rbac.authorization.k8s.io/widget-lease created",
        "secret/connections created",
        "service/widget-controller created",
        "deployment.apps/widget-controller created",
        "job.batch/widget-migrate created",
        "poddisruptionbudget.policy/widget-controller created",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/widget-defaults created",
    ):
        assert created in out, out
    assert "configmap/app-config-" in out
    # Applying again changes nothing: the three-way merge sees the server's defaults as no change.
    again = await kubectl("apply", "-k", str(FIXTURE))
    assert "created" not in again and "configured" not in again, again

    core = client.CoreV1Api(k8s_client)
    service = await core.read_namespaced_service("widget-controller", "widgets-system")
    assert service.spec.cluster_ip.startswith("10.96.") and service.spec.type == "ClusterIP"
    assert service.spec.ports[0].protocol == "TCP"
    deployment = await client.AppsV1Api(k8s_client).read_namespaced_deployment(
        "widget-controller", "widgets-system"
    )
    assert deployment.spec.strategy.rolling_update.max_surge == "25%"
    assert deployment.spec.template.spec.containers[0].ports[0].protocol == "TCP"
    accounts = {a.metadata.name for a in (await core.list_namespaced_service_account("widgets-system")).items}
    assert accounts == {"default", "widget-controller"}  # the default one comes with the namespace
    assert rows(await kubectl("get", "jobs", "-n", "widgets-system"))[1][0] == "widget-migrate"

    crd = await client.ApiextensionsV1Api(k8s_client).read_custom_resource_definition("widgets.example.com")
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}

    assert "widget.example.com/gadget created" in await kubectl("apply", "-f", str(FIXTURE / "widget.yaml"))
    custom = client.CustomObjectsApi(k8s_client)
    gadget = await custom.get_namespaced_custom_object(
        "example.com", "v1", "widgets-system", "widgets", "gadget"
    )
    assert gadget["spec"] == {"size": "small", "replicas": 1, "extra": {"kept": True}}  # pruned, defaulted
    assert rows(await kubectl("get", "wd", "-n", "widgets-system"))[1][0] == "gadget"  # short name
    assert "scaled" in await kubectl("scale", "widget", "gadget", "-n", "widgets-system", "--replicas=3")
    gadget = await custom.get_namespaced_custom_object(
        "example.com", "v1", "widgets-system", "widgets", "gadget"
    )
    assert gadget["spec"]["replicas"] == 3 and gadget["metadata"]["generation"] == 2


async def _invalid(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status == 422
    body: dict[str, Any] = json.loads(caught.value.body)
    return body


async def test_crd_schema_validation_messages_and_deletion(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    import yaml

    extensions = client.ApiextensionsV1Api(k8s_client)
    await extensions.create_custom_resource_definition(yaml.safe_load((FIXTURE / "crd.yaml").read_text()))
    custom = client.CustomObjectsApi(k8s_client)

    def widget(spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}

    body = await _invalid(
        custom.create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", widget({"size": "huge", "replicas": "two"})
        )
    )
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert causes == {
        "spec.size": 'Unsupported value: "huge": supported values: "small", "large"',
        "spec.replicas": 'Invalid value: "string": spec.replicas in body must be of type integer: "string"',
    }
    assert body["message"].startswith('Widget.example.com "w" is invalid: [')
    body = await _invalid(
        custom.create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", widget({"replicas": -1})
        )
    )
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert causes == {
        "spec.size": "Required value",
        "spec.replicas": "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
    }
    await custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget({"size": "large", "port": "http"})
    )
    status = {"status": {"replicas": 2, "selector": "app=w"}}
    await custom.patch_namespaced_custom_object_status(
        "example.com", "v1", "default", "widgets", "w", status, _content_type="application/merge-patch+json"
    )
    scale = await custom.get_namespaced_custom_object_scale("example.com", "v1", "default", "widgets", "w")
    assert scale["status"] == {"replicas": 2, "selector": "app=w"}

    await extensions.delete_custom_resource_definition("widgets.example.com")
    with pytest.raises(ApiException) as gone:
        await custom.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    assert gone.value.status == 404
    groups = [g.name for g in (await client.ApisApi(k8s_client).get_api_versions()).groups]
    assert "example.com" not in groups


async def test_crd_that_is_not_structural_is_refused(k8s_client: client.ApiClient) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "loose.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Loose", "plural": "looses"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {}}}},
                }
            ],
        },
    }
    body = await _invalid(client.ApiextensionsV1Api(k8s_client).create_custom_resource_definition(crd))
    fields = [c["field"] for c in body["details"]["causes"]]
    assert "metadata.name" in fields  # must be spec.names.plural+"."+spec.group
    assert "spec.versions[0].schema.openAPIV3Schema.properties[spec].type" in fields


STANDALONE = ROOT / "deploy" / "standalone"


async def test_kubectl_apply_k_deploy_standalone_serves_rollbooks_own_crds(
    make_simcluster: MakeSimCluster, kubectl_binary: Path, tmp_path: Path, stack: AsyncExitStack
) -> None:
    """A cluster with cert-manager and without the Kruise resources: `kubectl apply -k deploy/standalone`
    creates every object of the install, its CRDs make CloneSets and SidecarSets served (with their
    schemas), and the seed CloneSet then applies, is pruned by rollbook's own CRD and scales. CloneSets
    are stored as v1beta1, so the v1alpha1 seed goes through rollbook's conversion webhook."""
    sim = await make_simcluster(SimConfig(disabled_resources=("clonesets", "sidecarsets")))
    webhook = await stack.enter_async_context(rollbook_webhook(sim, tmp_path / "tls"))
    assert webhook.base_url
    kubectl = Kubectl(kubectl_binary, sim, tmp_path / "cache")
    await kubectl("apply", "-f", str(FIXTURE / "cert-manager-crds.yaml"))
    await kubectl("wait", "--for=condition=Established", "crd/certificates.cert-manager.io", "--timeout=10s")
    out = await kubectl("apply", "-k", str(STANDALONE))
    kinds = {line.split("/")[0] for line in out.splitlines() if line.endswith(" created")}
    assert kinds == {
        "customresourcedefinition.apiextensions.k8s.io",
        "namespace",
        "serviceaccount",
        "role.rbac.authorization.k8s.io",
        "clusterrole.rbac.authorization.k8s.io",
        "rolebinding.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "configmap",
        "service",
        "deployment.apps",
        "job.batch",
        "poddisruptionbudget.policy",
        "networkpolicy.networking.k8s.io",
        "issuer.cert-manager.io",
        "certificate.cert-manager.io",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io",
        "validatingwebhookconfiguration.admissionregistration.k8s.io",
    }, out
    again = await kubectl("apply", "-k", str(STANDALONE))
    assert " created" not in again and "configured" not in again, again  # the server's defaults are no change

    assert "created" in await kubectl("apply", "-f", str(SEED / "cloneset-sample.yaml"))
    async with await api_client_for(sim) as api_client:
        custom = client.CustomObjectsApi(api_client)
        sample = await custom.get_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample"
        )
        assert sample["spec"]["replicas"] == 5
        bad = dict(sample, spec=dict(sample["spec"], replicas="five"))
        with pytest.raises(ApiException) as refused:
            await custom.replace_namespaced_custom_object(
                "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample", bad
            )
        assert (
            refused.value.status == 422
            and "spec.replicas in body must be of type integer" in refused.value.body
        )
    assert "scaled" in await kubectl("scale", "cloneset", "sample", "--replicas=2")
