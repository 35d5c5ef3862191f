"""A createPod carries the pod's new claims (volumeClaimTemplates): the executor creates them, then the pod,
as one action, exactly once in effect however often the action is delivered."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.service import Executor
from services.infra import kube
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.cloneset import INSTANCE_ID_LABEL
from services.model.events import Envelope, PodActionFailed, PodActionRequested, PodActionSucceeded, new_event
from services.model.streams import ACTION_ID_ANNOTATION, derived_id
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _claim(name: str, instance_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "labels": {INSTANCE_ID_LABEL: instance_id}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _create_with_claims(workload: str) -> tuple[Envelope, PodActionRequested, list[str]]:
    instance_id = "x1"
    pod = f"{workload}-{instance_id}"
    claims = [f"data-{pod}", f"logs-{pod}"]
    request = PodActionRequested(
        action_id=str(derived_id("test-action", workload)),
        action="createPod",
        namespace="default",
        pod=pod,
        details={
            "action": "createPod",
            "instanceId": instance_id,
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": "default",
                    "labels": {"app": workload, INSTANCE_ID_LABEL: instance_id},
                },
                "spec": {
                    "containers": [{"name": "app", "image": "nginx:alpine"}],
                    "volumes": [
                        {"name": c.split("-")[0], "persistentVolumeClaim": {"claimName": c}} for c in claims
                    ],
                },
            },
            "pvcs": [_claim(c, instance_id) for c in claims],
        },
    )
    envelope = new_event(
        request,
        stream=CLONESET.decisions_stream("default", workload),
        stream_version=7,
        occurred_at=datetime.now(UTC),
        event_id=uuid.uuid4(),
        correlation_id=f"default/{workload}@{workload}-abc",
    )
    return envelope, request, claims


def _controller(kind: str, name: str, uid: str) -> dict[str, Any]:
    api_version = "v1" if kind == "Pod" else "apps.kruise.io/v1alpha1"
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


async def _read_claim(k8s_client: client.ApiClient, name: str) -> dict[str, Any] | None:
    core = client.CoreV1Api(k8s_client)
    try:
        return await kube.raw_json(
            await core.read_namespaced_persistent_volume_claim(name, "default", _preload_content=False)
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


async def _pods_named(k8s_client: client.ApiClient, workload: str) -> list[dict[str, Any]]:
    core = client.CoreV1Api(k8s_client)
    pods = await kube.raw_json(
        await core.list_namespaced_pod("default", label_selector=f"app={workload}", _preload_content=False)
    )
    return list(pods.get("items") or [])


async def test_a_create_redelivered_after_its_claims_and_before_its_pod_creates_the_pod_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request, claims = _create_with_claims(workload)
    first = Executor(settings, event_store, k8s_client)
    second = Executor(settings, event_store, k8s_client)

    # The first delivery creates the claims, then the API server fails every pod write: the executor gives
    # up on this delivery (as if it had died there), and the bus will deliver the action again.
    simcluster.set_faults(
        FaultConfig(
            write_error_rate=1.0,
            write_error_codes=(500,),
            spared_resources=("leases", "persistentvolumeclaims"),
        )
    )
    with pytest.raises(ApiException):
        await first.execute(envelope, request)
    simcluster.set_faults(FaultConfig())
    made = {name: await _read_claim(k8s_client, name) for name in claims}
    assert all(c is not None for c in made.values())
    assert await _pods_named(k8s_client, workload) == []

    # The redelivery, on another executor, finds the claims it made and creates the pod; a third delivery
    # after the outcome changes nothing.
    await second.execute(envelope, request)
    await second.execute(envelope, request)

    [pod] = await _pods_named(k8s_client, workload)
    assert pod["metadata"]["annotations"][ACTION_ID_ANNOTATION] == request.action_id
    for name, before in made.items():
        after = await _read_claim(k8s_client, name)
        assert after is not None and before is not None
        assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the same claim, not made again
        assert after["metadata"]["annotations"][ACTION_ID_ANNOTATION] == request.action_id
    stored = [s.envelope for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))]
    assert [e.type for e in stored] == ["PodActionStarted", "PodActionSucceeded"]
    outcome = stored[1].payload
    assert isinstance(outcome, PodActionSucceeded) and outcome.pod_uid == pod["metadata"]["uid"]


async def test_a_claim_kept_from_the_instance_is_used_and_anyone_elses_fails_the_create(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s_client)
    executor = Executor(settings, event_store, k8s_client)

    # A claim of this instance id, left by its previous pod (another action's id): the pod mounts it.
    kept = f"web{uuid.uuid4().hex[:8]}"
    envelope, request, claims = _create_with_claims(kept)
    left = _claim(claims[0], "x1")
    left["metadata"]["annotations"] = {ACTION_ID_ANNOTATION: "an-earlier-create"}
    await core.create_namespaced_persistent_volume_claim("default", left)  # type: ignore[arg-type]
    await executor.execute(envelope, request)
    assert len(await _pods_named(k8s_client, kept)) == 1
    first_claim = await _read_claim(k8s_client, claims[0])
    assert first_claim is not None
    # It carries this create's id now (the expectation waits for it on each claim), the same claim.
    assert first_claim["metadata"]["annotations"][ACTION_ID_ANNOTATION] == request.action_id
    assert await _read_claim(k8s_client, claims[1]) is not None
    stored = [
        s.envelope.payload for s in await event_store.read_stream(CLONESET.actions_stream("default", kept))
    ]
    assert isinstance(stored[-1], PodActionSucceeded)

    # A claim of the same name belonging to another instance: the create fails, no pod is made.
    other = f"web{uuid.uuid4().hex[:8]}"
    envelope, request, claims = _create_with_claims(other)
    await core.create_namespaced_persistent_volume_claim("default", _claim(claims[0], "someone-else"))  # type: ignore[arg-type]
    await executor.execute(envelope, request)
    assert await _pods_named(k8s_client, other) == []
    stored = [
        s.envelope.payload for s in await event_store.read_stream(CLONESET.actions_stream("default", other))
    ]
    assert isinstance(stored[-1], PodActionFailed) and "not of this instance" in stored[-1].reason


async def test_a_claim_of_the_instance_controlled_by_another_owner_fails_the_create(
    settings: Settings, event_store: EventStore, k8s_client: client.ApiClient
) -> None:
    # The claim has this instance's label, but another controller owns it (say another CloneSet of the
    # same name, deleted and made again): the pod must not take it; the create fails, not retried.
    core = client.CoreV1Api(k8s_client)
    executor = Executor(settings, event_store, k8s_client)
    workload = f"web{uuid.uuid4().hex[:8]}"
    envelope, request, claims = _create_with_claims(workload)
    for claim in request.details["pvcs"]:
        claim["metadata"]["ownerReferences"] = [_controller("CloneSet", workload, "cloneset-now")]
    # Its owner exists (the API server's garbage collector would delete a claim whose owner does not).
    owner_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{workload}-owner", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    }
    before = await kube.raw_json(
        await core.create_namespaced_pod("default", owner_pod, _preload_content=False)  # type: ignore[arg-type]
    )
    left = _claim(claims[0], "x1")
    left["metadata"]["ownerReferences"] = [
        _controller("Pod", owner_pod["metadata"]["name"], before["metadata"]["uid"])
    ]
    await core.create_namespaced_persistent_volume_claim("default", left)  # type: ignore[arg-type]
    await executor.execute(envelope, request)
    assert [p["metadata"]["name"] for p in await _pods_named(k8s_client, workload)] == []
    stored = [
        s.envelope.payload
        for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))
    ]
    failed = stored[-1]
    assert isinstance(failed, PodActionFailed) and not failed.retryable
    assert "controlled by another owner" in failed.reason and before["metadata"]["uid"] in failed.reason
