"""simcluster serves events.k8s.io/v1 Events as a view of its core/v1 Events: an Event written through
events.k8s.io (as rollbook's executor writes them) is listed through core/v1 with the field selector
`kubectl describe` uses, and reads back through events.k8s.io as written."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from services.simcluster import SimCluster


async def test_an_events_v1_event_is_what_kubectl_describe_lists(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.0123456789abcdef", "namespace": "default"},
        "eventTime": "2026-12-06T06:00:00.000000Z",
        "reportingController": "rollbook.io/rollbook",
        "reportingInstance": "executor-1",
        "action": "Rollout",
        "reason": "RolloutStarted",
        "note": "rollout default/web@web-b#1 started",
        "type": "Normal",
        "regarding": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web",
                      "namespace": "default", "uid": "uid-web"},
        "deprecatedCount": 1,
    }  # fmt: skip
    events = client.EventsV1Api(k8s_client)
    await events.create_namespaced_event("default", body)  # type: ignore[arg-type]
    core = client.CoreV1Api(k8s_client)
    listed = await core.list_namespaced_event(
        "default",
        field_selector="involvedObject.name=web,involvedObject.namespace=default,"
        "involvedObject.kind=CloneSet,involvedObject.uid=uid-web",
        _preload_content=False,
    )
    items = (await listed.json())["items"]
    assert [(e["reason"], e["message"], e["count"], e["involvedObject"]["uid"]) for e in items] == [
        ("RolloutStarted", "rollout default/web@web-b#1 started", 1, "uid-web")
    ]
    await events.patch_namespaced_event(
        "web.0123456789abcdef", "default",
        {"series": {"count": 3, "lastObservedTime": "2026-12-06T06:01:00.000000Z"}, "deprecatedCount": 3},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )  # fmt: skip
    read = await events.read_namespaced_event("web.0123456789abcdef", "default", _preload_content=False)
    event = await read.json()
    assert event["apiVersion"] == "events.k8s.io/v1" and event["note"] == body["note"]
    assert event["series"]["count"] == 3 and event["regarding"]["kind"] == "CloneSet"
