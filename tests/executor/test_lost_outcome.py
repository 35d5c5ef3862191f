"""An earlier action of a round whose outcome the store lost for good (an asynchronous failover) does not
hold its pod: its action id on the pod says it was carried out, so the next action of the round goes on
within seconds, and the earlier one gets its outcome as found on the pod, so that a later delivery of it
is not carried out again over the action after it."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio import client

from services.executor.service import Executor
from services.executor.settled import found_on_pod
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import PodActionSucceeded
from services.model.streams import ACTION_ID_ANNOTATION
from tests.executor.test_concurrency import Delivery, action_id, planned_round


@pytest.mark.parametrize(
    ("round_actions", "pending", "on_pod", "expected"),
    [
        (["a", "b"], ["a"], None, (None, ["a"])),  # nothing on the pod: wait
        (["a", "b"], ["a"], "other-round", (None, ["a"])),  # another round's action: wait
        (["a", "b"], ["a"], "a", ("a", [])),  # the earlier one was carried out
        (["a", "b", "c"], ["a", "b"], "a", ("a", ["b"])),  # the next one still to wait for
        (["a", "b", "c"], ["a", "b"], "b", ("b", [])),  # "a" had an outcome before "b" ran
        (["a", "b", "c"], ["a"], "b", (None, [])),  # "b" has its outcome stored: nothing to record
        (["a", "b"], ["a"], "b", (None, [])),  # the waiting one itself applied: "a" ran before it
    ],
)
def test_the_action_id_on_the_pod_settles_the_actions_up_to_it(
    round_actions: list[str],
    pending: list[str],
    on_pod: str | None,
    expected: tuple[str | None, list[str]],
) -> None:
    assert found_on_pod(round_actions, pending, on_pod) == expected


@pytest.mark.asyncio(loop_scope="session")
async def test_an_earlier_action_whose_outcome_was_lost_does_not_hold_the_next_one(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    workload = f"lost{uuid.uuid4().hex[:10]}"
    pod = f"{workload}-0"
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod},
            "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
        },
    )
    envelopes = planned_round(workload, [pod])
    await event_store.append(envelopes, expected_version=0)
    mark, update = envelopes[1:]
    # markNotReady carried out, its PodActionSucceeded gone with the old primary: the pod carries its id,
    # the store has no outcome for it.
    await Executor(settings, event_store, k8s_client).apply(mark.payload)  # type: ignore[arg-type]

    # The executor (a new process) takes updateInPlace: it goes on, within this one delivery (it used to
    # wait 20 s and go back to the bus, delivery after delivery).
    executor = Executor(settings, event_store, k8s_client)
    await executor.handle(update, Delivery(1, update))  # type: ignore[arg-type]

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    outcomes = {action_id(e): e.payload for e in stored if e.type != "PodActionStarted"}
    assert set(outcomes) == {action_id(mark), action_id(update)}, [e.type for e in stored]
    # Each outcome is caused by its own action's request (the audit names a lost one's pod from it).
    causes = {action_id(e): e.causation_id for e in stored if e.type != "PodActionStarted"}
    assert causes == {action_id(mark): mark.event_id, action_id(update): update.event_id}
    found, applied = outcomes[action_id(mark)], outcomes[action_id(update)]
    assert isinstance(found, PodActionSucceeded) and found.already_applied and found.started_at is None
    assert isinstance(applied, PodActionSucceeded) and not applied.already_applied
    updated = await core.read_namespaced_pod(pod, "default")
    assert updated.spec.containers[0].image == "nginx:mainline"
    assert updated.metadata.annotations[ACTION_ID_ANNOTATION] == action_id(update)

    # markNotReady delivered again (the bus, or a relay publishing it again): reported, not applied again
    # over updateInPlace.
    await Executor(settings, event_store, k8s_client).handle(mark, Delivery(2, mark))  # type: ignore[arg-type]
    again = await core.read_namespaced_pod(pod, "default")
    assert again.metadata.resource_version == updated.metadata.resource_version
    assert again.metadata.annotations[ACTION_ID_ANNOTATION] == action_id(update)
