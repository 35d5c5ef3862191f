"""Postgres restarted (immediate stop, crash recovery) in the middle of a rollout: every service waits it
out, none dies, the rollout completes, and every event stored before, during and after reaches the bus."""

from __future__ import annotations

from typing import Any

import pytest

from services.infra.embedded import EmbeddedServers
from tests.plugins.stack import Stack, wait_for
from tests.reliability.conftest import RolloutUnderWay

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


async def test_rollout_completes_through_a_postgres_restart(
    rollout_under_way: RolloutUnderWay, restartable_postgres: EmbeddedServers
) -> None:
    stack = rollout_under_way.stack
    await restartable_postgres.stop_postgres(immediate=True)

    async def relay_waiting() -> Any:
        readiness = await _readyz(stack, "auditor")
        return (readiness.get("details") or {}).get("relay", {}).get("retrying")

    await wait_for(relay_waiting, within=30, what="the auditor's relay noticed Postgres is gone")
    await restartable_postgres.start_postgres()

    await rollout_under_way.assert_finished_in_place_once()
    assert (await _readyz(stack, "auditor"))["details"]["relay"]["retrying"] is None


async def _readyz(stack: Stack, service: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(stack.children[service].base_url + "/readyz") as response:
            body: dict[str, Any] = await response.json()
            return body
