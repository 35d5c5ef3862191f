"""A CloneSet carrying a 1.2 MB container argument (larger than a NATS message; the API server accepts
it) rolls out like any other: the relay publishes its events by reference and the consumers read them from the
store. An object over the event ceiling is recorded as ObservationRejected; nothing stalls or crashes."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.e2e.test_resilience import metric
from tests.plugins.stack import Stack, wait_for
from tests.reliability.conftest import SERVICES, assert_services_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

CEILING = 2 * 1024 * 1024


def with_bulk(obj: dict[str, Any], name: str, value_bytes: int) -> dict[str, Any]:
    """A container argument of ``value_bytes``: arguments are recorded as they are (an env value would be
    recorded as its 64-character digest, docs/events.md "Redaction", and the observation stay small)."""
    result = copy.deepcopy(obj)
    result["metadata"]["name"] = name
    for container in result["spec"]["template"]["spec"]["containers"]:
        container["args"] = [*container.get("args", []), "x" * value_bytes]
    return result


async def test_a_1_2_mb_object_rolls_out_and_one_over_the_ceiling_is_rejected(
    stack: Stack, cluster: Cluster
) -> None:
    stack.settings = msgspec.structs.replace(stack.settings, max_event_bytes=CEILING)
    await stack.start(*SERVICES)
    strategy = {"type": "InPlaceIfPossible", "maxUnavailable": 1}
    big = with_bulk(
        seed_cloneset("cloneset-sample-data.yaml", replicas=3, updateStrategy=strategy), NAME, 1_200_000
    )
    await cluster.create_cloneset(big)
    too_big = with_bulk(seed_cloneset("cloneset-sample-data.yaml", replicas=2), "too-big", 3 * 1024 * 1024)
    await cluster.create_cloneset(too_big)

    await wait_for(lambda: all_on(cluster, "nginx:alpine", 3), within=90, what="3 ready pods of 1.2 MB")
    await cluster.patch_cloneset(NAME, with_image(big, "nginx:mainline"))
    await wait_for(lambda: all_on(cluster, "nginx:mainline", 3), within=90, what="the 1.2 MB rollout done")

    database_url = stack.settings.database_url

    async def rejection() -> Any:
        rows = await fetch(
            database_url,
            "SELECT payload FROM events WHERE type = 'ObservationRejected' AND stream = $1",
            "CloneSet/default/too-big/observed",
        )
        return rows

    [row] = await wait_for(rejection, within=30, what="ObservationRejected for the object over the ceiling")
    payload = msgspec.json.decode(row["payload"]) if isinstance(row["payload"], str) else row["payload"]
    assert payload["size_bytes"] > CEILING == payload["limit_bytes"]
    assert await cluster.pods("too-big") == {}  # never observed, so never planned

    await assert_trail_consistent(stack, database_url)  # every event published, the big ones by reference
    auditor_metrics = await stack.get_text("auditor", "/metrics")
    assert metric(auditor_metrics, "rollbook_relay_references_total") > 0
    await assert_services_healthy(stack)
