"""A forged pod action on the bus, published with the one identity that may publish events (the relay's,
as a thief of the auditor's credentials would): it is neither carried out nor stored. The executor acts
only on the exact event a planner stored, the audit quarantines what the store does not hold."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import REGISTRY

from services.auditor.service import Audit, Relay
from services.executor.service import Executor
from services.infra.bus import Bus
from services.infra.nats_auth import ADMIN, AUDITOR, EXECUTOR
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, PodActionRequested, StatusPlanned, encode, new_event
from services.model.streams import workload_stream
from services.simcluster import SimCluster
from tests.plugins.stack import wait_for
from tests.security.bus_server import auth_nats, connect_as

pytestmark = pytest.mark.asyncio(loop_scope="session")

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def create_pod(workload: str, pod: str, version: int) -> Envelope:
    """A createPod as a planner plans it; the pod has no owner references (none that the GC would act on),
    so the control pod and the forged one differ only in where they come from."""
    body: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": "default", "labels": {"app": workload}},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    }
    return new_event(
        PodActionRequested(
            action_id=f"{workload}-{uuid.uuid4().hex[:8]}",
            action="createPod",
            namespace="default",
            pod=pod,
            rollout_id="r1",
            details={"object": body},
        ),
        stream=CLONESET.decisions_stream("default", workload),
        stream_version=version,
        occurred_at=NOW,
        causation_id=uuid.uuid4(),
        correlation_id="r1",
    )


async def pod_exists(api: client.ApiClient, name: str) -> bool:
    try:
        await client.CoreV1Api(api).read_namespaced_pod(name, "default")
        return True
    except ApiException as error:
        if error.status == 404:
            return False
        raise


def refused_count(event_type: str = "PodActionRequested") -> float:
    return REGISTRY.get_sample_value("rollbook_executor_refused_total", {"type": event_type}) or 0.0


async def test_a_forged_pod_action_is_neither_carried_out_nor_stored(
    database_url: str,
    event_store: EventStore,
    k8s_client: client.ApiClient,
    simcluster: SimCluster,
    server_data_dir: Path,
) -> None:
    workload = f"auth{uuid.uuid4().hex[:8]}"
    async with auth_nats(server_data_dir, database_url=database_url) as settings:
        auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        executor_bus = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
        admin = await Bus.connect(settings, name="rollbook-test-inspect", identity=ADMIN)
        await auditor.ensure_stream()
        executor = Executor(settings, event_store, k8s_client)
        actions = executor.consumers()[0].consumer(executor_bus)
        audit = Audit(event_store, auditor, look_interval=0.2)
        audit_stopping = asyncio.Event()
        tasks = [asyncio.create_task(actions.run()), asyncio.create_task(audit.run(audit_stopping))]
        try:
            # What a planner stored and the relay published is carried out (the control).
            planned = create_pod(workload, f"{workload}-0", 1)
            head = await event_store.head_position()
            await event_store.append([planned], expected_version=0)
            await relay_stream(event_store, auditor, head, planned.stream)
            await wait_for(lambda: pod_exists(k8s_client, f"{workload}-0"), within=30, what="the planned pod")

            # The forgery: a new event id and action id, a pod with no owner, never stored.
            refused_before = refused_count()
            forged = create_pod(workload, f"{workload}-intruder", 1000)
            subject = await publish_as_thief(settings, auditor, forged, encode(forged))

            async def both_settled() -> bool:
                done = actions.stats.handled + actions.stats.dead_lettered
                return done >= 2 and audit.stats.walked >= 2

            await wait_for(both_settled, within=30, what="the executor and the audit settled the forgery")
            assert not await pod_exists(k8s_client, f"{workload}-intruder")
            assert refused_count() == refused_before + 1
            [letter] = await admin.dead_letters("executor")
            assert letter.msg_id is None or letter.msg_id == str(forged.event_id)
            assert "refused: no event with this id is in the event store" in letter.reason
            assert await event_store.stored_ids([forged.event_id]) == set()
            rows = await event_store.query(
                "SELECT event_id, reason FROM bus_quarantine WHERE subject = $1", subject
            )
            assert [row[0] for row in rows] == [forged.event_id]
        finally:
            actions.stop()
            audit_stopping.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            for bus in (auditor, executor_bus, admin):
                await bus.close()


def prepared_count() -> float:
    return REGISTRY.get_sample_value("rollbook_executor_prepared_checks_total") or 0.0


@dataclass
class FetchingExecutor:
    """The executor's pod-action consumer on an authenticated bus, started once messages wait for it, so
    that its first fetch takes them together; ``auditor`` is the relay's identity."""

    auditor: Bus
    actions: Any
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.actions.run())

    async def settled(self, messages: int) -> None:
        async def done() -> bool:
            return self.actions.stats.handled + self.actions.stats.dead_lettered >= messages

        await wait_for(done, within=30, what=f"the executor settled {messages} messages")


@asynccontextmanager
async def fetching_executor(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> AsyncIterator[FetchingExecutor]:
    auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
    executor_bus = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
    await auditor.ensure_stream()
    executor = Executor(settings, event_store, k8s_client)
    fetching = FetchingExecutor(auditor, executor.consumers()[0].consumer(executor_bus))
    try:
        yield fetching
    finally:
        fetching.actions.stop()
        if fetching.task is not None:
            await asyncio.wait_for(asyncio.gather(fetching.task, return_exceptions=True), 30)
        for bus in (auditor, executor_bus):
            await bus.close()


async def publish_as_thief(settings: Settings, auditor: Bus, envelope: Envelope, data: bytes) -> str:
    """A message published on the executor's subject of ``envelope`` by a stolen relay credential; the
    subject."""
    thief = await connect_as(settings, AUDITOR)
    try:
        subject = auditor.subject_for(envelope, partition_key=workload_stream(envelope.stream))
        await thief.jetstream().publish(subject, data, stream=settings.stream_name)
    finally:
        await thief.close()
    return subject


async def relay_stream(event_store: EventStore, auditor: Bus, head: int, stream: str) -> None:
    """Publish what was stored on ``stream`` after ``head`` as the relay does."""
    mine = [e for e in await event_store.read_batch_json(head, 1000) if e.envelope.stream == stream]
    await Relay(event_store, auditor).publish(mine)


async def test_a_forged_pod_action_fetched_with_planned_ones_is_refused_by_the_batchs_one_read(
    database_url: str,
    event_store: EventStore,
    k8s_client: client.ApiClient,
    simcluster: SimCluster,
    server_data_dir: Path,
) -> None:
    """The executor reads the store's answers for the actions it fetched together in one statement
    (``Executor.prepare``): a forgery among planned actions is still refused, and they are carried out."""
    workload = f"auth{uuid.uuid4().hex[:8]}"
    async with (
        auth_nats(server_data_dir, database_url=database_url) as settings,
        fetching_executor(settings, event_store, k8s_client) as executor,
    ):
        planned = [create_pod(workload, f"{workload}-{i}", i + 1) for i in range(2)]
        head = await event_store.head_position()
        await event_store.append(planned, expected_version=0)
        await relay_stream(event_store, executor.auditor, head, planned[0].stream)
        forged = create_pod(workload, f"{workload}-intruder", 1000)
        await publish_as_thief(settings, executor.auditor, forged, encode(forged))
        # All three wait on the bus, so the consumer's first fetch takes them together.
        refused_before, prepared_before = refused_count(), prepared_count()
        executor.start()
        await executor.settled(3)
        assert prepared_count() == prepared_before + 3  # read in one statement, forgery included
        for i in range(2):
            assert await pod_exists(k8s_client, f"{workload}-{i}")
        assert not await pod_exists(k8s_client, f"{workload}-intruder")
        assert refused_count() == refused_before + 1


@pytest.mark.parametrize("forged_first", [True, False], ids=["forgery-first", "forgery-second"])
async def test_a_copy_of_a_planned_action_under_another_correlation_fetched_with_it_gets_its_own_answer(
    database_url: str,
    event_store: EventStore,
    k8s_client: client.ApiClient,
    simcluster: SimCluster,
    server_data_dir: Path,
    forged_first: bool,
) -> None:
    """Attack: a real request re-sent with the same event id and payload but another correlation id, in
    the same fetch as the real one. The batch's answers are per message, so the copy is refused, and the
    real one is carried out under its own correlation, whichever comes first on the bus."""
    workload = f"auth{uuid.uuid4().hex[:8]}"
    async with (
        auth_nats(server_data_dir, database_url=database_url) as settings,
        fetching_executor(settings, event_store, k8s_client) as executor,
    ):
        real = create_pod(workload, f"{workload}-0", 1)
        head = await event_store.head_position()
        await event_store.append([real], expected_version=0)
        [stored] = [
            e for e in await event_store.read_batch_json(head, 1000) if e.envelope.stream == real.stream
        ]
        copy = msgspec.structs.replace(real, correlation_id="attacker")
        # The copy carries the payload byte for byte as the relay sends it (the store's JSON text).
        copy_data = msgspec.json.encode(msgspec.structs.replace(stored.envelope, correlation_id="attacker"))
        if forged_first:
            await publish_as_thief(settings, executor.auditor, copy, copy_data)
        await Relay(event_store, executor.auditor).publish([stored])
        if not forged_first:
            await publish_as_thief(settings, executor.auditor, copy, copy_data)
        refused_before, prepared_before = refused_count(), prepared_count()
        executor.start()
        await executor.settled(2)
        assert prepared_count() == prepared_before + 2  # fetched together, read in one statement
        assert await pod_exists(k8s_client, f"{workload}-0")
        assert refused_count() == refused_before + 1
        outcomes = [e.envelope for e in await event_store.read_stream(f"{real.stream}/actions")]
        assert outcomes and {e.correlation_id for e in outcomes} == {real.correlation_id}, outcomes


async def test_a_forged_status_is_not_written(
    event_store: EventStore, k8s_client: client.ApiClient, database_url: str, server_data_dir: Path
) -> None:
    """A StatusPlanned no planner stored (a CloneSet made to report 99 ready replicas): refused and
    dead-lettered on its status durable; the CloneSet's status is untouched."""
    name = f"status{uuid.uuid4().hex[:8]}"
    custom = client.CustomObjectsApi(k8s_client)
    await custom.create_namespaced_custom_object(
        "apps.kruise.io",
        "v1alpha1",
        "default",
        "clonesets",
        {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "CloneSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
                },
            },
        },
    )
    async with auth_nats(server_data_dir, database_url=database_url) as settings:
        auditor = await Bus.connect(settings, name="rollbook-auditor", identity=AUDITOR)
        executor_bus = await Bus.connect(settings, name="rollbook-executor", identity=EXECUTOR)
        await auditor.ensure_stream()
        forged = new_event(
            StatusPlanned(kind="CloneSet", namespace="default", name=name, status={"readyReplicas": 99}),
            stream=CLONESET.decisions_stream("default", name),
            stream_version=1,
            occurred_at=NOW,
        )
        partition = auditor.partition_of(forged.stream)
        executor = Executor(settings, event_store, k8s_client)
        [status_spec] = [s for s in executor.consumers() if s.partition == partition]
        consumer = status_spec.consumer(executor_bus)
        task = asyncio.create_task(consumer.run())
        before = (
            REGISTRY.get_sample_value("rollbook_executor_refused_total", {"type": "StatusPlanned"}) or 0.0
        )
        try:
            thief = await connect_as(settings, AUDITOR)
            try:
                await thief.jetstream().publish(
                    auditor.subject_for(forged), encode(forged), stream=settings.stream_name
                )
            finally:
                await thief.close()

            async def settled() -> bool:
                return consumer.stats.handled + consumer.stats.dead_lettered >= 1

            await wait_for(settled, within=30, what="the forged status settled")
        finally:
            consumer.stop()
            await asyncio.wait_for(task, 30)
            await auditor.close()
            await executor_bus.close()
        assert consumer.stats.dead_lettered == 1
        after = REGISTRY.get_sample_value("rollbook_executor_refused_total", {"type": "StatusPlanned"})
        assert after == before + 1
        cloneset = await custom.get_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", name
        )
        assert (cloneset.get("status") or {}).get("readyReplicas") != 99
