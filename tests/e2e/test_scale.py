"""Scaling a CloneSet with PVC templates, end to end through the four services."""

from __future__ import annotations

from typing import Any

import pytest

from services.model.streams import ACTION_ID_ANNOTATION
from tests.e2e.cluster import Cluster, instance_id, is_ready, seed_cloneset
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")


async def ready_pods(cluster: Cluster, name: str, count: int) -> dict[str, Any] | None:
    pods = await cluster.pods(name)
    if len(pods) == count and all(is_ready(p) for p in pods.values()):
        return pods
    return None


async def test_scale_up_then_down_with_pods_to_delete(stack: Stack, cluster: Cluster) -> None:
    await stack.start(*SERVICES)
    await cluster.create_cloneset(seed_cloneset("cloneset-sample-data.yaml", replicas=0))
    name = "sample-data"

    await cluster.patch_cloneset(name, {"spec": {"replicas": 5}})
    pods: dict[str, Any] = await wait_for(lambda: ready_pods(cluster, name, 5), what="5 ready pods")
    pvcs = await cluster.pvcs(name)
    assert len(pvcs) == 5
    assert {instance_id(p) for p in pods.values()} == {instance_id(p) for p in pvcs.values()}
    # One action per new pod: its createPod made its claim first, then the pod (no createPVC of its own).
    history = await stack.get_json("auditor", f"/history?stream=CloneSet/default/{name}")
    actions = [e["event"]["payload"] for e in history if e["event"]["type"] == "PodActionRequested"]
    creates = [a for a in actions if a["action"].startswith("create")]
    assert [a["action"] for a in creates] == ["createPod"] * 5
    create_of = {a["details"]["instanceId"]: a["action_id"] for a in creates}
    for claim in pvcs.values():
        assert claim["metadata"]["annotations"][ACTION_ID_ANNOTATION] == create_of[instance_id(claim)]

    doomed = sorted(pods)[:2]
    doomed_ids = {instance_id(pods[n]) for n in doomed}
    kept = {n: pods[n]["metadata"]["uid"] for n in sorted(pods)[2:]}
    await cluster.patch_cloneset(name, {"spec": {"replicas": 3, "scaleStrategy": {"podsToDelete": doomed}}})

    async def scaled_in() -> bool:
        now = await cluster.pods(name)
        return set(now) == set(kept) and len(await cluster.pvcs(name)) == 3

    await wait_for(scaled_in, what="the two named pods and their PVCs gone")
    after = await cluster.pods(name)
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == kept  # the rest stayed, untouched
    remaining_ids = {instance_id(p) for p in (await cluster.pvcs(name)).values()}
    assert not remaining_ids & doomed_ids

    async def list_pruned() -> bool:
        spec = (await cluster.cloneset(name))["spec"]
        return not (spec.get("scaleStrategy") or {}).get("podsToDelete")

    await wait_for(list_pruned, what="podsToDelete emptied once the named pods are gone")

    # The auditor serves the history: the workload's decisions, in order, each round first.
    history = await stack.get_json("auditor", f"/history?stream=CloneSet/default/{name}")
    versions = [entry["event"]["stream_version"] for entry in history]
    assert versions == list(range(1, len(versions) + 1))
    assert history[0]["event"]["type"] == "RoundPlanned"
    deletes = [
        e["event"]["payload"]["pod"] for e in history if e["event"]["payload"].get("action") == "deletePod"
    ]
    assert sorted(deletes) == doomed
    auditor_metrics = await stack.get_text("auditor", "/metrics")
    assert 'rollbook_audit_events_total{outcome="out_of_order"}' not in auditor_metrics
    assert stack.dead() == []
