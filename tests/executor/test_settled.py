"""An executor remembers which actions have a stored terminal outcome, so the next action of a pod it
just ran need not ask the store; only a stored outcome counts (an action merely started, or given back
to the bus, still holds the later actions of its pod), and what it remembers stays bounded."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio import client

from services.executor.settled import Settled
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.simcluster import SimCluster
from tests.executor.test_concurrency import Delivery, action_id, mark_handed_back


@pytest.mark.parametrize(
    ("added", "asked", "expected"),
    [
        ([], ["a", "b"], ["a", "b"]),
        (["a"], ["a", "b"], ["b"]),
        (["b", "a"], ["c", "a", "d"], ["c", "d"]),
        (["a", "b", "c", "d"], ["a", "b", "c", "d"], ["a"]),  # capacity 3: the oldest is forgotten
        (["a", "b", "c", "a", "d"], ["a", "b"], ["a"]),  # added again: it keeps its first place
    ],
)
def test_settled_actions_are_remembered_up_to_the_capacity(
    added: list[str], asked: list[str], expected: list[str]
) -> None:
    settled = Settled(capacity=3)
    settled.add(added)
    assert settled.unknown(asked) == expected
    assert len(settled) <= 3


@pytest.mark.asyncio(loop_scope="session")
async def test_only_a_stored_outcome_settles_an_earlier_action(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient, simcluster: SimCluster
) -> None:
    # markNotReady was taken (PodActionStarted stored) and went back to the bus: not settled, so the
    # updateInPlace after it still has it pending.
    workload = f"settled{uuid.uuid4().hex[:10]}"
    executor, mark, update = await mark_handed_back(settings, event_store, k8s_client, simcluster, workload)
    assert executor.settled.unknown([action_id(mark)]) == [action_id(mark)]
    assert await executor.earlier_actions_pending(update, update.payload) == [action_id(mark)]  # type: ignore[arg-type]
    # Redelivered, it succeeds here: settled without asking the store again, and updateInPlace runs.
    await executor.handle(mark, Delivery(2, mark))  # type: ignore[arg-type]
    assert executor.settled.unknown([action_id(mark)]) == []
    assert await executor.earlier_actions_pending(update, update.payload) == []  # type: ignore[arg-type]
    await executor.handle(update, Delivery(1, update))  # type: ignore[arg-type]
    assert executor.settled.unknown([action_id(update)]) == []
