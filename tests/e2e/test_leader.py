"""Two watchers on one stack (docs/services.md, "Running several replicas"): one holds the Lease and
works, the other stands by ready; SIGTERM to the leader hands its Lease to the standby, and the rollout
completes with a consistent audit trail either way. (Planners share the work by partition instead:
tests/e2e/test_partitioned_planners.py.)"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kubernetes_asyncio import client

from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

STRATEGY = {
    "type": "InPlaceIfPossible",
    "maxUnavailable": 1,
    "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
}


# The default Lease timing: the stack's short one (a 3 s renew deadline) can lapse on a loaded machine
# while the leader's loop is busy, and the standby then rightly takes over; the test that asks that only
# one watcher works all along relies on no expiry, so it runs with the timing a cluster runs with.
DEFAULT_TIMING = {
    "ROLLBOOK_LEADER_LEASE_DURATION": "15",
    "ROLLBOOK_LEADER_RENEW_DEADLINE": "10",
    "ROLLBOOK_LEADER_RETRY_PERIOD": "2",
}


async def start_pairs(stack: Stack, env: dict[str, str] | None = None) -> None:
    await stack.start("auditor", "executor")
    # Each pair starts at once: both race to create the Lease.
    await asyncio.gather(stack.start("watcher", env=env), stack.start("watcher", name="watcher-2", env=env))
    await stack.start("planner")


async def holder_name(k8s_client: client.ApiClient, service: str) -> str | None:
    """The process name that holds rollbook-<service>: the supervisor gives each child the identity
    ``<supervisor>/<child name>`` (ROLLBOOK_INSTANCE)."""
    lease = await client.CoordinationV1Api(k8s_client).read_namespaced_lease(f"rollbook-{service}", "default")
    identity = lease.spec.holder_identity if lease.spec else None
    return identity.rsplit("/", 1)[-1] if identity else None


async def leader_and_standby(stack: Stack, k8s_client: client.ApiClient, service: str) -> tuple[str, str]:
    """Process names (e.g. "planner", "planner-2") of the Lease holder and of the other one."""
    holder = await holder_name(k8s_client, service)
    names = [service, f"{service}-2"]
    assert holder in names, f"the {service} Lease names {holder}, none of {names}"
    return holder, next(n for n in names if n != holder)


def logged(stack: Stack, name: str, event: str) -> int:
    """How many JSON log lines of process ``name`` have this event."""
    count = 0
    for line in (stack.log_dir / f"{name}.log").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        count += isinstance(record, dict) and record.get("event") == event
    return count


async def leader_gauge(stack: Stack, name: str, service: str) -> float:
    metrics = await stack.get_text(name, "/metrics")
    prefix = f'rollbook_leader{{service="{service}"}} '
    return float(next(line for line in metrics.splitlines() if line.startswith(prefix))[len(prefix) :])


async def outcomes(database_url: str) -> int:
    rows = await fetch(database_url, "SELECT count(*) FROM events WHERE type = 'PodActionSucceeded'")
    return int(rows[0][0])


async def test_one_watcher_of_two_works(stack: Stack, cluster: Cluster, k8s_client: client.ApiClient) -> None:
    await start_pairs(stack, env=DEFAULT_TIMING)
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=STRATEGY)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine"), within=60, what="5 ready pods")
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    await wait_for(lambda: all_on(cluster, "nginx:mainline"), within=90, what="rollout done")

    for service, acted in (("watcher", "observed"),):
        leader, standby = await leader_and_standby(stack, k8s_client, service)
        assert logged(stack, leader, acted) > 0
        assert logged(stack, standby, acted) == 0, f"the standby {service} {acted} too"
        assert logged(stack, leader, "leader_acquired") == 1
        assert logged(stack, standby, "leader_acquired") == 0
        assert await leader_gauge(stack, leader, service) == 1.0
        assert await leader_gauge(stack, standby, service) == 0.0
        ready = await stack.get_json(standby, "/readyz")  # 200: a standby is ready (able to take over)
        assert ready["details"]["leader"]["leading"] is False
        assert ready["details"]["leader"]["holder"].rsplit("/", 1)[-1] == leader
    await assert_trail_consistent(stack, stack.settings.database_url)
    assert stack.dead() == []


async def test_sigterm_to_the_leading_watcher_mid_rollout_hands_over_to_the_standby(
    stack: Stack, cluster: Cluster, k8s_client: client.ApiClient
) -> None:
    await start_pairs(stack)
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=STRATEGY)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine"), within=60, what="5 ready pods")
    database_url = stack.settings.database_url
    before = await outcomes(database_url)
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))

    async def progressed() -> bool:
        return await outcomes(database_url) > before

    await wait_for(progressed, within=60, what="rollout progress before stopping the leaders")
    new_leaders: dict[str, str] = {}
    for service in ("watcher",):
        leader, standby = await leader_and_standby(stack, k8s_client, service)
        sent = time.monotonic()
        assert await stack.stop(leader) == 0, f"the leading {service} did not exit cleanly on SIGTERM"

        async def taken_over(service: str = service, standby: str = standby) -> bool:
            return await holder_name(k8s_client, service) == standby

        await wait_for(taken_over, within=15, interval=0.05, what=f"the standby {service} holding the Lease")
        print(
            f"{service} failover (SIGTERM to the standby holding the Lease): {time.monotonic() - sent:.2f}s"
        )
        assert logged(stack, leader, "leader_released") == 1

        async def reports_leading(standby: str = standby, service: str = service) -> bool:
            # The Lease names the standby a moment before it logs and flags it: wait for both.
            return (
                logged(stack, standby, "leader_acquired") == 1
                and await leader_gauge(stack, standby, service) == 1.0
            )

        await wait_for(reports_leading, within=10, what=f"the standby {service} reporting it leads")
        new_leaders[service] = standby

    await wait_for(
        lambda: all_on(cluster, "nginx:mainline"), within=90, what="rollout done after the handover"
    )
    assert logged(stack, new_leaders["watcher"], "observed") > 0  # it took over the rollout
    await assert_trail_consistent(stack, database_url)
    assert stack.dead() == []


async def test_a_killed_watcher_started_again_in_its_slot_takes_its_lease_back_at_once(
    stack: Stack, k8s_client: client.ApiClient
) -> None:
    # A 60 s Lease: the restarted watcher leads within the bound only by recognising the Lease as its own
    # (the supervisor gives every restart of the child "watcher" the same ROLLBOOK_INSTANCE).
    timing = {
        "ROLLBOOK_LEADER_LEASE_DURATION": "60",
        "ROLLBOOK_LEADER_RENEW_DEADLINE": "40",
        "ROLLBOOK_LEADER_RETRY_PERIOD": "1",
    }
    await stack.start("watcher", env=timing)

    async def acquired(times: int) -> bool:
        return logged(stack, "watcher", "leader_acquired") == times

    await wait_for(lambda: acquired(1), within=30, what="the watcher leading")
    holder = await holder_name(k8s_client, "watcher")
    assert holder == "watcher"

    await stack.kill("watcher")  # SIGKILL: nothing released, the Lease stays held for 60 s
    await stack.start("watcher", env=timing)
    await wait_for(lambda: acquired(2), within=30, what="the restarted watcher leading again")
    assert await holder_name(k8s_client, "watcher") == "watcher"
