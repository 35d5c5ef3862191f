"""A planning round interrupted by the store going away (Postgres restarting between the fold and the
append of the decisions) decides when its handler is tried again, although there is nothing new to fold
by then: the workload does not wait for a timer to plan the round it lost."""

from __future__ import annotations

import uuid
from typing import Any, cast

import asyncpg
import pytest

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds import registry
from services.planner.kinds import CLONESET
from services.planner.service import Planner
from services.watcher.objects import observation
from tests.e2e.cluster import seed_cloneset

pytestmark = pytest.mark.asyncio(loop_scope="session")


class StoreDownOnFirstAppend:
    """The event store, except that the first append fails as during a Postgres restart."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.failed = False

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise asyncpg.CannotConnectNowError("the database system is starting up")
        return await self.store.append(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_round_interrupted_before_its_append_decides_on_the_retry(
    settings: Settings, event_store: EventStore
) -> None:
    name = f"web-{uuid.uuid4().hex[:8]}"
    cloneset = seed_cloneset("cloneset-sample.yaml", replicas=2)
    cloneset["metadata"].update(namespace="default", name=name, uid=str(uuid.uuid4()), resourceVersion="1")
    cloneset["metadata"]["generation"] = 1
    observed = observation(
        "CloneSet",
        cloneset,
        "ADDED",
        stream=registry.CLONESET.observed_stream("default", name),
        correlation_id=None,
    )
    await event_store.append([observed], expected_version=None)
    flaky = StoreDownOnFirstAppend(event_store)
    planner = Planner(settings, cast(EventStore, flaky))
    workload = planner.workload(CLONESET, f"default/{name}")

    # The first attempt folds the observation, then its append fails; the retry finds nothing new to fold.
    await planner._round_waiting_out_outages(workload, [], [], False)
    assert flaky.failed
    decided = [
        e.envelope.type
        for e in await event_store.read_stream(registry.CLONESET.decisions_stream("default", name))
    ]
    assert decided[0] == "RoundPlanned"
    assert decided.count("PodActionRequested") >= 2  # the two pods, planned without waiting for a timer
