"""Several planners share the bus partitions (docs/services.md, "Running several replicas"): each partition
is owned by one planner at a time through its Lease, a replica owns at most ceil(partitions / live
replicas), a joining planner is handed the excess, a killed one's partitions are taken over once their
Leases expire, and no workload is planned by two planners: the rollout completes with the audit
invariants intact (one terminal event per action, maxUnavailable never exceeded, verify clean)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from services.infra.bus import partition_of
from tests.e2e.audit import fetch, min_available_during_rollout
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

STRATEGY = {
    "type": "InPlaceIfPossible",
    "maxUnavailable": 1,
    "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
}


def log_lines(stack: Stack, name: str) -> list[dict[str, Any]]:
    records = []
    for line in (stack.log_dir / f"{name}.log").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def planned(stack: Stack, name: str, workload: str) -> list[dict[str, Any]]:
    """The rounds process ``name`` recorded for ``workload`` (CloneSet/<namespace>/<name>), in order."""
    return [
        r for r in log_lines(stack, name) if r.get("event") == "planned" and r.get("workload") == workload
    ]


async def owned(stack: Stack, name: str) -> set[int]:
    ready = await stack.get_json(name, "/readyz")
    return set(ready["details"]["partitions"]["owned"])


async def split(stack: Stack, names: list[str]) -> dict[str, set[int]]:
    """Wait until the planners ``names`` own every partition between them, disjointly, at most their fair
    share each (and for one planner: all of them); returns who owns what."""
    partitions = stack.settings.bus_partitions
    share = -(-partitions // len(names))

    async def shared() -> dict[str, set[int]] | None:
        owners = {n: await owned(stack, n) for n in names}
        together = [p for ps in owners.values() for p in ps]
        if sorted(together) == list(range(partitions)) and all(len(ps) <= share for ps in owners.values()):
            return owners
        return None

    result: dict[str, set[int]] = await wait_for(shared, within=20, what=f"{names} sharing the partitions")
    return result


def small_cloneset(name: str, replicas: int = 2) -> dict[str, Any]:
    obj = seed_cloneset("cloneset-sample-data.yaml", replicas=replicas)
    obj = copy.deepcopy(obj)
    obj["metadata"] = {"name": name, "labels": {"app": name}}
    obj["spec"]["selector"] = {"matchLabels": {"app": name}}
    obj["spec"]["template"]["metadata"] = {"labels": {"app": name}}
    obj["spec"].pop("volumeClaimTemplates", None)
    for container in obj["spec"]["template"]["spec"]["containers"]:
        container.pop("volumeMounts", None)
    return obj


def workload(name: str) -> str:
    return f"CloneSet/default/{name}"


async def start_with_two_planners(stack: Stack) -> None:
    await stack.start("auditor", "executor", "watcher")
    # Both at once: they race for the partitions, then share them out.
    await asyncio.gather(stack.start("planner"), stack.start("planner", name="planner-2"))


async def outcomes(database_url: str) -> int:
    rows = await fetch(database_url, "SELECT count(*) FROM events WHERE type = 'PodActionSucceeded'")
    return int(rows[0][0])


async def start_rollout(stack: Stack, cluster: Cluster, partition: int = 0) -> dict[str, Any]:
    """sample-data, 5 pods, ready; then a new image (held at ``partition`` old pods), returned once the first
    pod action of it succeeded."""
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=STRATEGY)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine"), within=60, what="5 ready pods")
    before = await outcomes(stack.settings.database_url)
    patch = with_image(seed, "nginx:mainline")
    patch["spec"]["updateStrategy"] = {**STRATEGY, "partition": partition}
    await cluster.patch_cloneset(NAME, patch)

    async def progressed() -> bool:
        return await outcomes(stack.settings.database_url) > before

    await wait_for(progressed, within=30, interval=0.05, what="the rollout under way")
    return seed


async def finish_rollout(stack: Stack, cluster: Cluster) -> None:
    status = await wait_for(lambda: all_on(cluster, "nginx:mainline"), within=60, what="rollout done")
    database_url = stack.settings.database_url
    assert await min_available_during_rollout(database_url, "default", NAME, status["updateRevision"]) >= 4
    await assert_trail_consistent(stack, database_url)


async def test_two_planners_split_the_partitions_and_both_plan(stack: Stack, cluster: Cluster) -> None:
    await start_with_two_planners(stack)
    owners = await split(stack, ["planner", "planner-2"])
    assert all(owners.values()), owners  # both own some

    # One small CloneSet in a partition of each planner.
    partitions = stack.settings.bus_partitions
    names = [f"split-{i}" for i in range(64)]
    chosen = {
        planner: next(n for n in names if partition_of(workload(n), partitions) in ps)
        for planner, ps in owners.items()
    }
    for name in chosen.values():
        await cluster.create_cloneset(small_cloneset(name))

    async def all_ready() -> bool:
        for name in chosen.values():
            pods = await cluster.pods(name)
            if len(pods) != 2 or not all(is_ready(p) for p in pods.values()):
                return False
        return True

    await wait_for(all_ready, within=40, what="both CloneSets' pods ready")
    for planner, name in chosen.items():
        other = next(p for p in owners if p != planner)
        assert planned(stack, planner, workload(name)), f"{planner} did not plan {name}"
        assert planned(stack, other, workload(name)) == [], f"{other} planned {name} it does not own"
    assert await split(stack, ["planner", "planner-2"]) == owners  # nothing moved meanwhile
    assert stack.dead() == []


async def test_a_killed_planners_partitions_are_taken_over_and_the_rollout_completes(
    stack: Stack, cluster: Cluster
) -> None:
    await start_with_two_planners(stack)
    owners = await split(stack, ["planner", "planner-2"])
    partition = partition_of(workload(NAME), stack.settings.bus_partitions)
    await start_rollout(stack, cluster)

    owner = next(n for n, ps in owners.items() if partition in ps)
    survivor = next(n for n in owners if n != owner)
    await stack.kill(owner)  # no hand-over: its Leases must expire
    taken = len(log_lines(stack, survivor))
    await split(stack, [survivor])
    await finish_rollout(stack, cluster)
    # The survivor took the workload over and planned the rest of its rollout.
    assert any(
        r.get("event") == "planned" and r.get("workload") == workload(NAME)
        for r in log_lines(stack, survivor)[taken:]
    )
    assert stack.dead() == []


async def test_a_joining_planner_takes_over_a_workload_mid_rollout(stack: Stack, cluster: Cluster) -> None:
    await stack.start("auditor", "executor", "watcher", "planner")
    await split(stack, ["planner"])
    partition = partition_of(workload(NAME), stack.settings.bus_partitions)
    # The first planner keeps its lowest-numbered partitions and hands over the rest.
    assert partition >= stack.settings.bus_partitions // 2, "sample-data must be in a handed-over partition"
    # The CloneSet partition holds 3 pods on the old revision, so that however slow the hand-over is, the
    # newcomer has pods left to update once it is lowered.
    await start_rollout(stack, cluster, partition=3)

    await stack.start("planner", name="planner-2")
    owners = await split(stack, ["planner", "planner-2"])
    assert partition in owners["planner-2"]
    await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"partition": 0}}})
    await finish_rollout(stack, cluster)

    # The hand-over was mid-rollout: the newcomer requested pod actions for it; the first planner planned
    # nothing for it after handing its partition over (its Lease released: a round in hand when the
    # hand-over began finishes before the partition's work stops), the newcomer nothing before taking it.
    first = log_lines(stack, "planner")
    released = next(
        i
        for i, r in enumerate(first)
        if r.get("event") == "leader_released"
        and r.get("lease") == f"{stack.settings.leader_election_namespace}/rollbook-planner-p{partition}"
    )
    assert [
        r for r in first[released:] if r.get("event") == "planned" and r.get("workload") == workload(NAME)
    ] == []
    second = log_lines(stack, "planner-2")
    acquired = next(
        i
        for i, r in enumerate(second)
        if r.get("event") == "partition_acquired" and r.get("partition") == partition
    )
    assert planned(stack, "planner-2", workload(NAME)), "the newcomer planned nothing for the rollout"
    assert [r for r in second[:acquired] if r.get("workload") == workload(NAME)] == []
    assert any(r["actions"] for r in planned(stack, "planner-2", workload(NAME)))
    assert stack.dead() == []
