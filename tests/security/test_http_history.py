"""The trail over HTTP, as an attacker on the network reads it: the auditor's ``/history`` answers only a
bearer token its ``ROLLBOOK_API_AUTH`` accepts. In a cluster (``kubernetes``: simcluster with tokens and
RBAC, deploy/'s roles applied) a ServiceAccount not bound to rollbook-history-reader gets 403, one bound
gets the events; in embedded mode (``token``) only the token file's content opens it. ``/healthz``,
``/readyz`` and ``/metrics`` stay open and carry no recorded string."""

from __future__ import annotations

import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from services.infra.api_auth import token_path
from services.infra.store import EventStore
from services.model.events import ObjectObserved, new_event
from services.simcluster import SimCluster, SimConfig
from tests.plugins.stack import Stack

from ..plugins.simcluster import MakeSimCluster

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
SYSTEM = "rollbook-system"
SECRET = "attacker-can-see-this-" + uuid.uuid4().hex[:8]


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    return await make_simcluster(SimConfig(auth=True, kubelet=False))


async def _post(sim: SimCluster, path: str, body: dict[str, Any]) -> None:
    assert sim.auth is not None
    headers = {"Authorization": f"Bearer {sim.auth.admin_token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(sim.url + path, json=body) as response:
            assert response.status == 201, await response.text()


async def _apply_deploy_rbac(sim: SimCluster) -> None:
    paths = {
        "Namespace": "/api/v1/namespaces",
        "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    }
    for name in ("namespace.yaml", "rbac.yaml"):
        for doc in yaml.safe_load_all((BASE / name).read_text()):
            if doc:
                await _post(sim, paths[doc["kind"]].format(ns=doc["metadata"].get("namespace", "")), doc)


async def _record_one_event(stack: Stack) -> str:
    """One event whose payload carries a string only a reader of the trail can know."""
    store = await EventStore.connect(stack.settings.database_url)
    try:
        stream = f"CloneSet/default/{SECRET}"
        observed = ObjectObserved(
            kind="CloneSet",
            namespace="default",
            name=SECRET,
            uid=str(uuid.uuid4()),
            resource_version="1",
            change="ADDED",
            object={"metadata": {"name": SECRET, "labels": {"note": SECRET}}},
        )
        event = new_event(observed, stream=stream, stream_version=1, occurred_at=datetime.now(UTC))
        await store.append([event], expected_version=0)
        return stream
    finally:
        await store.close()


async def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(url) as response:
            return response.status, await response.text()


async def test_history_in_a_cluster_needs_a_token_rbac_lets_read(
    stack: Stack, simcluster: SimCluster, tmp_path: Path
) -> None:
    await _apply_deploy_rbac(simcluster)
    for account in ("nosy", "reader"):
        await _post(
            simcluster,
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
        )
    await _post(
        simcluster,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "reader-reads-history"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "rollbook-history-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
        },
    )
    stream = await _record_one_event(stack)
    kubeconfig = simcluster.service_account_kubeconfig(SYSTEM, "rollbook-auditor", tmp_path / "auditor")
    await stack.start(
        "auditor",
        env={"ROLLBOOK_API_AUTH": "kubernetes", "ROLLBOOK_KUBECONFIG": str(kubeconfig)},
        ready_timeout=90,
    )
    assert simcluster.auth is not None
    history = stack.children["auditor"].base_url + f"/history?stream={stream}"

    status, body = await _get(history)
    assert (status, SECRET in body) == (401, False), body
    status, body = await _get(history, "not-a-token")
    assert (status, SECRET in body) == (401, False), body
    status, body = await _get(history, simcluster.auth.issue("default", "nosy"))
    assert (status, SECRET in body) == (403, False), body
    assert "may not get history.rollbook.io" in body
    status, body = await _get(history, simcluster.auth.issue("default", "reader"))
    assert status == 200, body
    assert SECRET in body


async def test_history_in_embedded_mode_needs_the_token_file(stack: Stack) -> None:
    stream = await _record_one_event(stack)
    await stack.start("auditor", ready_timeout=90)
    base = stack.children["auditor"].base_url
    path = token_path(stack.settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text().strip()

    for attempt in (None, "", "x" * len(token), token[:-1]):
        status, body = await _get(base + f"/history?stream={stream}", attempt)
        assert (status, SECRET in body) == (401, False), (attempt, body)
    status, body = await _get(base + f"/history?stream={stream}", token)
    assert status == 200 and SECRET in body, body
    # The open endpoints answer without a token and carry no recorded string.
    for open_path in ("/healthz", "/readyz", "/metrics"):
        status, body = await _get(base + open_path)
        assert status == 200, (open_path, body)
        assert SECRET not in body, open_path


async def test_history_parameters_are_checked(stack: Stack) -> None:
    await stack.start("auditor", ready_timeout=90)
    base = stack.children["auditor"].base_url
    token = token_path(stack.settings).read_text().strip()
    for query, reason in (
        ("stream=CloneSet/default/x&from_version=abc", "from_version must be an integer"),
        ("after=-1", "after must be between 0"),
        ("limit=0", "limit must be between 1 and 10000"),
        ("limit=10001", "limit must be between 1 and 10000"),
        ("stream=a&correlation_id=b", "not both"),
        ("from_version=2", "from_version needs stream"),
        ("colour=red", "unknown parameter 'colour'"),
    ):
        status, body = await _get(base + "/history?" + query, token)
        assert status == 400, (query, status, body)
        assert reason in body, (query, body)
