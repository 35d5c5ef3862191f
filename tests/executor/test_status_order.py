"""Status writes land in the order they were planned, however many executors share the work.

A status write replaces the workload's status, and the planner does not plan an unchanged status again:
if two executors wrote a workload's statuses N and N+1 in the wrong order, the CloneSet would report the
older one for good (a rollout that never looks finished)."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import nats.js.errors
import pytest
from kubernetes_asyncio import client

from services.executor.service import Executor
from services.infra.bus import Bus
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, StatusPlanned, new_event
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP, VERSION, PLURAL = "apps.kruise.io", "v1alpha1", "clonesets"
STATUSES = 30


class RecordingExecutor(Executor):
    """An executor whose API calls take a random while, and which records each status it wrote."""

    def __init__(self, *args: Any, written: list[int], rng: random.Random) -> None:
        super().__init__(*args)
        self.written = written
        self.rng = rng

    async def write_status(self, envelope: Envelope, planned: StatusPlanned) -> None:
        await asyncio.sleep(self.rng.uniform(0, 0.02))  # a slow API server, unevenly slow
        await super().write_status(envelope, planned)
        self.written.append(envelope.stream_version)


async def test_two_executors_write_statuses_in_planned_order(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:10]
    own = msgspec.structs.replace(
        settings, stream_name=f"RBORDER_{suffix}", subject_prefix=f"rborder{suffix}"
    )
    custom = client.CustomObjectsApi(k8s_client)
    await custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "CloneSet",
            "metadata": {"name": "ordered"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "ordered"}},
                "template": {
                    "metadata": {"labels": {"app": "ordered"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
                },
            },
        },
    )
    bus = await Bus.connect(own, name="rollbook-test-status-order")
    await bus.ensure_stream()
    written: list[int] = []
    executors = [
        RecordingExecutor(own, event_store, k8s_client, written=written, rng=random.Random(seed))
        for seed in (1, 2)
    ]
    consumers = [spec.consumer(bus) for executor in executors for spec in executor.consumers()]
    tasks = [asyncio.create_task(c.run()) for c in consumers]
    try:
        stream = CLONESET.decisions_stream("default", "ordered")
        now = datetime.now(UTC)
        planned = [
            new_event(
                StatusPlanned(kind="CloneSet", namespace="default", name="ordered", status={"replicas": n}),
                stream=stream,
                stream_version=n,
                occurred_at=now,
            )
            for n in range(1, STATUSES + 1)
        ]
        # As a planner stores them and the relay publishes them: the executor acts only on stored events.
        await event_store.append(planned, expected_version=0)
        await bus.publish_many(planned)

        async def all_written() -> bool:
            return len(written) >= STATUSES

        await wait_for(all_written, within=30, what=f"{STATUSES} status writes")
        assert written == list(range(1, STATUSES + 1))
        cloneset: Any = await custom.get_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "ordered"
        )
        assert cloneset["status"]["replicas"] == STATUSES
    finally:
        for consumer in consumers:
            consumer.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await bus.js.delete_stream(own.stream_name)
        except nats.js.errors.NotFoundError:
            pass
        await bus.close()


class SupersedeRecordingExecutor(Executor):
    """Records, per status it is handed, whether it wrote it or skipped it as superseded."""

    def __init__(self, *args: Any, handled: list[tuple[str, int, bool]]) -> None:
        super().__init__(*args)
        self.handled = handled

    async def write_status(self, envelope: Envelope, planned: StatusPlanned) -> None:
        superseded = await self.status_superseded(envelope)
        await super().write_status(envelope, planned)
        self.handled.append((planned.name, envelope.stream_version, superseded))


async def test_statuses_already_replaced_are_skipped_and_each_workload_ends_on_its_last(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:10]
    own = msgspec.structs.replace(settings, stream_name=f"RBSUP_{suffix}", subject_prefix=f"rbsup{suffix}")
    custom = client.CustomObjectsApi(k8s_client)
    names = [f"sup{suffix}-{i}" for i in range(3)]
    for name in names:
        await custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
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
    now = datetime.now(UTC)
    planned = {
        name: [
            new_event(
                StatusPlanned(kind="CloneSet", namespace="default", name=name, status={"replicas": n}),
                stream=CLONESET.decisions_stream("default", name),
                stream_version=n,
                occurred_at=now,
            )
            for n in range(1, 11)
        ]
        for name in names
    }
    for envelopes in planned.values():  # the planner stored them all before the executors saw any
        await event_store.append(envelopes, expected_version=0)
    bus = await Bus.connect(own, name="rollbook-test-status-supersede")
    await bus.ensure_stream()
    handled: list[tuple[str, int, bool]] = []
    executors = [SupersedeRecordingExecutor(own, event_store, k8s_client, handled=handled) for _ in (1, 2)]
    consumers = [spec.consumer(bus) for executor in executors for spec in executor.consumers()]
    tasks = [asyncio.create_task(c.run()) for c in consumers]
    try:
        await bus.publish_many(e for envelopes in planned.values() for e in envelopes)

        async def every_status_handled() -> bool:
            return len(handled) >= 30

        await wait_for(every_status_handled, within=60, what="30 statuses handled")
        for name in names:
            mine = [(version, superseded) for n, version, superseded in handled if n == name]
            assert mine == [(v, v < 10) for v in range(1, 11)], (name, mine)
            cloneset: Any = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
            assert cloneset["status"]["replicas"] == 10
    finally:
        for consumer in consumers:
            consumer.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await bus.js.delete_stream(own.stream_name)
        await bus.close()
