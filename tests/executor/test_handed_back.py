"""An action an executor gave back to the bus makes the later actions of its pod go back too, at once;
but its redelivery may go to another executor or be dead-lettered. On its last delivery the later action
waits for the earlier one's outcome instead of being reported failed, and the executor forgets an action
once its outcome is seen or after a while, so what it remembers stays bounded."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kubernetes_asyncio import client

from services.executor.handed_back import HandedBack
from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import PodActionFailed, PodActionSucceeded
from services.simcluster import SimCluster
from tests.executor.test_concurrency import Delivery, action_id, mark_handed_back
from tests.plugins.stack import wait_for


@pytest.mark.parametrize(
    ("steps", "asked", "now", "expected"),
    [
        ([("add", "a", 0.0)], ["a", "b"], 5.0, ["a"]),
        ([("add", "a", 0.0)], ["a"], 10.0, []),  # expired
        ([("add", "a", 0.0), ("add", "b", 8.0)], ["a", "b"], 12.0, ["b"]),
        ([("add", "a", 0.0), ("add", "a", 8.0)], ["a"], 12.0, ["a"]),  # handed back again: a new time
        ([("add", "a", 0.0), ("add", "b", 1.0), ("discard", "a", 2.0)], ["a", "b"], 3.0, ["b"]),
        ([("discard", "a", 0.0)], ["a"], 1.0, []),
    ],
)
def test_handed_back_actions_are_remembered_until_discarded_or_expired(
    steps: list[tuple[str, str, float]], asked: list[str], now: float, expected: list[str]
) -> None:
    handed_back = HandedBack(ttl=10.0)
    for step, action, at in steps:
        if step == "add":
            handed_back.add(action, at)
        else:
            handed_back.discard([action])
    assert handed_back.among(asked, now) == expected


def test_expired_entries_are_dropped_as_new_ones_come() -> None:
    handed_back = HandedBack(ttl=10.0)
    for second in range(1000):
        handed_back.add(f"action-{second}", float(second))
    assert len(handed_back) == 10


@pytest.mark.asyncio(loop_scope="session")
async def test_on_its_last_delivery_an_action_waits_for_an_earlier_one_handed_back_elsewhere(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient, simcluster: SimCluster
) -> None:
    # markNotReady fails here and goes back to the bus; its redelivery goes to another executor.
    # updateInPlace, on its last delivery here, waits for that outcome instead of being reported failed.
    workload = f"last{uuid.uuid4().hex[:10]}"
    here, mark, update = await mark_handed_back(settings, event_store, k8s_client, simcluster, workload)
    elsewhere = Executor(settings, event_store, k8s_client)
    assert here.handed_back.among([action_id(mark)], time.monotonic()) == [action_id(mark)]

    looks: list[list[str]] = []
    without_outcome = here._without_outcome

    async def looking(action_ids: list[str]) -> list[str]:
        looks.append(action_ids)
        return await without_outcome(action_ids)

    here._without_outcome = looking  # type: ignore[method-assign]
    last = asyncio.create_task(here.handle(update, Delivery(settings.max_deliver, update)))  # type: ignore[arg-type]

    async def polling_or_done() -> bool:
        return len(looks) >= 2 or last.done()

    await wait_for(polling_or_done, interval=0.01, what="updateInPlace waiting for markNotReady")
    await elsewhere.handle(mark, Delivery(2, mark))  # type: ignore[arg-type]
    await asyncio.wait_for(last, timeout=30)

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    outcomes = {action_id(e): type(e.payload) for e in stored if e.type != "PodActionStarted"}
    assert outcomes == {action_id(mark): PodActionSucceeded, action_id(update): PodActionSucceeded}, [
        (e.type, getattr(e.payload, "reason", "")) for e in stored
    ]
    assert PodActionFailed not in outcomes.values()
    assert len(here.handed_back) == 0  # markNotReady's outcome was seen: forgotten
