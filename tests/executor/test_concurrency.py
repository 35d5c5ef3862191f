"""Two executors, each carrying out many pod actions at once, from one shared durable: different pods in
parallel, one pod's actions in the order they were planned and never overlapping (markNotReady before
updateInPlace, even when the two are handed to different executors), exactly one outcome per action."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.service import EARLIER_ACTION_WAIT, EarlierActionPending, Executor
from services.infra.bus import Bus
from services.infra.consumer_service import serve_consumers
from services.infra.runtime import ServiceRuntime
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET, RequestedAction
from services.model.events import Envelope, PodActionRequested, RoundPlanned, encode, new_event
from services.model.streams import derived_id
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

PODS = 12
NOT_READY = {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}


class RecordingExecutor(Executor):
    """Records the start and end of each action it applies; its API calls take a random while."""

    def __init__(self, *args: Any, log: list[tuple[str, str, str]], rng: random.Random) -> None:
        super().__init__(*args)
        self.log = log
        self.rng = rng
        self.running = 0
        self.most_running = 0

    async def apply(
        self, request: PodActionRequested, action: RequestedAction | None = None
    ) -> tuple[str | None, bool]:
        self.log.append(("start", request.pod, request.action))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.rng.uniform(0, 0.03))  # a slow API server, unevenly slow
            return await super().apply(request, action)
        finally:
            self.running -= 1
            self.log.append(("end", request.pod, request.action))


def planned_round(workload: str, pods: list[str]) -> list[Envelope]:
    """One round as the planner appends it: RoundPlanned, then markNotReady and updateInPlace per pod."""
    stream = CLONESET.decisions_stream("default", workload)
    round_id = uuid.uuid4()
    now = datetime.now(UTC)
    envelopes = [
        new_event(
            RoundPlanned(through={}, now=now, input_sha256="0" * 64, rules=1),
            stream=stream,
            stream_version=1,
            occurred_at=now,
            event_id=round_id,
        )
    ]
    requests: list[PodActionRequested] = []
    for pod in pods:
        requests.append(
            PodActionRequested(
                action_id=str(derived_id("decision", round_id, len(requests))),
                action="markNotReady",
                namespace="default",
                pod=pod,
                details={"condition": NOT_READY},
            )
        )
        requests.append(
            PodActionRequested(
                action_id=str(derived_id("decision", round_id, len(requests))),
                action="updateInPlace",
                namespace="default",
                pod=pod,
                details={"patch": {"spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]}}},
            )
        )
    for index, request in enumerate(requests):
        envelopes.append(
            new_event(
                request,
                stream=stream,
                stream_version=2 + index,
                occurred_at=now,
                event_id=derived_id("decision", round_id, index),
                causation_id=round_id,
            )
        )
    return envelopes


async def test_two_concurrent_executors_keep_each_pods_order_and_report_each_action_once(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:10]
    own = msgspec.structs.replace(
        settings,
        stream_name=f"RBCONC_{suffix}",
        subject_prefix=f"rbconc{suffix}",
        executor_concurrency=3,  # fetches of 3: a pod's two actions often split
        bus_partitions=2,
    )
    workload = f"conc{suffix}"
    pods = [f"{workload}-{i}" for i in range(PODS)]
    core = client.CoreV1Api(k8s_client)
    for pod in pods:
        await core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            },
        )
    envelopes = planned_round(workload, pods)
    await event_store.append(envelopes, expected_version=0)

    log: list[tuple[str, str, str]] = []
    buses = [await Bus.connect(own, name=f"rollbook-test-conc-{i}") for i in range(2)]
    await buses[0].ensure_stream()
    executors = [
        RecordingExecutor(own, event_store, k8s_client, log=log, rng=random.Random(seed)) for seed in (1, 2)
    ]
    runtimes = [ServiceRuntime(own, f"executor-{i}") for i in range(2)]
    serving = [
        asyncio.create_task(serve_consumers(runtime, bus, service="executor", consumers=e.consumers()))
        for runtime, bus, e in zip(runtimes, buses, executors, strict=True)
    ]
    try:
        await buses[0].publish_many(envelopes[1:])
        outcomes_stream = CLONESET.actions_stream("default", workload)

        async def all_reported() -> bool:
            stored = await event_store.read_stream(outcomes_stream)
            return sum(s.envelope.type != "PodActionStarted" for s in stored) >= 2 * PODS

        await wait_for(all_reported, within=60, what="an outcome for every action")
    finally:
        for runtime in runtimes:
            runtime.stopping.set()
        await asyncio.gather(*serving, return_exceptions=True)
        await buses[0].js.delete_stream(own.stream_name)
        for bus in buses:
            await bus.close()

    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    outcomes = [e for e in stored if e.type != "PodActionStarted"]
    assert sorted(action_id(e) for e in outcomes) == sorted(action_id(e) for e in envelopes[1:]), (
        "exactly one outcome per action"
    )
    assert all(e.type == "PodActionSucceeded" for e in outcomes), [e.payload for e in outcomes]
    # Each pod: markNotReady started and ended before updateInPlace started (order, no overlap).
    for pod in pods:
        steps = [(what, action) for what, p, action in log if p == pod]
        assert steps == [
            ("start", "markNotReady"),
            ("end", "markNotReady"),
            ("start", "updateInPlace"),
            ("end", "updateInPlace"),
        ], (pod, steps)
    # Different pods went in parallel.
    assert max(e.most_running for e in executors) > 1
    updated = await core.read_namespaced_pod(pods[0], "default")
    assert updated.spec.containers[0].image == "nginx:mainline"


def action_id(envelope: Envelope) -> str:
    action: str = envelope.payload.action_id  # type: ignore[union-attr]
    return action


class Delivery:
    """What the executor reads of a JetStream message: how often it was delivered, and the event it carries
    (as the relay publishes it: the stored event, which the executor checks against the store)."""

    def __init__(self, deliveries: int, envelope: Envelope) -> None:
        self.metadata = type("Metadata", (), {"num_delivered": deliveries})()
        self.data = encode(envelope)
        self.headers: dict[str, str] | None = None

    async def in_progress(self) -> None:
        pass


async def mark_handed_back(
    settings: Settings,
    event_store: EventStore,
    k8s_client: client.ApiClient,
    simcluster: SimCluster,
    workload: str,
) -> tuple[Executor, Envelope, Envelope]:
    """A pod and its round (markNotReady, then updateInPlace); the executor returned took markNotReady,
    failed on every try (the API answered 500) and gave it back to the bus."""
    await client.CoreV1Api(k8s_client).create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{workload}-0"},
            "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
        },
    )
    envelopes = planned_round(workload, [f"{workload}-0"])
    await event_store.append(envelopes, expected_version=0)
    mark, update = envelopes[1:]
    executor = Executor(settings, event_store, k8s_client)
    simcluster.set_faults(FaultConfig(write_error_rate=1.0, write_error_codes=(500,)))
    try:
        with pytest.raises(ApiException):
            await executor.handle(mark, Delivery(1, mark))  # type: ignore[arg-type]
    finally:
        simcluster.set_faults(FaultConfig())
    return executor, mark, update


async def test_an_action_given_back_to_the_bus_is_not_waited_for_by_the_next_on_its_pod(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient, simcluster: SimCluster
) -> None:
    # markNotReady fails on every try (the API answers 500) and goes back to the bus; its redelivery would
    # queue behind updateInPlace, which waited 20 s for it holding the pod's turn. Now updateInPlace goes
    # back too, at once, and follows markNotReady when the bus hands them out again.
    workload = f"back{uuid.uuid4().hex[:10]}"
    executor, mark, update = await mark_handed_back(settings, event_store, k8s_client, simcluster, workload)
    started = time.monotonic()
    with pytest.raises(EarlierActionPending, match="went back to the bus"):
        await executor.handle(update, Delivery(1, update))  # type: ignore[arg-type]
    assert time.monotonic() - started < EARLIER_ACTION_WAIT / 4

    await executor.handle(mark, Delivery(2, mark))  # type: ignore[arg-type]
    await executor.handle(update, Delivery(2, update))  # type: ignore[arg-type]
    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    assert [e.type for e in stored if e.type != "PodActionStarted"] == ["PodActionSucceeded"] * 2
