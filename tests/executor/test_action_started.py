"""When the executor took an action is on record, for the trail's queueing delay (pod_actions.queued): an
action completed within one delivery carries it in its outcome (``started_at``, ``executor``) and stores
no PodActionStarted; an action that has to wait (the API answers an error to retry, or it goes back to the
bus) stores one PodActionStarted as soon as it starts waiting, so an action in hand during an API outage
shows in the trail, once however often the action is delivered."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import (
    Envelope,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    new_event,
)
from services.model.streams import derived_id
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


def create_pod(workload: str) -> tuple[Envelope, PodActionRequested]:
    pod = f"{workload}-0"
    request = PodActionRequested(
        action_id=str(derived_id("test-action", workload)),
        action="createPod",
        namespace="default",
        pod=pod,
        details={
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "namespace": "default", "labels": {"app": workload}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            }
        },
    )
    envelope = new_event(
        request,
        stream=CLONESET.decisions_stream("default", workload),
        stream_version=7,
        occurred_at=datetime.now(UTC),
        event_id=uuid.uuid4(),
        correlation_id=f"default/{workload}@{workload}-abc",
    )
    return envelope, request


def executor(settings: Settings, store: EventStore, api: client.ApiClient, name: str) -> Executor:
    taker = Executor(settings, store, api)
    taker.name = name
    return taker


async def test_an_action_completed_in_one_delivery_carries_when_it_was_taken_in_its_outcome(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request = create_pod(workload)

    await executor(settings, event_store, k8s_client, "executor-a").execute(envelope, request)

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    assert [e.type for e in stored] == ["PodActionSucceeded"]  # no PodActionStarted row of its own
    outcome = stored[0]
    assert isinstance(outcome.payload, PodActionSucceeded) and outcome.payload.executor == "executor-a"
    assert outcome.payload.started_at is not None
    assert envelope.occurred_at <= outcome.payload.started_at <= outcome.occurred_at


async def test_an_action_waiting_on_api_retries_shows_as_taken_before_its_outcome(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request = create_pod(workload)
    stream = CLONESET.actions_stream("default", workload)

    async def stored_types() -> list[str]:
        return [s.envelope.type for s in await event_store.read_stream(stream)]

    # The API server fails every write: the executor retries, and the trail shows the action in hand.
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(500,)))
    try:
        running = asyncio.create_task(
            executor(settings, event_store, k8s_client, "executor-a").execute(envelope, request)
        )
        assert await wait_for(stored_types, within=5.0, what="PodActionStarted") == ["PodActionStarted"]
    finally:
        simcluster.set_faults(FaultConfig())
    await running  # the outage is over: a retry creates the pod

    stored = [s.envelope for s in await event_store.read_stream(stream)]
    assert [e.type for e in stored] == ["PodActionStarted", "PodActionSucceeded"]
    started, outcome = stored
    assert started.payload == PodActionStarted(action_id=request.action_id, executor="executor-a")
    assert isinstance(outcome.payload, PodActionSucceeded) and outcome.payload.executor == "executor-a"
    # The same taking: PodActionStarted records the moment the outcome says the action was taken.
    assert started.occurred_at == outcome.payload.started_at


async def test_a_redelivered_action_is_recorded_started_once_before_its_outcome(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request = create_pod(workload)
    first = executor(settings, event_store, k8s_client, "executor-a")
    second = executor(settings, event_store, k8s_client, "executor-b")

    # The first delivery: taken, then the API server fails the create until the retries run out; the
    # bus will deliver it again.
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(500,)))
    try:
        with pytest.raises(ApiException):
            await first.execute(envelope, request)
    finally:
        simcluster.set_faults(FaultConfig())
    # The redelivery goes to another executor, which takes it and creates the pod; a third delivery, after
    # the outcome, is acknowledged without a word.
    await second.execute(envelope, request)
    await second.execute(envelope, request)

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    assert [e.type for e in stored] == ["PodActionStarted", "PodActionSucceeded"]
    started, outcome = stored
    assert started.payload == PodActionStarted(action_id=request.action_id, executor="executor-a")
    assert started.event_id == derived_id("started", request.action_id)
    assert (started.causation_id, started.correlation_id) == (envelope.event_id, envelope.correlation_id)
    assert isinstance(outcome.payload, PodActionSucceeded) and not outcome.payload.already_applied
    # The first taker's record stands; the outcome says who completed it, and when that one took it.
    assert outcome.payload.executor == "executor-b"
    assert outcome.payload.started_at is not None
    assert started.occurred_at <= outcome.payload.started_at <= outcome.occurred_at


async def test_an_action_given_back_to_the_bus_without_a_retry_shows_as_taken(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request = create_pod(workload)
    # 429 with a Retry-After past the executor's retry budget: no retry here, the action goes back to the
    # bus at once; until its redelivery the trail shows it in hand, not merely requested.
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(429,), retry_after_seconds=60))
    try:
        with pytest.raises(ApiException):
            await executor(settings, event_store, k8s_client, "executor-a").execute(envelope, request)
    finally:
        simcluster.set_faults(FaultConfig())

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    assert [e.payload for e in stored] == [
        PodActionStarted(action_id=request.action_id, executor="executor-a")
    ]


async def test_an_action_whose_taking_cannot_be_recorded_still_retries_and_succeeds(
    settings: Settings,
    event_store: EventStore,
    simcluster: SimCluster,
    k8s_client: client.ApiClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request = create_pod(workload)
    taker = executor(settings, event_store, k8s_client, "executor-a")
    report = taker._report
    refused: list[str] = []

    async def store_refuses_started(envelope: Envelope, outcome: object, **kwargs: object) -> None:
        # The store refuses the informational PodActionStarted (as during a database outage); the
        # outcome still goes through.
        if isinstance(outcome, PodActionStarted):
            refused.append(outcome.action_id)
            raise ConnectionRefusedError("the database is restarting")
        await report(envelope, outcome, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(taker, "_report", store_refuses_started)
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(500,)))
    try:
        running = asyncio.create_task(taker.execute(envelope, request))

        async def refused_once() -> bool:
            return bool(refused)

        await wait_for(refused_once, within=5.0, what="the first retry")
    finally:
        simcluster.set_faults(FaultConfig())
    await running

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    # Not a failure with the database's error as its reason: the API retries went on and succeeded.
    assert [e.type for e in stored] == ["PodActionSucceeded"]
