"""Bad writes are refused with the status code and words of kube-apiserver.

- Label keys/values and names: `k8s.io/apimachinery/pkg/util/validation/validation.go` (IsQualifiedName,
  IsValidLabelValue, IsDNS1123Subdomain, IsDNS1123Label) reported through
  `apimachinery/pkg/api/validation/objectmeta.go` as 422 `Invalid` ("<Kind> \"name\" is invalid: ...",
  several causes in brackets, apimachinery `errors.NewInvalid`).
- requests above limits and volume mounts without a volume: `pkg/apis/core/validation/validation.go`
  (ValidateResourceRequirements, ValidateVolumeMounts).
- resourceVersion on create: the storage layer's `ErrResourceVersionSetOnCreate`, a 500.
- metadata.uid changed on update: ValidateObjectMetaUpdate, "field is immutable", 422.
- name in the body differing from the URL on PUT: `apiserver/pkg/endpoints/handlers/update.go`, 400.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .helpers import pod_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        await call
    body: dict[str, Any] = json.loads(caught.value.body)
    assert body["kind"] == "Status" and body["code"] == caught.value.status
    return body


async def test_label_keys_and_values_are_validated(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    body = pod_manifest("labels", labels={"bad key": "ok", "fine": "x" * 64})
    refused = await _refused(core.create_namespaced_pod("default", body))
    assert refused["code"] == 422 and refused["reason"] == "Invalid"
    causes = refused["details"]["causes"]
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("metadata.labels", "FieldValueInvalid"),
        ("metadata.labels", "FieldValueInvalid"),
    ]
    assert causes[0]["message"].startswith('Invalid value: "bad key": name part must consist of alphanumeric')
    assert causes[1]["message"] == f'Invalid value: "{"x" * 64}": must be no more than 63 characters'
    assert refused["message"].startswith(
        'Pod "labels" is invalid: [metadata.labels: Invalid value: "bad key"'
    )

    prefixed = pod_manifest("prefixed", labels={"Example.COM/app": "web"})
    refused = await _refused(core.create_namespaced_pod("default", prefixed))
    assert "prefix part a lowercase RFC 1123 subdomain" in refused["details"]["causes"][0]["message"]
    # A good prefix and the longest allowed parts pass.
    fine = pod_manifest("fine-labels", labels={"apps.example.com/" + "n" * 63: "v" * 63, "empty": ""})
    await core.create_namespaced_pod("default", fine)


async def test_object_and_container_names_are_rfc_1123(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    refused = await _refused(core.create_namespaced_pod("default", pod_manifest("Web_1")))
    assert refused["message"] == (
        'Pod "Web_1" is invalid: metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    refused = await _refused(core.create_namespace({"metadata": {"name": "dotted.name"}}))
    assert "a lowercase RFC 1123 label must consist of" in refused["message"]  # namespaces are labels
    body = pod_manifest("container-name", containers=[{"name": "App", "image": "nginx:1.25"}])
    refused = await _refused(core.create_namespaced_pod("default", body))
    assert refused["details"]["causes"][0]["field"] == "spec.containers[0].name"


async def test_requests_above_limits_and_mounts_without_volume(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    resources = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "1Gi"}}
    body = pod_manifest("greedy", containers=[{"name": "app", "image": "nginx:1.25", "resources": resources}])
    refused = await _refused(core.create_namespaced_pod("default", body))
    assert refused["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "1": must be less than or equal to cpu limit of 500m',
            "field": "spec.containers[0].resources.requests",
        }
    ]
    mounts = [{"name": "data", "mountPath": "/data"}]
    body = pod_manifest(
        "unmounted", containers=[{"name": "app", "image": "nginx:1.25", "volumeMounts": mounts}]
    )
    refused = await _refused(core.create_namespaced_pod("default", body))
    assert refused["details"]["causes"] == [
        {
            "reason": "FieldValueNotFound",
            "message": 'Not found: "data"',
            "field": "spec.containers[0].volumeMounts[0].name",
        }
    ]


async def test_resource_version_on_create_is_an_internal_error(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    body = pod_manifest("versioned")
    body["metadata"]["resourceVersion"] = "12"
    refused = await _refused(core.create_namespaced_pod("default", body))
    assert refused["code"] == 500 and refused["reason"] == "InternalError"
    assert (
        refused["message"]
        == "Internal error occurred: resourceVersion should not be set on objects to be created"
    )


async def test_uid_and_name_cannot_change_on_update(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    pod = await core.create_namespaced_pod("default", pod_manifest("fixed"))
    pod.metadata.uid = "0b0b0b0b-0000-4000-8000-000000000000"
    refused = await _refused(core.replace_namespaced_pod("fixed", "default", pod))
    assert refused["code"] == 422
    assert refused["details"]["causes"][0] == {
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "0b0b0b0b-0000-4000-8000-000000000000": field is immutable',
        "field": "metadata.uid",
    }
    pod = await core.read_namespaced_pod("fixed", "default")
    pod.metadata.name = "other"
    refused = await _refused(core.replace_namespaced_pod("fixed", "default", pod))
    assert refused["code"] == 400 and refused["reason"] == "BadRequest"
    assert refused["message"] == "the name of the object (other) does not match the name on the URL (fixed)"


async def test_network_policies_are_stored_defaulted_and_validated(k8s_client: client.ApiClient) -> None:
    """networking.k8s.io/v1 NetworkPolicy (stored, not enforced): SetDefaults_NetworkPolicy fills
    policyTypes and port protocols; ValidateNetworkPolicySpec refuses a peer naming nothing, an ipBlock
    beside a selector, an except outside its cidr, an unknown protocol and an unknown policy type."""
    api = client.NetworkingV1Api(k8s_client)
    good = {
        "metadata": {"name": "from-web"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 5432}]}
            ],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}],
        },
    }
    await api.create_namespaced_network_policy("default", good)
    raw = await api.read_namespaced_network_policy("from-web", "default", _preload_content=False)
    stored = (await raw.json())["spec"]
    assert stored["policyTypes"] == ["Ingress", "Egress"]
    assert stored["ingress"][0]["ports"] == [{"port": 5432, "protocol": "TCP"}]

    bad = {
        "metadata": {"name": "bad"},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Sideways"],
            "ingress": [
                {
                    "from": [
                        {},
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}, "podSelector": {}},
                    ],
                    "ports": [{"protocol": "ICMP", "port": 80}],
                }
            ],
        },
    }
    refused = await _refused(api.create_namespaced_network_policy("default", bad))
    assert refused["code"] == 422 and refused["reason"] == "Invalid"
    fields = {cause["field"] for cause in refused["details"]["causes"]}
    assert fields == {
        "spec.policyTypes[1]",
        "spec.ingress[0].from[0]",
        "spec.ingress[0].from[1]",
        "spec.ingress[0].from[1].ipBlock.except[0]",
        "spec.ingress[0].ports[0].protocol",
    }, refused
    assert "must specify a peer" in refused["message"]
    assert "may not specify both ipBlock and another peer" in refused["message"]
