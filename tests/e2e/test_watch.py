"""`rollbook get NS/NAME -w` and `rollbook status` against the four services and a simcluster: the watch
follows a real rollout and ends by itself with the exit code that says how it ended; a rejected spec is
shown with its reason and ends the watch with exit 3."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from services.cli.status import rejection
from services.infra.supervisor import settings_env
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset, with_image
from tests.plugins.stack import Stack, wait_for

# One stack for the module (each test in a namespace of its own): none stops or restarts a service.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("auditor", "watcher", "planner", "executor")
NAME = "sample-data"


async def rollbook(stack: Stack, *args: str) -> tuple[int, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(settings_env(stack.settings), COLUMNS="160")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args,
        cwd=REPO_ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 180)
    return int(process.returncode or 0), output.decode()


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    return shared_cluster


async def five_ready(cluster: Cluster) -> Any:
    pods = await cluster.pods(NAME)
    return pods if len(pods) == 5 and all(is_ready(p) for p in pods.values()) else None


async def test_get_watch_follows_a_rollout_to_its_partition_and_exits_0(
    stack: Stack, cluster: Cluster
) -> None:
    strategy = {
        "type": "InPlaceIfPossible",
        "partition": 2,
        "maxUnavailable": 1,
        "paused": True,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    await stack.ensure(*SERVICES)
    await cluster.create_cloneset(seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy))
    await wait_for(lambda: five_ready(cluster), within=180, what="5 ready pods")
    await cluster.patch_cloneset(
        NAME, with_image(seed_cloneset("cloneset-sample-data.yaml"), "nginx:mainline")
    )

    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(settings_env(stack.settings), COLUMNS="160")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "get", f"{cluster.namespace}/{NAME}", "-w",
        "--timeout", "120", "--interval", "0.3",
        cwd=REPO_ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    seen: list[str] = []
    # Paused, the rollout cannot end: the watch says why it waits (one line per change: not a terminal).
    while not seen or "paused (spec.updateStrategy.paused: true)" not in seen[-1]:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line, "".join(seen)
        seen.append(line)
    assert seen[-1].startswith(f"{cluster.namespace}/{NAME}: updated 0/3"), seen
    await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"paused": False}}})
    rest, _ = await asyncio.wait_for(process.communicate(), 120)
    output = "".join(seen) + rest.decode()
    assert process.returncode == 0, output
    # It ended by itself on the tree of the finished step: 3 pods updated in place, 2 kept by the partition.
    assert "finished (exit 0)" in output
    tree = output[output.index(f"CloneSet {cluster.namespace}/") :]
    assert tree.count(" in place ") == 3, tree
    assert "batch 1" in tree and "partition 2 " in tree
    assert "maxUnavailable 0 in use of 1 allowed" in tree, tree


async def test_a_rejected_spec_is_shown_with_its_reason_and_ends_the_watch(
    stack: Stack, cluster: Cluster
) -> None:
    await stack.ensure(*SERVICES)
    await cluster.create_cloneset(
        seed_cloneset("cloneset-sample-data.yaml", updateStrategy={"partition": "abc%"})
    )

    async def rejected() -> bool:  # read in-process: a CLI process per poll costs seconds on a loaded machine
        return rejection(await cluster.cloneset(NAME)) is not None

    await wait_for(rejected, within=60, what="the CloneSet's Rejected condition")
    code, shown = await rollbook(stack, "status", f"{cluster.namespace}/{NAME}")
    assert code == 0 and "spec rejected:" in shown and "partition" in shown, shown
    code, output = await rollbook(stack, "get", f"{cluster.namespace}/{NAME}", "-w", "--timeout", "60")
    assert code == 3, output
    assert "rejected:" in output and "partition" in output and "spec rejected (exit 3)" in output, output


async def test_get_watch_right_after_a_fixed_spec_waits_for_it_and_exits_0(
    stack: Stack, cluster: Cluster
) -> None:
    """`apply` a spec the planner rejects, then the fixed one, then `get -w` at once (`apply && get -w` in
    CI): the status still says the rejected generation until the planner catches up; the watch must wait
    for the fixed generation and end with the rollout (exit 0), never judge the stale status (exit 3)."""
    await stack.ensure(*SERVICES)
    seed = seed_cloneset("cloneset-sample-data.yaml")
    await cluster.create_cloneset(seed)
    await wait_for(lambda: five_ready(cluster), within=180, what="5 ready pods")
    await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"partition": "abc%"}}})

    async def rejected() -> bool:
        return rejection(await cluster.cloneset(NAME)) is not None

    await wait_for(rejected, within=60, what="the CloneSet's Rejected condition")
    fixed = with_image(seed, "nginx:mainline")
    fixed["spec"]["updateStrategy"] = {"partition": 0, "maxUnavailable": 2}
    await cluster.patch_cloneset(NAME, fixed)
    code, output = await rollbook(stack, "get", f"{cluster.namespace}/{NAME}", "-w", "--timeout", "150")
    assert code == 0, output
    assert "finished (exit 0)" in output and "exit 3" not in output, output
