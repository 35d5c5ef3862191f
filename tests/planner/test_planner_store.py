"""The planner's store connections: the rounds of many workloads catch up at once, and the connections
they share stay open between bursts of rounds, instead of being opened for a burst and closed after it
(each a connect, a type introspection of every statement and a Postgres backend)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from sqlalchemy import event

from services.infra.settings import Settings
from services.planner.kinds import CLONESET
from services.planner.service import STORE_CONNECTIONS, catch_up, connect_store

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_bursts_of_rounds_reuse_the_planners_connections(settings: Settings, database_url: str) -> None:
    store = await connect_store(msgspec.structs.replace(settings, database_url=database_url))
    opened: list[object] = []
    event.listen(store.engine.sync_engine, "connect", lambda connection, record: opened.append(connection))
    try:
        for burst in range(3):  # e.g. a rollout's waves: every workload woken at once, then quiet
            states = [CLONESET.new_state(f"default/burst-{burst}-{i}") for i in range(4 * STORE_CONNECTIONS)]
            await asyncio.gather(*(catch_up(store, state) for state in states))
        assert len(opened) <= STORE_CONNECTIONS
    finally:
        await store.close()
