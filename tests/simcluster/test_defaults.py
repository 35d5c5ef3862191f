"""Pods come back the way a real API server returns them: defaulted by the v1 defaulting functions
(kubernetes `pkg/apis/core/v1/defaults.go`: SetDefaults_PodSpec, SetDefaults_Pod, SetDefaults_Container,
SetDefaults_ContainerPort, SetDefaults_Probe, SetDefaults_SecretVolumeSource ...) and by the default
admission plugins (`plugin/pkg/admission/serviceaccount`, `.../defaulttolerationseconds`,
`.../priority`), and namespaces carry the `kubernetes.io/metadata.name` label (namespace strategy,
`pkg/registry/core/namespace/strategy.go`)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from .helpers import pod_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


async def _created_pod(k8s_client: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    api = client.CoreV1Api(k8s_client)
    await api.create_namespaced_pod("default", body)
    raw = await api.read_namespaced_pod(body["metadata"]["name"], "default", _preload_content=False)
    pod: dict[str, Any] = await raw.json()
    return pod


async def test_created_pod_has_the_api_servers_defaults(k8s_client: client.ApiClient) -> None:
    body = pod_manifest(
        "defaulted",
        containers=[
            {
                "name": "app",
                "image": "nginx:1.25",
                "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"port": 80}},
                "resources": {"limits": {"cpu": "500m"}},
            },
            {"name": "log", "image": "fluentd"},
        ],
        initContainers=[{"name": "init", "image": "busybox@sha256:" + "a" * 64}],
        volumes=[{"name": "config", "configMap": {"name": "app-config"}}],
    )
    pod = await _created_pod(k8s_client, body)
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "default" and spec["serviceAccount"] == "default"
    assert spec["dnsPolicy"] == "ClusterFirst" and spec["restartPolicy"] == "Always"
    assert spec["schedulerName"] == "default-scheduler" and spec["securityContext"] == {}
    assert spec["terminationGracePeriodSeconds"] == 30 and spec["enableServiceLinks"] is True
    assert spec["priority"] == 0 and spec["preemptionPolicy"] == "PreemptLowerPriority"

    token = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(token) == 1 and len(token[0]["name"]) == len("kube-api-access-") + 5
    sources = token[0]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert token[0]["projected"]["defaultMode"] == 420
    config = next(v for v in spec["volumes"] if v["name"] == "config")
    assert config["configMap"]["defaultMode"] == 420
    for container in spec["containers"] + spec["initContainers"]:
        mount = {"name": token[0]["name"], "readOnly": True, "mountPath": TOKEN_PATH}
        assert mount in container["volumeMounts"], container["name"]
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["terminationMessagePolicy"] == "File"

    app, log = spec["containers"]
    assert app["imagePullPolicy"] == "IfNotPresent"  # tagged
    assert log["imagePullPolicy"] == "Always"  # no tag means :latest
    assert spec["initContainers"][0]["imagePullPolicy"] == "IfNotPresent"  # digest
    assert app["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert app["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert app["resources"] == {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}

    assert {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    } in spec["tolerations"]
    assert {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    } in spec["tolerations"]
    assert pod["status"]["qosClass"] == "Burstable"


async def test_opting_out_of_the_token_and_own_tolerations_are_respected(
    k8s_client: client.ApiClient,
) -> None:
    own = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 5,
    }
    body = pod_manifest("no-token", automountServiceAccountToken=False, tolerations=[own])
    spec = (await _created_pod(k8s_client, body))["spec"]
    assert not any(v["name"].startswith("kube-api-access-") for v in spec.get("volumes") or [])
    assert all(not c.get("volumeMounts") for c in spec["containers"])
    not_ready = [t for t in spec["tolerations"] if t["key"] == "node.kubernetes.io/not-ready"]
    assert not_ready == [own]  # the plugin adds none for a taint the pod already tolerates
    assert [t["key"] for t in spec["tolerations"]].count("node.kubernetes.io/unreachable") == 1


async def test_put_without_defaulted_fields_is_not_a_spec_change(k8s_client: client.ApiClient) -> None:
    """A client that PUTs the pod it read, with its own additions, keeps the admission plugins' fields
    (tolerations are re-added on update, priority is preserved) and the pod stays valid."""
    api = client.CoreV1Api(k8s_client)
    pod = await _created_pod(k8s_client, pod_manifest("put-back"))
    pod["spec"].pop("tolerations")
    pod["spec"].pop("priority")
    pod["metadata"]["labels"]["extra"] = "yes"
    updated = await api.replace_namespaced_pod("put-back", "default", pod)
    assert updated.metadata.labels["extra"] == "yes"
    assert updated.spec.priority == 0
    assert len(updated.spec.tolerations) == 2
    assert updated.metadata.generation == 1  # only metadata changed


async def test_namespace_carries_its_name_label(k8s_client: client.ApiClient) -> None:
    api = client.CoreV1Api(k8s_client)
    created = await api.create_namespace({"metadata": {"name": "labelled", "labels": {"team": "a"}}})
    assert created.metadata.labels == {"team": "a", "kubernetes.io/metadata.name": "labelled"}
    assert created.spec.finalizers == ["kubernetes"]
    # The label follows the name whatever a client sends (the strategy overwrites it on update).
    created.metadata.labels["kubernetes.io/metadata.name"] = "other"
    replaced = await api.replace_namespace("labelled", created)
    assert replaced.metadata.labels["kubernetes.io/metadata.name"] == "labelled"
    default = await api.read_namespace("default")
    assert default.metadata.labels["kubernetes.io/metadata.name"] == "default"
