"""With `SimConfig(auth=True)` requests need a bearer token (401 otherwise, `apiserver/pkg/endpoints/
filters/authentication.go`) and are authorized by the stored RBAC objects as kube-apiserver's RBAC
authorizer does (`plugin/pkg/auth/authorizer/rbac/rbac.go`), denials worded as its Forbidden responses
(`apiserver/pkg/endpoints/handlers/responsewriters/errors.go`, forbiddenMessage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import pod_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")

RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
]


async def _denied(call: Any, code: int = 403) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status == code
    body: dict[str, Any] = json.loads(caught.value.body)
    return body


async def test_service_account_is_held_to_its_roles(make_simcluster: MakeSimCluster, tmp_path: Path) -> None:
    sim = await make_simcluster(SimConfig(auth=True, kubelet=False))
    async with await api_client_for(sim) as admin_client:  # the written kubeconfig is an administrator's
        core = client.CoreV1Api(admin_client)
        rbac = client.RbacAuthorizationV1Api(admin_client)
        await core.create_namespaced_service_account("default", {"metadata": {"name": "reader"}})
        await rbac.create_namespaced_role("default", {"metadata": {"name": "reader"}, "rules": RULES})
        binding = {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
        }
        await rbac.create_namespaced_role_binding("default", binding)
        await core.create_namespaced_pod("default", pod_manifest("seen"))

        path = sim.service_account_kubeconfig("default", "reader", tmp_path / "reader")
        async with await config.new_client_from_config(config_file=str(path)) as reader_client:
            reader = client.CoreV1Api(reader_client)
            assert [p.metadata.name for p in (await reader.list_namespaced_pod("default")).items] == ["seen"]
            await reader.patch_namespaced_pod_status("seen", "default", {"metadata": {"labels": {"a": "b"}}})
            user = "system:serviceaccount:default:reader"
            body = await _denied(reader.create_namespaced_pod("default", pod_manifest("new")))
            assert body["reason"] == "Forbidden"
            assert body["message"] == (
                f'pods is forbidden: User "{user}" cannot create resource "pods" in API group "" '
                'in the namespace "default"'
            )
            body = await _denied(reader.delete_namespaced_pod("seen", "default"))
            assert body["message"].startswith(f'pods "seen" is forbidden: User "{user}" cannot delete')
            body = await _denied(reader.list_node())
            assert body["message"].endswith(
                'cannot list resource "nodes" in API group "" at the cluster scope'
            )
            body = await _denied(reader.list_namespaced_pod("kube-system"))
            assert 'in the namespace "kube-system"' in body["message"]

            # Removing the one rule that allows listing: the same call is now refused.
            await rbac.patch_namespaced_role("reader", "default", {"rules": RULES[1:]})
            await _denied(reader.list_namespaced_pod("default"))

            # The account's token dies with the account.
            await core.delete_namespaced_service_account("reader", "default")
            body = await _denied(reader.read_namespaced_pod("seen", "default"), code=401)
            assert body["reason"] == "Unauthorized"

    anonymous = client.ApiClient(client.Configuration(host=sim.url))
    async with anonymous:
        body = await _denied(client.CoreV1Api(anonymous).list_namespaced_pod("default"), code=401)
        assert body["message"] == "Unauthorized"
