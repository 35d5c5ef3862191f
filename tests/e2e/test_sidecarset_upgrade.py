"""End to end: a SidecarSet's sidecar image rolled in place to running pods by the real services.

The webhook (in-process, HTTPS, registered in simcluster) injects the seed's ``test-sidecarset`` into four
bare pods; the watcher, planner, executor and auditor run as subprocesses. Changing the sidecar image while
``paused: true`` updates nothing; unpausing with ``partition: 50%`` updates exactly two pods, one at a time
(maxUnavailable 1), restarting only the sidecar: app containers, pod UIDs and IPs stay.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import asyncpg
import msgspec
import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client

from services.infra import audit_queries
from services.infra.bus import Bus
from services.infra.database import asyncpg_url
from services.infra.settings import Settings
from services.infra.store import EventStore, StoredEvent
from services.infra.supervisor import settings_env
from services.kinds import registry
from services.model import sidecarset as ss
from services.model.events import (
    ObjectObserved,
    PartitionStepPlanned,
    PodActionRequested,
    PodActionSucceeded,
    RevisionCreated,
    RolloutCompleted,
    RolloutPaused,
    RolloutResumed,
    RolloutStarted,
    RoundPlanned,
)
from services.model.sidecarset_streams import (
    SIDECARSET_GROUP,
    SIDECARSET_KIND,
    SIDECARSET_PLURAL,
    SIDECARSET_VERSION,
    UPDATE_SIDECAR_ACTION,
)
from services.planner.kinds import CLONESET, SIDECARSET
from services.replay.verify import verify_streams
from services.simcluster import SimCluster, SimConfig
from services.simcluster.kubelet import Timing
from services.webhook.revisions import StoreRevisions
from services.webhook.service import RunningWebhook, WebhookOptions, run_webhook
from services.webhook.sinks import EventStoreSink
from tests.e2e import audit
from tests.e2e.cluster import Cluster, seed_cloneset
from tests.e2e.planned import nothing_left_to_plan, round_covering
from tests.plugins.simcluster import MakeSimCluster
from tests.plugins.stack import Stack, wait_for

pytestmark = pytest.mark.e2e

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed"
NAME = "test-sidecarset"
PODS = [f"test-pod-{i}" for i in range(4)]
OLD_IMAGE, NEW_IMAGE = "centos:6.7", "centos:7"


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    # A restarted sidecar takes a moment to be ready again, so an upgrade has a visible unavailable window.
    # centos:crash starts and exits with an error (CrashLoopBackOff), for the fix-forward test.
    return await make_simcluster(
        SimConfig(timing=Timing(start=0.05, ready=0.4), crashing_images=("centos:crash",))
    )


@pytest_asyncio.fixture(loop_scope="session")
async def webhook(
    simcluster: SimCluster, stack_settings: Settings, tmp_path: Path
) -> AsyncIterator[RunningWebhook]:
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path), data_dir=str(tmp_path))
    sink = EventStoreSink(lambda: EventStore.connect(stack_settings.database_url))
    # Pinned revisions (injectionStrategy.revision) are read from the same event store, as `rollbook webhook`.
    revisions = StoreRevisions(lambda: EventStore.connect(stack_settings.database_url, pool_size=2))
    options = WebhookOptions(cert_dir=tmp_path / "tls")
    try:
        async with run_webhook(settings, options, sink, revisions) as running:
            yield running
    finally:
        await sink.close()
        await revisions.close()


@pytest_asyncio.fixture(loop_scope="session")
async def store(stack_settings: Settings) -> AsyncIterator[EventStore]:
    connected = await EventStore.connect(stack_settings.database_url)
    try:
        yield connected
    finally:
        await connected.close()


def seed(file: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SEED / file).read_text())
    return loaded


async def read_pods(core: client.CoreV1Api) -> dict[str, dict[str, Any]]:
    response: Any = await core.list_namespaced_pod("default", _preload_content=False)
    listing = json.loads(await response.read())
    return {p["metadata"]["name"]: p for p in listing["items"] if p["metadata"]["name"] in PODS}


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["status"].get("containerStatuses") or [] if c["name"] == name)


def spec_image(pod: dict[str, Any], name: str) -> str:
    return str(next(c["image"] for c in pod["spec"]["containers"] if c["name"] == name))


def running_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


async def test_paused_then_partition_50_percent_upgrades_two_pods_one_at_a_time(
    stack: Stack, webhook: RunningWebhook, k8s_client: client.ApiClient, store: EventStore
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    core = client.CoreV1Api(k8s_client)
    sidecarset = seed("sidecarset-test-sidecarset.yaml")  # paused: true, partition 0%, maxUnavailable 1
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, sidecarset
    )
    await wait_for(
        lambda: _async(any(s.name == NAME for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("watcher", "planner", "executor", "auditor")
    for name in PODS:
        pod = seed("pod-test-pod.yaml")
        pod["metadata"]["name"] = name
        await core.create_namespaced_pod("default", body=cast(Any, pod))

    async def all_ready() -> dict[str, dict[str, Any]] | None:
        pods = await read_pods(core)
        return pods if len(pods) == 4 and all(running_ready(p) for p in pods.values()) else None

    before = await wait_for(all_ready, what="four injected pods running and ready")
    for pod in before.values():
        assert [c["name"] for c in pod["spec"]["containers"]] == ["tools", "app"]

    async def status() -> dict[str, Any]:
        obj = await custom.get_cluster_custom_object(
            SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, NAME
        )
        return cast(dict[str, Any], obj)

    async def status_is(**expected: Any) -> dict[str, Any] | None:
        obj = await status()
        current = obj.get("status") or {}
        return obj if all(current.get(k) == v for k, v in expected.items()) else None

    def revisions_recorded(events: list[Any]) -> list[RevisionCreated]:
        return [e for e in events if isinstance(e, RevisionCreated)]

    await wait_for(
        lambda: status_is(matchedPods=4, updatedPods=4, readyPods=4, updatedReadyPods=4),
        what="the SidecarSet status written by the executor",
    )

    # Change the sidecar image while paused: nothing is updated.
    changed = copy.deepcopy((await status())["spec"]["containers"])
    changed[0]["image"] = NEW_IMAGE
    patched = await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        NAME,
        {"spec": {"containers": changed}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    generation = patched["metadata"]["generation"]
    await wait_for(
        lambda: status_is(observedGeneration=generation, matchedPods=4, updatedPods=0),
        what="the status of the changed, paused SidecarSet",
    )
    # The round over the changed SidecarSet holds all the planner decides on it; then nothing is left.
    await round_covering(
        store,
        SIDECARSET,
        NAME,
        lambda o: o.kind == SIDECARSET_KIND and o.object["metadata"].get("generation") == generation,
        what="the changed, paused SidecarSet",
    )
    await wait_for(lambda: nothing_left_to_plan(store, SIDECARSET, NAME), what="nothing left to plan")
    paused_pods = await read_pods(core)
    assert {spec_image(p, "tools") for p in paused_pods.values()} == {OLD_IMAGE}
    decisions = [
        s.envelope.payload for s in await store.read_stream(registry.SIDECARSET.decisions_stream("", NAME))
    ]
    assert not [d for d in decisions if isinstance(d, PodActionRequested)]
    assert any(isinstance(d, RolloutStarted) for d in decisions)
    assert any(isinstance(d, RolloutPaused) and d.reason == "updateStrategy.paused" for d in decisions)
    # The image change recorded the SidecarSet's second revision; the status names it (OpenKruise's
    # status.latestRevision), written by the executor with the round that recorded it.
    revisions = revisions_recorded(decisions)
    assert [r.revision for r in revisions] == [1, 2] and revisions[0].name != revisions[1].name
    latest = revisions[1].name
    assert latest.startswith(f"{NAME}-") and revisions[1].template["containers"][0]["image"] == NEW_IMAGE
    await wait_for(lambda: status_is(latestRevision=latest), what="status.latestRevision = revision 2")

    # Unpause with partition 50%: exactly two of the four pods are upgraded.
    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        NAME,
        {"spec": {"updateStrategy": {"paused": False, "partition": "50%"}}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    await wait_for(
        lambda: status_is(matchedPods=4, updatedPods=2, updatedReadyPods=2, readyPods=4),
        within=30,
        what="two pods upgraded and ready",
    )
    # No third one follows: given everything observed (two upgraded and ready), nothing is left to plan.
    await wait_for(lambda: nothing_left_to_plan(store, SIDECARSET, NAME), what="nothing left to plan")
    requested = [
        s.envelope.payload
        for s in await store.read_stream(registry.SIDECARSET.decisions_stream("", NAME))
        if isinstance(s.envelope.payload, PodActionRequested)
    ]
    assert len(requested) == 2
    after = await read_pods(core)
    upgraded = sorted(n for n, p in after.items() if spec_image(p, "tools") == NEW_IMAGE)
    assert len(upgraded) == 2
    for name, pod in after.items():
        old = before[name]
        assert pod["metadata"]["uid"] == old["metadata"]["uid"]
        assert pod["status"]["podIP"] == old["status"]["podIP"]
        assert container(pod, "app")["restartCount"] == 0
        assert spec_image(pod, "app") == "nginx:1.15.1"
        assert container(pod, "tools")["restartCount"] == (1 if name in upgraded else 0)
        assert container(pod, "tools")["image"] == (NEW_IMAGE if name in upgraded else OLD_IMAGE)
        if name in upgraded:  # the upgrade rewrote the pod's entry: it names the revision it now runs
            assert ss.pod_sidecar_revisions(pod)[NAME].controller_revision == latest
    current = (await status())["status"]
    assert current["updatedPods"] == 2 and current["latestRevision"] == latest

    # The audit trail: the step, two in-place actions with one success each, one pod at a time.
    decided = await store.read_stream(registry.SIDECARSET.decisions_stream("", NAME))
    payloads = [s.envelope.payload for s in decided]
    assert any(isinstance(d, RolloutResumed) for d in payloads)
    assert revisions_recorded(payloads) == revisions  # a strategy change records no revision
    steps = [d for d in payloads if isinstance(d, PartitionStepPlanned)]
    assert steps and (steps[-1].partition, steps[-1].replicas, steps[-1].expected_updated) == (2, 4, 2)
    assert steps[-1].max_unavailable == 1
    requests = [s for s in decided if isinstance(s.envelope.payload, PodActionRequested)]
    assert [cast(PodActionRequested, r.envelope.payload).action for r in requests] == [
        UPDATE_SIDECAR_ACTION
    ] * 2
    assert sorted(cast(PodActionRequested, r.envelope.payload).pod for r in requests) == upgraded
    outcomes = [
        s.envelope.payload for s in await store.read_stream(registry.SIDECARSET.actions_stream("", NAME))
    ]
    assert sorted(o.action_id for o in outcomes if isinstance(o, PodActionSucceeded)) == sorted(
        cast(PodActionRequested, r.envelope.payload).action_id for r in requests
    )
    observed = await store.read_stream(registry.SIDECARSET.observed_stream("", NAME))
    assert max_unavailable_at_once(observed) == 1
    # The second upgrade was asked for only after the first pod was seen upgraded and ready again.
    first = cast(PodActionRequested, requests[0].envelope.payload).pod
    ready_again = min(
        s.global_position
        for s in observed
        if isinstance(s.envelope.payload, ObjectObserved)
        and s.envelope.payload.name == first
        and spec_image(s.envelope.payload.object, "tools") == NEW_IMAGE
        and running_ready(s.envelope.payload.object)
        and container(s.envelope.payload.object, "tools").get("image") == NEW_IMAGE
    )
    assert requests[0].global_position < ready_again < requests[1].global_position

    # The same checks in SQL, as an operator would run them: from the resume on, at least 4 - 1 pods were
    # available after every pod observation; every action has exactly one terminal event; every stored
    # event (SidecarSet streams have an empty namespace token) was published once on the bus.
    database = stack.settings.database_url
    resumed_at = next(s.global_position for s in decided if isinstance(s.envelope.payload, RolloutResumed))
    rows = await audit.fetch(database, audit.AVAILABILITY_SQL, registry.SIDECARSET.observed_stream("", NAME))
    assert min(r["available"] for r in rows if r["pos"] > resumed_at) == 3
    assert {(r["action"], r["terminals"], r["applied"]) for r in await audit.action_terminals(database)} == {
        (UPDATE_SIDECAR_ACTION, 1, 1)
    }
    # The audit views: both upgrades as in-place rows, done once the restarted sidecar was back, and
    # maxUnavailable never exceeded (unavailability over the SidecarSet's observed pods, total 4 matched).
    connection = await asyncpg.connect(asyncpg_url(database))
    try:
        in_place = await connection.fetch(
            "SELECT pod, update_kind, outcome, duration FROM pod_actions"
            " WHERE kind = 'SidecarSet' AND workload = $1 AND in_place",
            NAME,
        )
        assert sorted(r["pod"] for r in in_place) == upgraded
        assert {(r["update_kind"], r["outcome"]) for r in in_place} == {("in place", "succeeded")}
        assert all(r["duration"] is not None for r in in_place)
        totals = await connection.fetch(
            "SELECT DISTINCT replicas FROM unavailability WHERE kind = 'SidecarSet' AND workload = $1"
            " AND position > $2",
            NAME,
            resumed_at,
        )
        assert {r["replicas"] for r in totals} == {4}
        exceeded = await audit_queries.max_unavailable_exceeded(connection)
        assert [r for r in exceeded if r["workload"] == NAME] == []
    finally:
        await connection.close()
    bus = await Bus.connect(stack.settings, name="sidecarset-e2e-check")
    try:

        async def all_published() -> bool:
            stored_ids = await audit.stored_event_ids(database)
            return sorted(await audit.published_event_ids(bus)) == sorted(stored_ids)

        await wait_for(all_published, within=10, what="every stored event published exactly once")
    finally:
        await bus.close()

    # Every recorded round replays to the same decisions; an edited decision is found.
    outcome_envelopes = [
        s.envelope for s in await store.read_stream(registry.SIDECARSET.actions_stream("", NAME))
    ]
    decision_envelopes = [s.envelope for s in decided]
    observed_envelopes = [s.envelope for s in observed]
    report = verify_streams(SIDECARSET, NAME, observed_envelopes, outcome_envelopes, decision_envelopes)
    assert report.clean and report.rounds >= 4, report.divergence
    tampered = [
        msgspec.structs.replace(e, payload=msgspec.structs.replace(e.payload, partition=1))
        if isinstance(e.payload, PartitionStepPlanned)
        else e
        for e in decision_envelopes
    ]
    divergence = verify_streams(SIDECARSET, NAME, observed_envelopes, outcome_envelopes, tampered).divergence
    assert divergence is not None and "partition" in divergence.field
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "sidecarset",
        "verify",
        NAME,
        env={**os.environ, **settings_env(stack.settings)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0 and out.decode().startswith("OK:"), out

    # A pod created now is injected from the SidecarSet whose status names the second revision, and its
    # kruise.io/sidecarset-hash entry records that revision (its controllerRevision field).
    await wait_for(
        lambda: _async(
            any(
                s.name == NAME and s.controller_revision == latest
                for s in webhook.state.sidecarsets.snapshot()
            )
        ),
        what="the webhook to see status.latestRevision",
    )
    late = seed("pod-test-pod.yaml")
    late["metadata"]["name"] = "test-pod-late"
    created = await core.create_namespaced_pod("default", body=cast(Any, late))
    entry = json.loads(created.metadata.annotations[ss.HASH_ANNOTATION])[NAME]
    assert entry["controllerRevision"] == latest
    assert entry["hash"] == ss.parse_sidecarset(await status()).hash
    assert next(c.image for c in created.spec.containers if c.name == "tools") == NEW_IMAGE

    # Pinning revision 1 (injectionStrategy.revision): the webhook reads the planner's recorded revisions
    # from the event store, and a new pod gets the old image, its entry naming revision 1.
    first = revisions[0].name
    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        NAME,
        {"spec": {"injectionStrategy": {"revision": {"revisionName": first}}}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    await wait_for(
        lambda: _async(
            any(s.name == NAME and ss.pinned_revision(s) for s in webhook.state.sidecarsets.snapshot())
        ),
        what="the webhook to see the pinned revision",
    )
    pinned = seed("pod-test-pod.yaml")
    pinned["metadata"]["name"] = "test-pod-pinned"
    created = await core.create_namespaced_pod("default", body=cast(Any, pinned))
    entry = json.loads(created.metadata.annotations[ss.HASH_ANNOTATION])[NAME]
    assert entry["controllerRevision"] == first
    assert entry["hash"] == revisions[0].hash
    assert next(c.image for c in created.spec.containers if c.name == "tools") == OLD_IMAGE


def max_unavailable_at_once(observed: list[StoredEvent]) -> int:
    """Most pods not running+ready at the same moment, over the watcher's observations in order."""
    unavailable: dict[str, bool] = {}
    most = 0
    counting = False
    for stored in observed:
        payload = stored.envelope.payload
        if not isinstance(payload, ObjectObserved) or payload.kind != "Pod":
            continue
        unavailable[payload.name] = payload.change == "DELETED" or not running_ready(payload.object)
        # Count from the moment all four pods were ready together (their start is not the upgrade's doing).
        counting = counting or (len(unavailable) == 4 and not any(unavailable.values()))
        if counting:
            most = max(most, sum(unavailable.values()))
    return most


async def _async(value: Any) -> Any:
    return value


async def test_sidecars_of_cloneset_pods_upgrade_in_place_and_the_cloneset_leaves_them_be(
    stack: Stack, webhook: RunningWebhook, cluster: Cluster, k8s_client: client.ApiClient, store: EventStore
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    sidecarset = seed("sidecarset-test-sidecarset.yaml")
    sidecarset["spec"]["updateStrategy"] = {"type": "RollingUpdate", "maxUnavailable": 1, "partition": 0}
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, sidecarset
    )
    await wait_for(
        lambda: _async(any(s.name == NAME for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("watcher", "planner", "executor", "auditor")
    await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", replicas=3))

    async def cloneset_settled() -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods("sample")
        status = (await cluster.cloneset("sample")).get("status") or {}
        if (
            len(pods) != 3
            or not all(running_ready(p) for p in pods.values())
            or status.get("readyReplicas") != 3
        ):
            return None
        return pods

    before = await wait_for(cloneset_settled, what="three ready CloneSet pods")
    assert all([c["name"] for c in p["spec"]["containers"]] == ["tools", "nginx"] for p in before.values())
    cloneset_actions_before = await _cloneset_actions(store)

    changed = copy.deepcopy(sidecarset["spec"]["containers"])
    changed[0]["image"] = NEW_IMAGE
    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        NAME,
        {"spec": {"containers": changed}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )

    async def upgraded() -> dict[str, dict[str, Any]] | None:
        pods = await cloneset_settled()
        if pods is None or any(container(p, "tools").get("image") != NEW_IMAGE for p in pods.values()):
            return None
        obj = await custom.get_cluster_custom_object(
            SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, NAME
        )
        status = cast(dict[str, Any], obj).get("status") or {}
        return pods if status.get("updatedPods") == 3 and status.get("updatedReadyPods") == 3 else None

    after = await wait_for(upgraded, within=30, what="the three CloneSet pods' sidecars upgraded")
    # Every sidecar upgrade is observed on the CloneSet's pods too: given all of that, the CloneSet planner
    # has nothing left to plan, and it planned no pod action since.
    await wait_for(
        lambda: nothing_left_to_plan(store, CLONESET, "default/sample"), what="nothing left to plan"
    )
    assert await _cloneset_actions(store) == cloneset_actions_before  # the CloneSet planner did nothing
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }
    for pod in after.values():
        assert container(pod, "nginx")["restartCount"] == 0
        assert container(pod, "tools")["restartCount"] == 1
    assert ((await cluster.cloneset("sample")).get("status") or {}).get("updatedReplicas") == 3


async def _cloneset_actions(store: EventStore) -> list[str]:
    return [
        f"{s.envelope.payload.action}:{s.envelope.payload.pod}"
        for s in await store.read_stream(registry.CLONESET.decisions_stream("default", "sample"))
        if isinstance(s.envelope.payload, PodActionRequested)
    ]


async def set_image(custom: client.CustomObjectsApi, image: str) -> None:
    current = await custom.get_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, NAME
    )
    containers = copy.deepcopy(cast(dict[str, Any], current)["spec"]["containers"])
    containers[0]["image"] = image
    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        NAME,
        {"spec": {"containers": containers}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )


async def test_a_crashing_sidecar_image_stalls_at_max_unavailable_and_is_fixed_forward(
    stack: Stack, webhook: RunningWebhook, k8s_client: client.ApiClient, store: EventStore
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    core = client.CoreV1Api(k8s_client)
    sidecarset = seed("sidecarset-test-sidecarset.yaml")
    sidecarset["spec"]["updateStrategy"] = {"type": "RollingUpdate", "maxUnavailable": 1, "partition": 0}
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, sidecarset
    )
    await wait_for(
        lambda: _async(any(s.name == NAME for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("watcher", "planner", "executor", "auditor")
    names = PODS[:3]
    for name in names:
        pod = seed("pod-test-pod.yaml")
        pod["metadata"]["name"] = name
        await core.create_namespaced_pod("default", body=cast(Any, pod))

    async def status_is(**expected: int) -> bool:
        obj = await custom.get_cluster_custom_object(
            SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, NAME
        )
        current = cast(dict[str, Any], obj).get("status") or {}
        return all(current.get(k) == v for k, v in expected.items())

    await wait_for(lambda: status_is(matchedPods=3, updatedPods=3, readyPods=3), what="three ready pods")
    before = await read_pods(core)

    await set_image(custom, "centos:crash")
    await wait_for(lambda: status_is(updatedPods=1, readyPods=2), what="one pod on the crashing image")
    # The crashing pod never becomes ready: given that, nothing is left to plan (no second upgrade).
    await wait_for(lambda: nothing_left_to_plan(store, SIDECARSET, NAME), what="nothing left to plan")
    assert await status_is(updatedPods=1, readyPods=2, updatedReadyPods=0)
    stalled = await read_pods(core)
    crashed = [n for n, p in stalled.items() if spec_image(p, "tools") == "centos:crash"]
    assert len(crashed) == 1
    assert all(container(stalled[n], "tools")["restartCount"] == 0 for n in names if n not in crashed)

    await set_image(custom, NEW_IMAGE)  # fix forward: the crashing pod is upgraded again, then the others
    await wait_for(
        lambda: status_is(matchedPods=3, updatedPods=3, readyPods=3, updatedReadyPods=3),
        within=30,
        what="all three on the fixed image",
    )
    after = await read_pods(core)
    for name in names:
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert container(after[name], "app")["restartCount"] == 0
        assert container(after[name], "tools")["image"] == NEW_IMAGE
    assert stack.dead() == []


async def test_watcher_and_planner_killed_mid_rollout_resume_without_repeating_anything(
    stack: Stack, webhook: RunningWebhook, k8s_client: client.ApiClient, store: EventStore
) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    core = client.CoreV1Api(k8s_client)
    sidecarset = seed("sidecarset-test-sidecarset.yaml")
    sidecarset["spec"]["updateStrategy"] = {"type": "RollingUpdate", "maxUnavailable": 1, "partition": 0}
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, sidecarset
    )
    await wait_for(
        lambda: _async(any(s.name == NAME for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("watcher", "planner", "executor", "auditor")
    for name in PODS:
        pod = seed("pod-test-pod.yaml")
        pod["metadata"]["name"] = name
        await core.create_namespaced_pod("default", body=cast(Any, pod))

    async def status_is(**expected: int) -> bool:
        obj = await custom.get_cluster_custom_object(
            SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, NAME
        )
        current = cast(dict[str, Any], obj).get("status") or {}
        return all(current.get(k) == v for k, v in expected.items())

    await wait_for(lambda: status_is(matchedPods=4, updatedPods=4, readyPods=4), what="four ready pods")
    await set_image(custom, NEW_IMAGE)

    async def requested() -> list[PodActionRequested]:
        return [
            s.envelope.payload
            for s in await store.read_stream(registry.SIDECARSET.decisions_stream("", NAME))
            if isinstance(s.envelope.payload, PodActionRequested)
        ]

    await wait_for(requested, what="the first upgrade requested")
    await stack.kill("watcher")
    await stack.kill("planner")
    first = (await requested())[0]

    async def applied_unwatched() -> bool:
        # The executor applies the upgrade and the kubelet restarts the sidecar: the watcher misses it.
        pod = (await read_pods(core))[first.pod]
        return spec_image(pod, "tools") == NEW_IMAGE

    await wait_for(applied_unwatched, what="the first upgrade applied while the watcher is down")
    await stack.start("watcher", "planner")
    await wait_for(
        lambda: status_is(matchedPods=4, updatedPods=4, readyPods=4, updatedReadyPods=4),
        within=40,
        what="all four upgraded after the restart",
    )
    actions = await requested()
    assert sorted(a.pod for a in actions) == PODS  # each pod upgraded exactly once
    assert {
        (r["terminals"], r["applied"]) for r in await audit.action_terminals(stack.settings.database_url)
    } == {(1, 1)}
    pods = await read_pods(core)
    assert all(container(p, "tools")["restartCount"] == 1 for p in pods.values())
    assert all(container(p, "app")["restartCount"] == 0 for p in pods.values())
    streams = [
        [s.envelope for s in await store.read_stream(stream)]
        for stream in (
            registry.SIDECARSET.observed_stream("", NAME),
            registry.SIDECARSET.actions_stream("", NAME),
            registry.SIDECARSET.decisions_stream("", NAME),
        )
    ]
    report = verify_streams(SIDECARSET, NAME, *streams)
    assert report.clean, report.divergence
    completed = [
        e.payload
        for e in streams[2]
        if isinstance(e.payload, RolloutCompleted) and e.payload.outcome == "succeeded"
    ]
    assert completed and completed[-1].rollout_id == actions[0].rollout_id  # the rollout is recorded as done
    assert stack.dead() == []


def native_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["status"].get("initContainerStatuses") or [] if c["name"] == name)


def native_spec_image(pod: dict[str, Any], name: str) -> str:
    return str(next(c["image"] for c in pod["spec"]["initContainers"] if c["name"] == name))


async def test_a_native_sidecar_of_cloneset_pods_upgrades_in_place_in_batches(
    stack: Stack, webhook: RunningWebhook, cluster: Cluster, k8s_client: client.ApiClient, store: EventStore
) -> None:
    """A native sidecar (init container with restartPolicy Always) under RollingUpdate, partition 1 and
    maxUnavailable 2 over a 4-pod CloneSet: three pods get the new image in place, at most two at once,
    each pod keeping its UID and app container; the trail reads back and replays as for ordinary sidecars."""
    custom = client.CustomObjectsApi(k8s_client)
    native = "mesh"
    proxy = {"name": "proxy", "image": "envoy:1.30", "restartPolicy": "Always"}
    sidecarset = {
        "apiVersion": ss.API_VERSION,
        "kind": "SidecarSet",
        "metadata": {"name": native},
        "spec": {
            "selector": {"matchLabels": {"app": "sample"}},
            "initContainers": [proxy],
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 2, "partition": 1},
        },
    }
    await custom.create_cluster_custom_object(
        SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, sidecarset
    )
    await wait_for(
        lambda: _async(any(s.name == native for s in webhook.state.sidecarsets.snapshot())),
        what="the webhook to see the SidecarSet",
    )
    await stack.start("watcher", "planner", "executor", "auditor")
    await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", replicas=4))

    async def settled(image: str, count: int) -> dict[str, dict[str, Any]] | None:
        pods = await cluster.pods("sample")
        if len(pods) != 4 or not all(running_ready(p) for p in pods.values()):
            return None
        running = [p for p in pods.values() if native_status(p, "proxy").get("image") == image]
        return (
            pods
            if len(running) == count and all(native_status(p, "proxy")["ready"] for p in running)
            else None
        )

    before = await wait_for(lambda: settled("envoy:1.30", 4), what="four ready CloneSet pods")
    assert all([c["name"] for c in p["spec"]["initContainers"]] == ["proxy"] for p in before.values())
    cloneset_actions_before = await _cloneset_actions(store)

    await custom.patch_cluster_custom_object(
        SIDECARSET_GROUP,
        SIDECARSET_VERSION,
        SIDECARSET_PLURAL,
        native,
        {"spec": {"initContainers": [{**proxy, "image": "envoy:1.31"}]}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )

    async def status_is(**expected: Any) -> bool:
        obj = await custom.get_cluster_custom_object(
            SIDECARSET_GROUP, SIDECARSET_VERSION, SIDECARSET_PLURAL, native
        )
        current = cast(dict[str, Any], obj).get("status") or {}
        return all(current.get(k) == v for k, v in expected.items())

    after = await wait_for(lambda: settled("envoy:1.31", 3), within=30, what="three native sidecars upgraded")
    await wait_for(
        lambda: status_is(matchedPods=4, updatedPods=3, updatedReadyPods=3), what="the SidecarSet status"
    )
    await wait_for(lambda: nothing_left_to_plan(store, SIDECARSET, native), what="nothing left to plan")
    await wait_for(
        lambda: nothing_left_to_plan(store, CLONESET, "default/sample"), what="nothing left to plan"
    )
    assert await _cloneset_actions(store) == cloneset_actions_before  # the CloneSet planner did nothing
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }
    upgraded = sorted(n for n, p in after.items() if native_spec_image(p, "proxy") == "envoy:1.31")
    assert len(upgraded) == 3
    for name, pod in after.items():
        assert container(pod, "nginx")["restartCount"] == 0
        assert container(pod, "nginx")["containerID"] == container(before[name], "nginx")["containerID"]
        restarted = native_status(pod, "proxy")
        assert restarted["restartCount"] == (1 if name in upgraded else 0)
        assert (restarted["imageID"] != native_status(before[name], "proxy")["imageID"]) == (name in upgraded)

    # Batches: maxUnavailable 2 held over the watcher's observations, and the requests say the same.
    observed = await store.read_stream(registry.SIDECARSET.observed_stream("", native))
    assert max_unavailable_at_once(observed) <= 2
    decided = await store.read_stream(registry.SIDECARSET.decisions_stream("", native))
    requests = [s.envelope.payload for s in decided if isinstance(s.envelope.payload, PodActionRequested)]
    assert sorted(r.pod for r in requests) == upgraded
    batches: list[int] = []
    for stored in decided:
        if isinstance(stored.envelope.payload, RoundPlanned):
            batches.append(0)
        elif isinstance(stored.envelope.payload, PodActionRequested):
            batches[-1] += 1
    assert [b for b in batches if b] == [2, 1]  # two at once, then the third once they were back
    assert all(
        r.details["patch"]["spec"] == {"initContainers": [{"name": "proxy", "image": "envoy:1.31"}]}
        for r in requests
    )
    # The trail: each upgrade an in-place row finished once its restarted sidecar was back, maxUnavailable
    # never exceeded; every round replays to the same decisions.
    connection = await asyncpg.connect(asyncpg_url(stack.settings.database_url))
    try:
        rows = await connection.fetch(
            "SELECT pod, update_kind, outcome, duration FROM pod_actions"
            " WHERE kind = 'SidecarSet' AND workload = $1 AND in_place",
            native,
        )
        assert sorted(r["pod"] for r in rows) == upgraded
        assert {(r["update_kind"], r["outcome"]) for r in rows} == {("in place", "succeeded")}
        assert all(r["duration"] is not None for r in rows)
        exceeded = await audit_queries.max_unavailable_exceeded(connection)
        assert [r for r in exceeded if r["workload"] == native] == []
    finally:
        await connection.close()
    outcomes = [s.envelope for s in await store.read_stream(registry.SIDECARSET.actions_stream("", native))]
    report = verify_streams(
        SIDECARSET, native, [s.envelope for s in observed], outcomes, [s.envelope for s in decided]
    )
    assert report.clean and report.rounds >= 2, report.divergence
