"""rollbook's services run under deploy/'s RBAC roles (simcluster with bearer tokens and RBAC on): each
service authenticates as its own ServiceAccount and a CloneSet rolls out, which proves the roles
sufficient; taking away the one rule that lets the executor create pods answers its create with the 403
a real API server gives, which proves that rule needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster, SimConfig
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset
from tests.plugins.stack import Stack, wait_for

from ..plugins.simcluster import MakeSimCluster, api_client_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
SYSTEM = "rollbook-system"
# Where each kind of deploy/'s namespace.yaml and rbac.yaml is created.
PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    """This module's cluster checks every request against the stored RBAC objects."""
    return await make_simcluster(SimConfig(auth=True))


async def _apply(sim: SimCluster, token: str, files: list[Path]) -> list[dict[str, Any]]:
    created = []
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for path in files:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                url = sim.url + PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
                async with session.post(url, json=doc) as response:
                    assert response.status == 201, await response.text()
                    created.append(await response.json())
    return created


async def test_services_run_under_deploys_roles(stack: Stack, simcluster: SimCluster, tmp_path: Path) -> None:
    assert simcluster.auth is not None
    objects = await _apply(
        simcluster, simcluster.auth.admin_token, [BASE / "namespace.yaml", BASE / "rbac.yaml"]
    )
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert {"rollbook-watcher", "rollbook-planner", "rollbook-executor"} <= accounts

    def env_for(account: str) -> dict[str, str]:
        kubeconfig = simcluster.service_account_kubeconfig(SYSTEM, account, tmp_path / account)
        return {
            "ROLLBOOK_KUBECONFIG": str(kubeconfig),
            "ROLLBOOK_LEADER_ELECTION_NAMESPACE": SYSTEM,
            # Leadership is not what this test is about: the defaults, not the stack's 4 s leases.
            "ROLLBOOK_LEADER_LEASE_DURATION": "15",
            "ROLLBOOK_LEADER_RENEW_DEADLINE": "10",
        }

    # Generous readiness bounds: four services importing at once on a shared 2-core machine.
    await stack.start("auditor", ready_timeout=90)
    for service in ("watcher", "planner", "executor"):
        await stack.start(service, env=env_for(f"rollbook-{service}"), ready_timeout=90)

    async with await api_client_for(simcluster) as admin:
        cluster = Cluster(admin)
        await cluster.create_cloneset(seed_cloneset("cloneset-sample-data.yaml", replicas=3))

        async def three_ready() -> bool:
            pods = await cluster.pods("sample-data")
            return len(pods) == 3 and all(is_ready(p) for p in pods.values())

        await wait_for(three_ready, within=90, what="3 ready pods created by services under deploy/'s roles")

        # Without the rule that grants creating pods, the executor's own create is refused.
        rbac = client.RbacAuthorizationV1Api(admin)
        role = await rbac.read_cluster_role("rollbook-executor")
        rules = [r for r in role.rules if not ("pods" in (r.resources or []) and "create" in (r.verbs or []))]
        assert len(rules) == len(role.rules) - 1, "expected exactly one rule granting pod creation"
        await rbac.patch_cluster_role(
            "rollbook-executor", {"rules": [admin.sanitize_for_serialization(r) for r in rules]}
        )
    path = tmp_path / "executor-check"
    simcluster.service_account_kubeconfig(SYSTEM, "rollbook-executor", path)
    async with await config.new_client_from_config(config_file=str(path)) as executor:
        body = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}
        with pytest.raises(ApiException) as refused:
            await client.CoreV1Api(executor).create_namespaced_pod("default", body)
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        'pods is forbidden: User "system:serviceaccount:rollbook-system:rollbook-executor" cannot create '
        'resource "pods" in API group "" in the namespace "default"'
    )
