"""Watch semantics: resume, 410 Gone, selectors, bookmarks, timeouts, cut streams."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster, SimConfig, Timing

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import pod_manifest

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def collect(stream: watch.Watch, count: int, within: float = 5.0) -> list[dict]:
    events: list[dict] = []

    async def run() -> None:
        async for event in stream:
            events.append(event)
            if len(events) >= count:
                return

    await asyncio.wait_for(run(), within)
    return events


async def test_too_old_watch_gets_410_then_relist_works(
    k8s_client: client.ApiClient, simcluster: SimCluster
) -> None:
    core = client.CoreV1Api(k8s_client)
    listed = await core.list_namespaced_pod("default")
    old_rv = listed.metadata.resource_version
    await core.create_namespaced_pod("default", pod_manifest("w410"))
    simcluster.compact()
    with pytest.raises(ApiException) as caught:
        async for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=old_rv, timeout_seconds=2
        ):
            pass
    assert caught.value.status == 410
    relisted = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in relisted.items] == ["w410"]
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        resource_version=relisted.metadata.resource_version,
        timeout_seconds=5,
    )
    await core.patch_namespaced_pod("w410", "default", {"metadata": {"labels": {"after": "relist"}}})
    events = await collect(stream, 1)
    assert events[0]["type"] == "MODIFIED"
    await stream.close()


async def test_watch_resumed_after_disconnect_misses_nothing(
    k8s_client: client.ApiClient, simcluster: SimCluster
) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "resume"}})
    listed = await core.list_namespaced_pod("resume")
    seen: list[tuple[str, str]] = []
    resumes = 0
    rv = listed.metadata.resource_version
    created = [f"r{i}" for i in range(12)]

    async def writer() -> None:
        for i, name in enumerate(created):
            await core.create_namespaced_pod("resume", pod_manifest(name), _request_timeout=5)
            if i % 4 == 3:
                simcluster.cut_watches()  # the stream drops mid-flight
            await asyncio.sleep(0)

    task = asyncio.create_task(writer())
    while len({n for t, n in seen if t == "ADDED"}) < len(created):
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "resume", resource_version=rv, timeout_seconds=5
        )
        async for event in stream:
            rv = event["object"].metadata.resource_version
            seen.append((event["type"], event["object"].metadata.name))
        resumes += 1
    await task
    added = [n for t, n in seen if t == "ADDED"]
    assert added == created  # every pod, once, in order
    assert resumes >= 2


async def test_watch_respects_label_selector_and_reports_leaving(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "wsel"}})
    rv = (await core.list_namespaced_pod("wsel")).metadata.resource_version
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "wsel", label_selector="app=web", resource_version=rv, timeout_seconds=5
    )
    await core.create_namespaced_pod("wsel", pod_manifest("other", {"app": "db"}))
    await core.create_namespaced_pod("wsel", pod_manifest("mine", {"app": "web"}))
    events = await collect(stream, 1)
    assert (events[0]["type"], events[0]["object"].metadata.name) == ("ADDED", "mine")
    moved = await core.patch_namespaced_pod("mine", "wsel", {"metadata": {"labels": {"app": "moved"}}})
    while True:
        event = (await collect(stream, 1))[0]
        if event["type"] != "MODIFIED":  # kubelet status updates arrive as MODIFIED first
            break
    assert (event["type"], event["object"].metadata.name) == ("DELETED", "mine")
    # kube-apiserver's cacheWatcher.convertToWatchEvent (staging/src/k8s.io/apiserver/pkg/storage/cacher/
    # cache_watcher.go): the DELETED event of an object leaving the selection carries its previous content,
    # the one that matched, stamped with the resourceVersion of the change that moved it out.
    assert event["object"].metadata.labels == {"app": "web"}
    assert event["object"].metadata.resource_version == moved.metadata.resource_version
    await stream.close()


async def test_initial_watch_without_resource_version_lists_existing(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "winit"}})
    await core.create_namespaced_pod("winit", pod_manifest("existing"))
    stream = watch.Watch().stream(core.list_namespaced_pod, "winit", timeout_seconds=5)
    events = await collect(stream, 1)
    assert (events[0]["type"], events[0]["object"].metadata.name) == ("ADDED", "existing")
    await stream.close()


async def test_bookmarks_and_timeout(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(bookmark_interval=0.05, timing=Timing()))
    async with await api_client_for(sim) as api_client:
        custom = client.CustomObjectsApi(api_client)
        rv = (
            await custom.list_namespaced_custom_object("apps.kruise.io", "v1alpha1", "default", "clonesets")
        )["metadata"]["resourceVersion"]
        events = []
        loop = asyncio.get_running_loop()
        started = loop.time()
        async for event in watch.Watch().stream(
            custom.list_namespaced_custom_object,
            "apps.kruise.io",
            "v1alpha1",
            "default",
            "clonesets",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        ):
            events.append(event)
        assert 0.9 < loop.time() - started < 3  # timeoutSeconds ended the stream
        assert events and all(e["type"] == "BOOKMARK" for e in events)
        assert int(events[-1]["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)


async def test_watch_across_namespaces_for_pods_and_clonesets(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    custom = client.CustomObjectsApi(k8s_client)
    for namespace in ("team-a", "team-b"):
        await core.create_namespace({"metadata": {"name": namespace}})
    rv = (await core.list_pod_for_all_namespaces()).metadata.resource_version
    pods = watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=5)
    await core.create_namespaced_pod("team-a", pod_manifest("pa"))
    await core.create_namespaced_pod("team-b", pod_manifest("pb"))
    added = []
    async for event in pods:
        if event["type"] == "ADDED":
            added.append((event["object"].metadata.namespace, event["object"].metadata.name))
        if len(added) == 2:
            break
    await pods.close()
    assert added == [("team-a", "pa"), ("team-b", "pb")]
    cloneset = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "cs"},
        "spec": {
            "selector": {"matchLabels": {"app": "cs"}},
            "template": {
                "metadata": {"labels": {"app": "cs"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }
    for namespace in ("team-a", "team-b"):
        await custom.create_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", namespace, "clonesets", cloneset
        )
    listed = await custom.list_cluster_custom_object("apps.kruise.io", "v1alpha1", "clonesets")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("team-a", "cs"),
        ("team-b", "cs"),
    ]
