"""Kubernetes Events of rollout decisions (services/model/kube_events.py, services/executor/kube_events.py):
which decisions mean an Event, the rate limit with repeats counted into the Event's series, and the
executor writing them through events.k8s.io/v1 so that `kubectl describe` (core/v1, by uid) lists them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client

from services.executor.kube_events import KubeEventWriter, regarding_of
from services.model.events import (
    Envelope,
    Event,
    PartitionStepPlanned,
    RequeueScheduled,
    RolloutCompleted,
    RolloutPaused,
    RolloutProgressDeadlineExceeded,
    RolloutStarted,
    SpecRejected,
    new_event,
)
from services.model.kube_events import Create, EventIntent, EventLimiter, UpdateSeries, intent_of
from services.simcluster import SimCluster

T0 = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)
ROLLOUT = "default/web@web-b#1"


def intent_for(envelope: Envelope) -> EventIntent | None:
    """The Event the executor writes for a decision: its workload named from the stream by the registry."""
    return intent_of(envelope, regarding_of(envelope.stream))


def decided(payload: Event, seconds: float = 0, stream: str = "CloneSet/default/web") -> Envelope:
    return new_event(payload, stream=stream, stream_version=1, occurred_at=T0 + timedelta(seconds=seconds))


def test_each_rollout_decision_means_one_event() -> None:
    cases: list[tuple[Event, str, str]] = [
        (RolloutStarted(rollout_id=ROLLOUT, from_revision="web-a", to_revision="web-b", strategy={},
                        replicas=3), "RolloutStarted", "Normal"),
        (PartitionStepPlanned(rollout_id=ROLLOUT, partition=1, replicas=3, expected_updated=2,
                              max_unavailable=1, max_surge=0), "BatchPlanned", "Normal"),
        (RolloutPaused(rollout_id=ROLLOUT, reason="updateStrategy.paused"), "RolloutPaused", "Normal"),
        (RolloutCompleted(rollout_id=ROLLOUT, revision="web-b"), "RolloutFinished", "Normal"),
        (SpecRejected(field="spec.updateStrategy.partition", reason="bad", generation=5), "SpecRejected",
         "Warning"),
        (RolloutProgressDeadlineExceeded(rollout_id=ROLLOUT, revision="web-b", progress_deadline_seconds=60,
                                         progressing_since="2026-12-06T05:59:00Z"),
         "ProgressDeadlineExceeded", "Warning"),
    ]  # fmt: skip
    for payload, reason, type_ in cases:
        intent = intent_for(decided(payload))
        assert intent is not None and (intent.reason, intent.type) == (reason, type_), payload
        assert intent.regarding.key == ("CloneSet", "default", "web")
    assert intent_for(decided(RequeueScheduled(due_at=T0, reason="grace"))) is None
    sidecar = intent_for(
        decided(RolloutPaused(rollout_id="/s@s-1#1", reason="p"), stream="SidecarSet//s/decisions")
    )
    assert sidecar is not None and sidecar.regarding.key == ("SidecarSet", "", "s")
    # a redelivered decision names the same Event (written once: 409)
    envelope = decided(cases[0][0])
    assert intent_for(envelope) == intent_for(envelope)


def test_one_write_per_object_and_reason_per_interval_repeats_counted_into_the_series() -> None:
    limiter = EventLimiter(interval=30)
    paused = [
        decided(RolloutPaused(rollout_id=ROLLOUT, reason="updateStrategy.paused"), s) for s in (0, 5, 10, 40)
    ]
    steps = [limiter.offer(intent) for intent in (intent_for(e) for e in paused) if intent is not None]
    assert isinstance(steps[0], Create)
    assert steps[1] is None and steps[2] is None  # within 30 s: counted, not written
    assert (
        isinstance(steps[3], UpdateSeries) and steps[3].count == 4 and steps[3].name == steps[0].intent.name
    )
    # another reason of the same object is not held back by it
    started = intent_for(decided(RolloutStarted(rollout_id=ROLLOUT, from_revision="a", to_revision="b",
                                               strategy={}, replicas=3), 6))  # fmt: skip
    assert started is not None and isinstance(limiter.offer(started), Create)


async def test_the_executor_writes_them_where_kubectl_describe_finds_them(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    name = f"web-{uuid.uuid4().hex[:6]}"
    cloneset: dict[str, Any] = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}},
        },
    }  # fmt: skip
    created = await client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", cloneset
    )
    writer = KubeEventWriter(k8s_client, interval=30, instance="executor-test")
    stream = f"CloneSet/default/{name}"
    rejected = decided(SpecRejected(field="spec.replicas", reason="bad", generation=1), 0, stream)
    assert await writer.handle(rejected) == "created"
    assert await writer.handle(rejected) == "counted"  # the same decision again, within the window
    again = decided(SpecRejected(field="spec.replicas", reason="bad", generation=1), 45, stream)
    assert await writer.handle(again) == "series"
    listed = await client.CoreV1Api(k8s_client).list_namespaced_event(
        "default",
        field_selector=f"involvedObject.name={name},involvedObject.kind=CloneSet,"
        f"involvedObject.uid={created['metadata']['uid']}",
        _preload_content=False,
    )
    items = (await listed.json())["items"]
    assert [(e["reason"], e["type"], e["count"]) for e in items] == [("SpecRejected", "Warning", 3)]
    assert items[0]["message"] == "spec rejected (generation 1): spec.replicas: bad"
