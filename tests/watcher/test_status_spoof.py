"""A field manager's name is whatever the writer claims. A client allowed to update ``clonesets/status``
writes a CloneSet's pod counts under rollbook's executor's name (``STATUS_FIELD_MANAGER``): the watcher
stores that observation, because rollbook never planned those counts (nor that mix of them, nor planned
them again since it wrote them). rollbook's executor carrying out a stored ``StatusPlanned`` (the same
name, the planned counts) is still not stored again. Through a real API server (simcluster keeps
managedFields as kube-apiserver does) and the watcher's own watch loop."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest_asyncio
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import ObjectObserved, StatusPlanned, new_event
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION, STATUS_FIELD_MANAGER
from services.simcluster import SimCluster, SimConfig
from services.watcher.service import Watcher
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import wait_for

NS = "default"
MERGE = "application/merge-patch+json"
SENTINEL = "test.rollbook.io/sentinel"
STEADY = {
    "observedGeneration": 1,
    "replicas": 2,
    "readyReplicas": 2,
    "availableReplicas": 2,
    "updatedReplicas": 2,
    "updatedReadyReplicas": 2,
    "updatedAvailableReplicas": 2,
    "updateRevision": "web-r1",
    "currentRevision": "web-r1",
}


@pytest_asyncio.fixture
async def cluster(make_simcluster: MakeSimCluster) -> SimCluster:
    # The CloneSet's status is all these tests write. A seed of its own: simcluster's uids follow the seed,
    # and the observations' ids follow the uids: two clusters of one seed would share ids in the one store.
    return await make_simcluster(SimConfig(kubelet=False, seed=uuid.uuid4().int & 0xFFFFFFFF))


@contextlib.asynccontextmanager
async def watching_with(
    cluster: SimCluster, event_store: EventStore, settings: Settings
) -> AsyncIterator[client.CustomObjectsApi]:
    """The watcher's CloneSet watch and its appender running against the cluster; a client of the cluster."""
    api = await api_client_for(cluster)
    watcher = Watcher(settings, event_store, api)
    cloneset_watch = next(k for k in watcher.kinds if k.kind == CLONESET.name)
    tasks = [
        asyncio.create_task(watcher.run_kind(cloneset_watch)),
        asyncio.create_task(watcher.append_queued()),
    ]
    try:
        await cloneset_watch.initial_list_done.wait()
        yield client.CustomObjectsApi(api)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


@pytest_asyncio.fixture
async def watching(cluster: SimCluster, event_store: EventStore) -> AsyncIterator[client.CustomObjectsApi]:
    # Unpaced: each write below is followed at once by the sentinel, and a state the next watch event of the
    # same object supersedes within one append is not stored (the planner could never fold it), which
    # pacing makes likely here. Each write must be its own append for the test to see what was stored.
    async with watching_with(cluster, event_store, Settings(pace_interval=0)) as custom:
        yield custom


@pytest_asyncio.fixture
async def watching_paced(
    cluster: SimCluster, event_store: EventStore
) -> AsyncIterator[client.CustomObjectsApi]:
    # A second between appends: writes made right after one is stored go in the next append together.
    async with watching_with(cluster, event_store, Settings(pace_interval=1.0)) as custom:
        yield custom


class CloneSetTrail:
    """One CloneSet written through the API server, and what the watcher stored of it."""

    def __init__(self, custom: client.CustomObjectsApi, store: EventStore) -> None:
        self.custom = custom
        self.store = store
        self.name = f"web-{uuid.uuid4().hex[:8]}"
        self.args = (CLONESET_GROUP, CLONESET_VERSION, NS, CLONESET_PLURAL, self.name)
        self.planned = 0

    async def create(self) -> None:
        labels = {"app": self.name}
        await self.custom.create_namespaced_custom_object(
            CLONESET_GROUP, CLONESET_VERSION, NS, CLONESET_PLURAL,
            {
                "apiVersion": f"{CLONESET_GROUP}/{CLONESET_VERSION}",
                "kind": "CloneSet",
                "metadata": {"name": self.name},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
                    },
                },
            },
        )  # fmt: skip

    async def write_status(self, status: dict[str, Any], manager: str) -> str:
        """Merge ``status`` into the CloneSet's through the status subresource as ``manager``; the
        resourceVersion written."""
        written = await self.custom.patch_namespaced_custom_object_status(
            *self.args, {"status": status}, field_manager=manager, _content_type=MERGE
        )
        return str(written["metadata"]["resourceVersion"])

    async def plan(self, status: dict[str, Any]) -> None:
        """Store a ``StatusPlanned`` of ``status`` in the CloneSet's decisions stream, as the planner does
        before the executor writes it."""
        self.planned += 1
        planned = StatusPlanned(kind=CLONESET.name, namespace=NS, name=self.name, status=status)
        envelope = new_event(
            planned,
            stream=CLONESET.decisions_stream(NS, self.name),
            stream_version=self.planned,
            occurred_at=datetime.now(UTC),
        )
        await self.store.append([envelope], expected_version=self.planned - 1)

    async def status_owners(self, field: str) -> list[str]:
        """The managers the API server names as owners of ``status.<field>``."""
        current = await self.custom.get_namespaced_custom_object(*self.args)
        return [
            entry["manager"]
            for entry in current["metadata"].get("managedFields") or []
            if f"f:{field}" in ((entry.get("fieldsV1") or {}).get("f:status") or {})
        ]

    async def observed(self) -> list[ObjectObserved]:
        stored = await self.store.read_stream(CLONESET.observed_stream(NS, self.name))
        return [e.envelope.payload for e in stored if isinstance(e.envelope.payload, ObjectObserved)]

    async def stored(self, resource_version: str) -> list[ObjectObserved]:
        """Every observation stored until the watcher has handled the write of ``resource_version``."""
        return await wait_for(
            lambda: self._through(resource_version),
            within=20,
            what=f"the watcher to store {self.name} at resourceVersion {resource_version}",
        )

    async def _through(self, resource_version: str) -> list[ObjectObserved]:
        observed = await self.observed()
        return observed if any(o.resource_version == resource_version for o in observed) else []

    async def sentinel(self, value: str) -> list[ObjectObserved]:
        """Annotate the CloneSet (a real change, stored) and wait for it: the watcher handles a CloneSet's
        watch events in order, so every write before it was handled (stored or not) by then. Every
        observation stored before the sentinel's."""
        written = await self.custom.patch_namespaced_custom_object(
            *self.args, {"metadata": {"annotations": {SENTINEL: value}}}, _content_type=MERGE
        )
        observed = await self.stored(str(written["metadata"]["resourceVersion"]))
        return observed[:-1]


async def steady_trail(custom: client.CustomObjectsApi, store: EventStore) -> tuple[CloneSetTrail, str]:
    """A CloneSet created, its steady status written by OpenKruise's manager and stored; that write's
    resourceVersion."""
    trail = CloneSetTrail(custom, store)
    await trail.create()
    steady = await trail.write_status(STEADY, "kruise-manager")
    await trail.stored(steady)
    return trail, steady


async def test_counts_written_under_rollbooks_name_that_rollbook_never_planned_are_stored(
    watching: client.CustomObjectsApi, event_store: EventStore
) -> None:
    trail, steady = await steady_trail(watching, event_store)

    # rollbook's executor carrying out a stored StatusPlanned (a pod went unready): not stored again.
    flapped = {**STEADY, "readyReplicas": 1, "availableReplicas": 1, "updatedReadyReplicas": 1}
    flapped["updatedAvailableReplicas"] = 1
    await trail.plan(flapped)
    ours = await trail.write_status(flapped, STATUS_FIELD_MANAGER)
    before = await trail.sentinel("after-ours")
    assert ours not in [o.resource_version for o in before]
    assert before[-1].resource_version == steady

    # Another client claims rollbook's name for counts no StatusPlanned carried: a real change, stored.
    unready = {"readyReplicas": 0, "availableReplicas": 0, "updatedReadyReplicas": 0}
    spoofed = await trail.write_status({**unready, "updatedAvailableReplicas": 0}, STATUS_FIELD_MANAGER)
    assert await trail.status_owners("readyReplicas") == [STATUS_FIELD_MANAGER]  # as the API server says
    stored = await trail.sentinel("after-spoofed")
    assert stored[-1].resource_version == spoofed
    assert stored[-1].object["status"]["readyReplicas"] == 0

    # rollbook writes the next plan (not stored) and plans the pod unready again. Before its executor
    # writes that, another client sets readyReplicas alone to the planned 1 under rollbook's name: counts
    # no plan carried together (availableReplicas stays 2), stored.
    await trail.plan(STEADY)
    ours = await trail.write_status(STEADY, STATUS_FIELD_MANAGER)
    await trail.plan(flapped)
    mixed = await trail.write_status({"readyReplicas": 1}, STATUS_FIELD_MANAGER)
    stored = await trail.sentinel("after-mixed")
    assert ours not in [o.resource_version for o in stored]  # rollbook's own write: not stored
    assert stored[-1].resource_version == mixed
    status = stored[-1].object["status"]
    assert (status["readyReplicas"], status["availableReplicas"]) == (1, 2)

    # Counts set back to the plan rollbook wrote last (it writes each plan once): stored.
    set_back = await trail.write_status(STEADY, STATUS_FIELD_MANAGER)
    stored = await trail.sentinel("after-set-back")
    assert stored[-1].resource_version == set_back
    assert stored[-1].object["status"]["readyReplicas"] == 2


async def test_a_forged_status_set_back_in_the_same_append_is_stored(
    watching_paced: client.CustomObjectsApi, event_store: EventStore
) -> None:
    trail, _ = await steady_trail(watching_paced, event_store)  # an append just began: the next waits
    # Counts nobody planned under rollbook's name, set back at once by another writer: one append.
    unready = {"readyReplicas": 0, "availableReplicas": 0, "updatedReadyReplicas": 0}
    spoofed = await trail.write_status({**unready, "updatedAvailableReplicas": 0}, STATUS_FIELD_MANAGER)
    set_back = await trail.write_status(STEADY, "kruise-manager")
    stored = {o.resource_version: o for o in await trail.stored(set_back)}
    assert spoofed in stored, "the forged status was folded into the write that set it back"
    assert stored[spoofed].object["status"]["readyReplicas"] == 0
