"""The flight recorder (docs/kinds.md): Deployments and StatefulSets driven by simcluster's controllers and
kubectl are recorded by the watcher as rollouts, revisions, steps and pod actions in the SQL views."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio import client

from services.cli.ui import make_app
from services.infra.database import asyncpg_url
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import ObjectObserved, PodActionObserved
from services.simcluster import SimCluster, SimConfig
from services.watcher.recorder import Recorder
from services.watcher.service import Watcher
from tests.cli.test_commands import rollbook
from tests.plugins.kube_answers import Listing
from tests.plugins.servers import ServerUrls
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import e2e_database
from tests.simcluster.helpers import Kubectl

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def trail(server_urls: ServerUrls) -> AsyncIterator[tuple[str, EventStore]]:
    """A database of its own: each test's simcluster starts from the same seed, so the same uids, and
    observation ids derive from them."""
    async with e2e_database(server_urls.database_url) as url:
        store = await EventStore.connect(url)
        try:
            yield url, store
        finally:
            await store.close()


@asynccontextmanager
async def recording(store: EventStore, api: client.ApiClient, tmp_path: Path) -> AsyncIterator[Watcher]:
    """The watcher with the recorder on for every Deployment and StatefulSet, in this event loop."""
    async with running(Watcher(Settings(data_dir=str(tmp_path), record="all"), store, api)) as watcher:
        yield watcher


@asynccontextmanager
async def running(watcher: Watcher) -> AsyncIterator[Watcher]:
    """The watcher once it has listed every kind: what happens from then on comes on its watches."""
    await watcher.rebuild()
    tasks = [asyncio.create_task(watcher.run_kind(k)) for k in watcher.kinds]
    tasks += [asyncio.create_task(watcher.append_queued()), asyncio.create_task(watcher.record_dirty())]
    try:
        listed = [k.initial_list_done.wait() for k in watcher.kinds]
        await asyncio.wait_for(asyncio.gather(*listed), 30)
        yield watcher
    finally:
        crashed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert not crashed, [t.exception() for t in crashed]  # a watch that died would stop recording


async def until(
    database_url: str, sql: str, args: tuple[Any, ...], check: Callable[[list[Any]], bool], within: float = 30
) -> list[Any]:
    """The rows of ``sql`` once ``check`` holds (the views are correct the moment an event commits)."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            rows = [dict(r) for r in await connection.fetch(sql, *args)]
            if check(rows):
                return rows
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"not recorded within {within}s: {rows!r}")
            await asyncio.sleep(0.05)
    finally:
        await connection.close()


async def namespace(api: client.ApiClient) -> str:
    name = f"rec-{uuid.uuid4().hex[:8]}"
    await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


ROLLOUTS = (
    "SELECT rollout_id, from_revision, to_revision, outcome, driven_by, strategy_type FROM rollouts"
    " WHERE kind = $1 AND namespace = $2 AND workload = $3 ORDER BY started_position"
)


async def test_set_image_then_rollout_undo_is_two_rollouts_with_steps_and_pod_actions(
    trail: tuple[str, EventStore],
    k8s_client: client.ApiClient,
    kubectl: Kubectl,
    simcluster_kubeconfig: str,
    tmp_path: Path,
) -> None:
    database_url, event_store = trail
    ns = await namespace(k8s_client)
    async with recording(event_store, k8s_client, tmp_path):
        await kubectl("-n", ns, "create", "deployment", "web", "--image=nginx:1.25", "--replicas=3")
        await kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl("-n", ns, "set", "image", "deployment/web", "nginx=nginx:1.26")
        await kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl("-n", ns, "rollout", "undo", "deployment/web")
        await kubectl("-n", ns, "rollout", "status", "deployment/web", "--timeout=60s")
        rollouts = await until(
            database_url,
            ROLLOUTS,
            ("Deployment", ns, "web"),
            lambda rows: len(rows) == 2 and all(r["outcome"] == "succeeded" for r in rows),
        )
    first, undo = rollouts
    managers = await until(
        database_url,
        "SELECT payload->'changed_by'->>'manager' AS manager FROM events WHERE type = 'RolloutStarted'"
        " AND stream = $1 ORDER BY global_position",
        (f"Deployment/{ns}/web/recorded",),
        lambda rows: len(rows) == 2,
    )
    # who changed the spec: `set image` names its field manager; `rollout undo` is known by its User-Agent
    assert [m["manager"] for m in managers] == ["kubectl-set", "kubectl"]
    assert undo["to_revision"] == first["from_revision"] and undo["from_revision"] == first["to_revision"]
    assert {r["driven_by"] for r in rollouts} == {"observed"}
    assert {r["strategy_type"] for r in rollouts} == {"RollingUpdate"}

    revisions = await until(
        database_url,
        "SELECT revision, number, images FROM revisions WHERE kind = 'Deployment' AND namespace = $1"
        " ORDER BY position",
        (ns,),
        lambda rows: len(rows) == 3,
    )
    assert [(r["revision"], r["number"], r["images"]) for r in revisions] == [
        (first["from_revision"], 1, ["nginx:1.25"]),
        (first["to_revision"], 2, ["nginx:1.26"]),
        (first["from_revision"], 3, ["nginx:1.25"]),  # the undo re-numbers the first ReplicaSet
    ]

    for rollout in rollouts:
        steps = await until(
            database_url,
            "SELECT partition, expected_updated, max_unavailable, max_surge FROM partition_steps"
            " WHERE rollout_id = $1 ORDER BY position",
            (rollout["rollout_id"],),
            lambda rows: bool(rows),
        )
        # The new ReplicaSet scaled up in steps of at most maxSurge (25% of 3: 1), to all 3 replicas.
        assert steps[-1] == {"partition": 0, "expected_updated": 3, "max_unavailable": 0, "max_surge": 1}
        assert [s["expected_updated"] for s in steps] == sorted(s["expected_updated"] for s in steps)
        actions = await until(
            database_url,
            "SELECT action, pod FROM pod_actions WHERE rollout_id = $1 ORDER BY position",
            (rollout["rollout_id"],),
            lambda rows: (
                sum(r["action"] == "createPod" for r in rows) == 3
                and sum(r["action"] == "deletePod" for r in rows) == 3
            ),
        )
        created = {r["pod"] for r in actions if r["action"] == "createPod"}
        assert all(pod.startswith(rollout["to_revision"] + "-") for pod in created)

    # `rollbook get`: the Deployment as a tree, at its update revision, with the rollout that put it there.
    code, output = await rollbook(
        "get",
        f"deployment/{ns}/web",
        ROLLBOOK_DATABASE_URL=database_url,
        ROLLBOOK_KUBECONFIG=simcluster_kubeconfig,
    )
    assert code == 0, output
    assert f"Deployment {ns}/web  replicas 3  updated 3/3  available 3/3" in output, output
    assert f"rollout {undo['rollout_id']}" in output, output
    assert f"revision {undo['to_revision'].rpartition('-')[2]} (update)" in output, output

    code, output = await rollbook("history", f"deployment/{ns}/web", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0 and output.count("RollingUpdate (observed)") == 2, output
    code, output = await rollbook("history", f"statefulset/{ns}/web", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 1 and f"no rollouts or pod actions recorded for {ns}/web" in output, (
        output
    )  # the kind counts

    # `rollbook replay`: the trail folded again from the observations is the trail stored.
    code, output = await rollbook("replay", f"Deployment/{ns}/web", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0, output
    assert output.splitlines()[-1].startswith(f"OK Deployment {ns}/web: "), output
    assert sum("RolloutStarted" in line for line in output.splitlines()) == 2, output
    code, output = await rollbook("verify", f"deployment/{ns}/web", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0 and output.startswith(f"OK Deployment {ns}/web: "), output

    # The timeline page: both rollouts listed, each with its steps, pod actions and states.
    pool = await asyncpg.create_pool(asyncpg_url(database_url), min_size=1, max_size=2)
    async with pool, TestClient(TestServer(make_app(pool, event_store))) as ui:
        listed = await (await ui.get("/api/rollouts")).json()
        mine = [r for r in listed if r["kind"] == "Deployment" and r["namespace"] == ns]
        assert [r["rollout_id"] for r in mine] == [undo["rollout_id"], first["rollout_id"]]  # newest first
        for rollout in (first, undo):
            answer = await ui.get("/api/rollout", params={"id": rollout["rollout_id"]})
            assert answer.status == 200, await answer.text()
            page = await answer.json()
            assert page["rollout"]["kind"] == "Deployment"
            assert sum(a["action"] == "createPod" for a in page["actions"]) == 3
            assert page["steps"][-1]["expected_updated"] == 3
            assert page["states"]
            assert all(s["stream"].startswith(f"Deployment/{ns}/web/") for s in page["states"])
            # Each event carries the pods it changed (every pod at the first): the page rebuilds them.
            pods: dict[str, Any] = {}
            for state in page["states"]:
                for pod, summary in state["pods"].items():
                    if summary is None:
                        del pods[pod]
                    else:
                        pods[pod] = summary
            assert pods and all(summary["revision"] for summary in pods.values())


async def test_a_rollout_stuck_past_its_progress_deadline_is_on_record(
    make_simcluster: MakeSimCluster, trail: tuple[str, EventStore], tmp_path: Path
) -> None:
    database_url, event_store = trail
    sim: SimCluster = await make_simcluster(SimConfig(failing_images=("*:broken",)))
    async with await api_client_for(sim) as api, recording(event_store, api, tmp_path):
        ns = await namespace(api)
        apps = client.AppsV1Api(api)
        body = {
            "metadata": {"name": "stuck"},
            "spec": {
                "replicas": 2,
                "progressDeadlineSeconds": 1,
                "selector": {"matchLabels": {"app": "stuck"}},
                "template": {
                    "metadata": {"labels": {"app": "stuck"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
                },
            },
        }
        await apps.create_namespaced_deployment(ns, body)
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:broken"}]}}}}
        await until(
            database_url,
            "SELECT count(*) AS n FROM revisions WHERE kind = 'Deployment' AND namespace = $1",
            (ns,),
            lambda rows: rows[0]["n"] == 1,
        )
        await apps.patch_namespaced_deployment("stuck", ns, patch)
        deadlines = await until(
            database_url,
            "SELECT rollout_id, progress_deadline_seconds FROM progress_deadlines WHERE namespace = $1"
            " AND workload = 'stuck'",
            (ns,),
            lambda rows: len(rows) == 1,
        )
        rollouts = await until(
            database_url, ROLLOUTS, ("Deployment", ns, "stuck"), lambda rows: len(rows) == 1
        )
        # `rollbook get -w` ends as `kubectl rollout status` does: the rollout failed (exit 4).
        code, output = await rollbook(
            "get", "-w", f"deployment/{ns}/stuck", "--timeout", "60",
            ROLLBOOK_DATABASE_URL=database_url, ROLLBOOK_KUBECONFIG=str(sim.kubeconfig_path),
        )  # fmt: skip
        assert code == 4, output
        assert "rollout failed or superseded (exit 4)" in output, output
    assert deadlines[0]["rollout_id"] == rollouts[0]["rollout_id"]
    assert deadlines[0]["progress_deadline_seconds"] == 1
    assert rollouts[0]["outcome"] == "in progress"  # the deadline is on record; the rollout is not over


async def test_statefulset_partition_steps_and_pods_updated_from_the_highest_ordinal(
    trail: tuple[str, EventStore], k8s_client: client.ApiClient, simcluster_kubeconfig: str, tmp_path: Path
) -> None:
    database_url, event_store = trail
    ns = await namespace(k8s_client)
    apps = client.AppsV1Api(k8s_client)

    async def partition(value: int) -> None:
        await apps.patch_namespaced_stateful_set(
            "db",
            ns,
            {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": value}}}},
        )

    async with recording(event_store, k8s_client, tmp_path):
        body = {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 3,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "db", "image": "postgres:16"}]},
                },
            },
        }
        await apps.create_namespaced_stateful_set(ns, body)
        await until(
            database_url,
            "SELECT count(*) AS n FROM pod_actions WHERE namespace = $1 AND action = 'createPod'",
            (ns,),
            lambda rows: rows[0]["n"] == 3,
        )
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}}}
        await apps.patch_namespaced_stateful_set("db", ns, patch)
        rollout = await until(database_url, ROLLOUTS, ("StatefulSet", ns, "db"), lambda rows: len(rows) == 1)
        rollout_id = rollout[0]["rollout_id"]
        recreated: Callable[[int], Awaitable[list[Any]]] = lambda n: until(  # noqa: E731
            database_url,
            "SELECT pod FROM pod_actions WHERE rollout_id = $1 AND action = 'recreatePod' ORDER BY position",
            (rollout_id,),
            lambda rows: len(rows) == n,
        )
        assert [r["pod"] for r in await recreated(1)] == ["db-2"]
        # `get -w` ends once the pods the partition lets through are updated and available, as `kubectl
        # rollout status` says of a partitioned roll out.
        code, output = await rollbook(
            "get", "-w", f"statefulset/{ns}/db", "--timeout", "60",
            ROLLBOOK_DATABASE_URL=database_url, ROLLBOOK_KUBECONFIG=simcluster_kubeconfig,
        )  # fmt: skip
        assert code == 0, output
        assert f"StatefulSet {ns}/db  replicas 3  updated 1/1" in output and "partition 2" in output, output
        await partition(0)
        assert [r["pod"] for r in await recreated(3)] == ["db-2", "db-1", "db-0"]
        await until(
            database_url, ROLLOUTS, ("StatefulSet", ns, "db"), lambda rows: rows[0]["outcome"] == "succeeded"
        )
    steps = await until(
        database_url,
        "SELECT partition, expected_updated, max_unavailable FROM partition_steps WHERE rollout_id = $1"
        " ORDER BY position",
        (rollout_id,),
        lambda rows: len(rows) == 2,
    )
    assert steps == [
        {"partition": 2, "expected_updated": 1, "max_unavailable": 1},
        {"partition": 0, "expected_updated": 3, "max_unavailable": 1},
    ]
    code, output = await rollbook("replay", f"statefulset/{ns}/db", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0 and output.splitlines()[-1].startswith(f"OK StatefulSet {ns}/db: "), output


async def test_only_labelled_workloads_are_recorded_without_their_secrets(
    trail: tuple[str, EventStore], k8s_client: client.ApiClient, tmp_path: Path
) -> None:
    database_url, event_store = trail
    ns = await namespace(k8s_client)
    apps = client.AppsV1Api(k8s_client)

    def web(name: str, image: str, **labels: str) -> dict[str, Any]:
        container = {"name": "app", "image": image, "env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
            },
        }

    for name, labels in (("marked", {"rollbook.io/record": "true"}), ("plain", {})):
        await apps.create_namespaced_deployment(ns, web(name, "nginx:1.25", **labels))
    for name in ("marked", "plain"):  # running before the watcher starts: its lists may see pods first
        await until_ready(apps, ns, name)
    watcher = Watcher(Settings(data_dir=str(tmp_path), record="label"), event_store, k8s_client)
    async with running(watcher):
        observed = "SELECT payload->>'kind' AS kind FROM events WHERE stream = $1"
        await until(
            database_url,
            observed,
            (f"Deployment/{ns}/marked/observed",),
            lambda rows: (
                sum(r["kind"] == "Pod" for r in rows) == 2
            ),  # held until the Deployment showed its label
        )
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}}}
        await apps.patch_namespaced_deployment("marked", ns, patch)
        await apps.patch_namespaced_deployment("plain", ns, patch)
        await until(
            database_url,
            ROLLOUTS,
            ("Deployment", ns, "marked"),
            lambda rows: bool(rows) and rows[0]["outcome"] == "succeeded",
        )
        await until_ready(apps, ns, "plain")
    streams = await until(
        database_url,
        "SELECT DISTINCT stream FROM events WHERE stream LIKE $1 ORDER BY stream",
        (f"%/{ns}/%",),
        lambda rows: bool(rows),
    )
    assert [r["stream"] for r in streams] == [
        f"Deployment/{ns}/marked/observed",
        f"Deployment/{ns}/marked/recorded",
    ]
    leaked = await until(
        database_url,
        "SELECT count(*) AS n FROM events WHERE stream LIKE $1 AND payload::text LIKE '%hunter2%'",
        (f"%/{ns}/%",),
        lambda rows: True,
    )
    assert leaked == [{"n": 0}]  # every recorded env value is a digest (services/model/redaction.py)
    code, output = await rollbook("history", f"{ns}/marked", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0, output
    assert "RollingUpdate (observed)" in output and "succeeded" in output, output


async def until_ready(apps: client.AppsV1Api, ns: str, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        d = await apps.read_namespaced_deployment(name, ns)
        status = d.status
        if (
            (status.observed_generation or 0) >= d.metadata.generation
            and status.updated_replicas == status.available_replicas == status.replicas == d.spec.replicas
        ):
            return
        assert asyncio.get_running_loop().time() < deadline, f"{name} not rolled out: {status}"
        await asyncio.sleep(0.05)


async def test_a_pod_seen_before_its_labelled_deployment_is_recorded_once_the_label_shows(
    trail: tuple[str, EventStore], tmp_path: Path
) -> None:
    event_store = trail[1]
    ns = f"held-{uuid.uuid4().hex[:8]}"
    api = client.ApiClient()  # never called: the watch events are fed in
    watcher = Watcher(Settings(data_dir=str(tmp_path), record="label"), event_store, api)
    appender = asyncio.create_task(watcher.append_queued())

    def kind_watch(kind: str) -> Any:
        return next(k for k in watcher.kinds if k.kind == kind)

    owner = {"controller": True, "kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "web-abc"}
    pod = {
        "metadata": {
            "namespace": ns, "name": "web-abc-1", "uid": f"{ns}-p", "resourceVersion": "1",
            "labels": {"pod-template-hash": "abc"}, "ownerReferences": [owner],
        },
    }  # fmt: skip
    metadata: dict[str, Any] = {"namespace": ns, "name": "web", "uid": f"{ns}-d", "resourceVersion": "2"}
    deployment = {"metadata": {**metadata, "labels": {}}, "spec": {"replicas": 1}}
    stream = f"Deployment/{ns}/web/observed"
    try:
        await watcher._on_watch_event(kind_watch("Pod"), "ADDED", pod)
        await watcher._on_watch_event(kind_watch("Deployment"), "ADDED", deployment)
        await watcher._idle.wait()
        assert await event_store.read_stream(stream) == []  # not labelled: nothing of it is recorded
        labelled = {
            **deployment,
            "metadata": {**metadata, "resourceVersion": "3", "labels": {"rollbook.io/record": "true"}},
        }
        await watcher._on_watch_event(kind_watch("Deployment"), "MODIFIED", labelled)
        await watcher._idle.wait()
        payloads = [e.envelope.payload for e in await event_store.read_stream(stream)]
        stored = [(p.kind, p.change, p.born) for p in payloads if isinstance(p, ObjectObserved)]
        # Neither is stored born: the Deployment was labelled, not created, and the pod waited for it.
        assert stored == [("Deployment", "ADDED", msgspec.UNSET), ("Pod", "ADDED", msgspec.UNSET)]
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()


async def test_a_watch_added_of_an_object_the_restarted_watcher_knows_is_not_born(
    trail: tuple[str, EventStore], tmp_path: Path
) -> None:
    """A watcher restarted (its cache rebuilt from the store) may be told ADDED of an object it already
    recorded (a watch begun from an old resourceVersion). That is no creation: the change is stored as
    MODIFIED, not ``born``, so no trail takes it for a new pod."""
    event_store = trail[1]
    ns = f"known-{uuid.uuid4().hex[:8]}"
    api = client.ApiClient()  # never called: the watch events are fed in
    settings = Settings(data_dir=str(tmp_path), record="all")
    metadata: dict[str, Any] = {"namespace": ns, "name": "web", "uid": f"{ns}-d", "resourceVersion": "1"}
    deployment = {"metadata": metadata, "spec": {"replicas": 1}}
    stream = f"Deployment/{ns}/web/observed"
    first = Watcher(settings, event_store, api)
    appender = asyncio.create_task(first.append_queued())
    try:
        await first._on_watch_event(
            next(k for k in first.kinds if k.kind == "Deployment"), "ADDED", deployment
        )
        await first._idle.wait()
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
    restarted = Watcher(settings, event_store, api)
    await restarted.rebuild()
    appender = asyncio.create_task(restarted.append_queued())
    try:
        scaled = {"metadata": {**metadata, "resourceVersion": "2"}, "spec": {"replicas": 2}}
        await restarted._on_watch_event(
            next(k for k in restarted.kinds if k.kind == "Deployment"), "ADDED", scaled
        )
        await restarted._idle.wait()
        payloads = [e.envelope.payload for e in await event_store.read_stream(stream)]
        stored = [(p.change, p.born) for p in payloads if isinstance(p, ObjectObserved)]
        assert stored == [("ADDED", True), ("MODIFIED", msgspec.UNSET)]
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()


@pytest.mark.parametrize("announced", [True, False], ids=["watched", "listed"])
async def test_a_pod_created_in_the_second_before_its_trail_began_is_created_only_if_the_watch_announced_it(
    trail: tuple[str, EventStore], tmp_path: Path, announced: bool
) -> None:
    """A StatefulSet's pod whose ADDED comes before the StatefulSet's, in a later second than the pod's
    creationTimestamp (the CI run that recorded 2 createPod of 3). From the watch it was created while
    rollbook recorded; from the watcher's first list it was there before."""
    event_store = trail[1]
    ns = f"born-{uuid.uuid4().hex[:8]}"
    api = client.ApiClient()  # never called: the watch events and lists are fed in
    watcher = Watcher(Settings(data_dir=str(tmp_path), record="all"), event_store, api)
    appender = asyncio.create_task(watcher.append_queued())

    def kind_watch(kind: str) -> Any:
        return next(k for k in watcher.kinds if k.kind == kind)

    created = (datetime.now(UTC) - timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata = {"namespace": ns, "name": "db", "uid": f"{ns}-s", "resourceVersion": "1", "generation": 1}
    status = {"observedGeneration": 1, "updateRevision": "db-1", "currentRevision": "db-1"}
    # No creationTimestamp: only the pod's own observation can say it was created under watch.
    sts = {"kind": "StatefulSet", "metadata": metadata, "spec": {"replicas": 1}, "status": status}
    owner = {
        "controller": True,
        "kind": "StatefulSet",
        "apiVersion": "apps/v1",
        "name": "db",
        "uid": f"{ns}-s",
    }
    pod = {
        "kind": "Pod",
        "metadata": {
            "namespace": ns, "name": "db-0", "uid": f"{ns}-p", "resourceVersion": "2",
            "labels": {"controller-revision-hash": "db-1"}, "ownerReferences": [owner],
            "creationTimestamp": created,
        },
    }  # fmt: skip
    observed = f"StatefulSet/{ns}/db/observed"
    try:
        if announced:
            await watcher._on_watch_event(kind_watch("Pod"), "ADDED", pod)
            await watcher._on_watch_event(kind_watch("StatefulSet"), "ADDED", sts)
        else:
            for kind, obj in (("Pod", pod), ("StatefulSet", sts)):

                async def listed(_obj: dict[str, Any] = obj, **_: Any) -> Listing:
                    return Listing([_obj])

                kind_watch(kind).list_func = listed
                await watcher.relist(kind_watch(kind))
        await watcher._idle.wait()
        payloads = [e.envelope.payload for e in await event_store.read_stream(observed)]
        first = payloads[0]
        assert isinstance(first, ObjectObserved) and first.name == "db-0"  # the trail's first observation
        assert first.born is (True if announced else msgspec.UNSET)
        await Recorder(event_store).record(observed)
    finally:
        appender.cancel()
        await asyncio.gather(appender, return_exceptions=True)
        await api.close()
    recorded = await event_store.read_stream(f"StatefulSet/{ns}/db/recorded")
    actions = [
        e.envelope.payload.action for e in recorded if isinstance(e.envelope.payload, PodActionObserved)
    ]
    assert actions == (["createPod"] if announced else [])
