"""Beside OpenKruise, end to end: with kruise-manager's webhook configuration on the cluster, the services
refuse ROLLBOOK_MANAGE=all, roll out the CloneSet labelled rollbook.io/manage=true, and take no decision
on the unlabelled one (kruise-manager's) until it is labelled in."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import ObjectObserved, RoundPlanned
from services.model.management import MANAGE_LABEL
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset
from tests.infra.test_kruise import kruise_webhook_configuration
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


def cloneset(name: str, labels: dict[str, str]) -> dict[str, Any]:
    obj = seed_cloneset("cloneset-sample.yaml", replicas=2)
    obj["metadata"]["name"] = name
    obj["metadata"]["labels"] = {**obj["metadata"]["labels"], **labels}
    obj["spec"]["selector"] = {"matchLabels": {"app": name}}
    obj["spec"]["template"]["metadata"]["labels"] = {"app": name}
    return obj


async def test_only_the_labelled_cloneset_is_rolled_out_beside_kruise_manager(
    stack: Stack, cluster: Cluster, k8s_client: client.ApiClient
) -> None:
    await client.AdmissionregistrationV1Api(k8s_client).create_mutating_webhook_configuration(
        kruise_webhook_configuration()
    )
    stack.settings = msgspec.structs.replace(stack.settings, manage="all")  # asked for, and refused
    await stack.start("auditor", "watcher", "planner", "executor")
    assert '"manage_all_refused"' in stack.tail("planner", 200)

    await cluster.create_cloneset(cloneset("kruises", {}))
    await cluster.create_cloneset(cloneset("ours", {MANAGE_LABEL: "true"}))

    async def ours_ready() -> bool:
        pods = await cluster.pods("ours")
        return len(pods) == 2 and all(is_ready(p) for p in pods.values())

    await wait_for(ours_ready, what="the labelled CloneSet's 2 pods ready")
    assert await cluster.pods("kruises") == {}

    # Opted in mid-life: from then on rollbook manages it.
    await cluster.patch_cloneset("kruises", {"metadata": {"labels": {MANAGE_LABEL: "true"}}})

    async def kruises_ready() -> bool:
        pods = await cluster.pods("kruises")
        return len(pods) == 2 and all(is_ready(p) for p in pods.values())

    await wait_for(kruises_ready, what="the CloneSet labelled in later: its 2 pods ready")

    store = await EventStore.connect(stack.settings.database_url)
    try:
        observed = [
            e.envelope for e in await store.read_stream(CLONESET.observed_stream("default", "kruises"))
        ]
        labelled_at = min(
            e.stream_version
            for e in observed
            if isinstance(e.payload, ObjectObserved)
            and e.payload.kind == "CloneSet"
            and (e.payload.object["metadata"].get("labels") or {}).get(MANAGE_LABEL) == "true"
        )
        assert labelled_at > 1, "it was observed unlabelled first"
        # No decision was ever taken on its unlabelled state: the first round folded the labelled one.
        decisions = [
            e.envelope for e in await store.read_stream(CLONESET.decisions_stream("default", "kruises"))
        ]
        first = decisions[0].payload
        assert isinstance(first, RoundPlanned)
        assert first.through[CLONESET.observed_stream("default", "kruises")] >= labelled_at
    finally:
        await store.close()
    assert stack.dead() == []
