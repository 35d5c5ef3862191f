"""The services under API faults: failing writes, cut watch streams, expired resourceVersions (410);
and a clean SIGTERM shutdown with metrics that tell what happened."""

from __future__ import annotations

import asyncio
import copy
import re

import pytest

from services.simcluster import FaultConfig, SimCluster
from services.simcluster.resources import CLONESETS
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset
from tests.e2e.test_audit_trail import assert_trail_consistent
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
NAME = "sample-data"


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if not match:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


async def test_converges_through_write_errors_cut_watches_and_410(
    stack: Stack, cluster: Cluster, simcluster: SimCluster
) -> None:
    # Every watch stream ends after 3 events (as a flaky connection would) from the start.
    simcluster.faults.configure(FaultConfig(watch_cut_after_events=3, seed=7))
    await stack.start(*SERVICES)
    await cluster.create_cloneset(seed_cloneset("cloneset-sample-data.yaml", replicas=0))

    async def compact_while_running(stop: asyncio.Event) -> None:
        while not stop.is_set():
            simcluster.store.compact()  # every resume from an older resourceVersion now gets 410 Gone
            await asyncio.sleep(0.3)

    stop = asyncio.Event()
    compactor = asyncio.create_task(compact_while_running(stop))
    try:
        await cluster.patch_cloneset(NAME, {"spec": {"replicas": 5}})
        simcluster.faults.configure(FaultConfig(write_error_rate=0.25, watch_cut_after_events=3, seed=7))

        async def five_ready() -> bool:
            pods = await cluster.pods(NAME)
            return len(pods) == 5 and all(is_ready(p) for p in pods.values())

        await wait_for(five_ready, within=90, what="5 ready pods despite the faults")

        # The rollout may converge before any resume met a compaction. So, in one step no watch can run
        # in: end every watch stream, change the CloneSet after the end, and compact. Every resume now
        # starts before the compacted revision and must get 410 Gone and relist.
        async def relisted_after_gone() -> bool:
            text = await stack.get_text("watcher", "/metrics")
            return metric(text, "rollbook_watch_restarts_total", reason="gone") > 0

        if not await relisted_after_gone():
            simcluster.cut_watches()
            cloneset = copy.deepcopy(simcluster.store.get(CLONESETS, "default", NAME))
            cloneset["metadata"].setdefault("annotations", {})["touch"] = "after-the-cut"
            simcluster.store.update(CLONESETS, "default", NAME, cloneset)
            simcluster.compact()
            await wait_for(relisted_after_gone, within=30, what="a relist after 410 Gone")
        await wait_for(five_ready, within=60, what="5 ready pods after the relist")
    finally:
        stop.set()
        await compactor
        simcluster.faults.configure(FaultConfig())
    assert simcluster.faults.injected_errors > 0

    await assert_trail_consistent(stack, stack.settings.database_url)
    watcher_metrics = await stack.get_text("watcher", "/metrics")
    assert metric(watcher_metrics, "rollbook_watch_restarts_total", reason="gone") > 0
    executor_metrics = await stack.get_text("executor", "/metrics")
    assert metric(executor_metrics, "rollbook_actions_applied_total", action="createPod") >= 5
    planner_metrics = await stack.get_text("planner", "/metrics")
    assert metric(planner_metrics, "rollbook_planning_seconds_count") > 0

    for service in SERVICES:
        assert await stack.stop(service) == 0, f"{service} did not exit cleanly on SIGTERM"
