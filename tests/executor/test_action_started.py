"""The executor records when it takes an action (PodActionStarted), once per action however often the
action is delivered: the trail's queueing delay (pod_actions.queued) must not count a redelivery twice."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import (
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    new_event,
)
from services.model.streams import actions_stream, decisions_stream, derived_id
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_redelivered_action_is_recorded_started_once_before_its_outcome(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
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
        stream=decisions_stream("default", workload),
        stream_version=7,
        occurred_at=datetime.now(UTC),
        event_id=uuid.uuid4(),
        correlation_id=f"default/{workload}@{workload}-abc",
    )
    first = Executor(settings, event_store, k8s_client)
    first.name = "executor-a"
    second = Executor(settings, event_store, k8s_client)
    second.name = "executor-b"

    # The first delivery: taken, then the API server fails the create; the bus will deliver it again.
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(500,)))
    with pytest.raises(ApiException):
        await first.execute(envelope, request)
    simcluster.set_faults(FaultConfig())
    # The redelivery goes to another executor, which takes it and creates the pod; a third delivery, after
    # the outcome, is acknowledged without a word.
    await second.execute(envelope, request)
    await second.execute(envelope, request)

    stored = [s.envelope for s in await event_store.read_stream(actions_stream("default", workload))]
    assert [e.type for e in stored] == ["PodActionStarted", "PodActionSucceeded"]
    started, outcome = stored
    assert started.payload == PodActionStarted(action_id=request.action_id, executor="executor-a")
    assert started.event_id == derived_id("started", request.action_id)
    assert (started.causation_id, started.correlation_id) == (envelope.event_id, envelope.correlation_id)
    assert isinstance(outcome.payload, PodActionSucceeded) and not outcome.payload.already_applied
    assert started.occurred_at <= outcome.occurred_at
