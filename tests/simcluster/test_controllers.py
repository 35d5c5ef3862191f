"""kube-controller-manager's workload controllers in simcluster, seen through the API as kubectl and
the rollbook services see them: Deployments roll through ReplicaSets, Jobs complete, Services get
EndpointSlices, PodDisruptionBudgets report and guard evictions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimConfig, Timing

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]


def deployment(name: str, replicas: int = 3, image: str = "nginx:1.25", **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": image, "ports": [{"name": "http", "containerPort": 8080}]}
                    ]
                },
            },
        },
    }
    body["spec"].update(spec)
    return body


async def get(api: client.ApiClient, path: str) -> Obj:
    data, _, _ = await api.call_api(
        path,
        "GET",
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=False,
    )
    return data  # type: ignore[no-any-return]


def rs_of(apps: client.AppsV1Api, name: str) -> Any:
    async def probe() -> list[Any]:
        listed = await apps.list_namespaced_replica_set("default", label_selector=f"app={name}")
        return sorted(
            listed.items, key=lambda rs: int(rs.metadata.annotations["deployment.kubernetes.io/revision"])
        )

    return probe


def rolled_out(d: client.V1Deployment) -> bool:
    """kubectl rollout status's test."""
    s = d.status
    if d.metadata.generation > (s.observed_generation or 0):
        return False
    replicas = d.spec.replicas
    return (
        (s.updated_replicas or 0) == replicas
        and (s.replicas or 0) == replicas
        and (s.available_replicas or 0) == replicas
    )


async def test_deployment_creates_a_replica_set_and_its_pods(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("web"))
    d = await wait_until(lambda: apps.read_namespaced_deployment("web", "default"), rolled_out)
    (rs,) = await rs_of(apps, "web")()
    digest = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{digest}" and rs.spec.replicas == 3
    assert rs.metadata.owner_references[0].kind == "Deployment" and rs.metadata.owner_references[0].controller
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    pods = (await core.list_namespaced_pod("default", label_selector="app=web")).items
    assert len(pods) == 3 and all(p.metadata.labels["pod-template-hash"] == digest for p in pods)
    assert all(p.metadata.owner_references[0].name == rs.metadata.name for p in pods)
    conditions = {c.type: (c.status, c.reason) for c in d.status.conditions}
    assert conditions == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    assert d.status.ready_replicas == 3 and d.status.observed_generation == d.metadata.generation


async def test_rolling_update_never_exceeds_surge_or_unavailability(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    await apps.create_namespaced_deployment("default", deployment("roll", 4, strategy=strategy))
    await wait_until(lambda: apps.read_namespaced_deployment("roll", "default"), rolled_out)
    seen: list[tuple[int, int]] = []

    async def sample() -> client.V1Deployment:
        pods = (await core.list_namespaced_pod("default", label_selector="app=roll")).items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        ready = [
            p
            for p in live
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        seen.append((len(live), len(ready)))
        return await apps.read_namespaced_deployment("roll", "default")

    await apps.patch_namespaced_deployment(
        "roll",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}}},
    )
    d = await wait_until(sample, lambda d: rolled_out(d) and d.metadata.generation == 2)
    assert max(total for total, _ in seen) <= 5  # replicas + maxSurge
    old, new = await rs_of(apps, "roll")()
    assert (old.spec.replicas, new.spec.replicas) == (0, 4)
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    pods = (await core.list_namespaced_pod("default", label_selector="app=roll")).items
    assert {c.image for p in pods if not p.metadata.deletion_timestamp for c in p.spec.containers} == {
        "nginx:1.26"
    }


async def test_recreate_removes_old_pods_before_new_ones_start(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("rec", 2, strategy={"type": "Recreate"}))
    await wait_until(lambda: apps.read_namespaced_deployment("rec", "default"), rolled_out)
    mixed: list[set[str]] = []

    async def sample() -> client.V1Deployment:
        pods = (await core.list_namespaced_pod("default", label_selector="app=rec")).items
        mixed.append({p.spec.containers[0].image for p in pods})
        return await apps.read_namespaced_deployment("rec", "default")

    await apps.patch_namespaced_deployment(
        "rec",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}}},
    )
    await wait_until(sample, lambda d: rolled_out(d) and d.metadata.generation == 2)
    assert all(len(images) <= 1 for images in mixed), mixed


async def test_revision_history_limit_keeps_that_many_old_replica_sets(k8s_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("hist", 1, revisionHistoryLimit=1))
    for tag in ("1.26", "1.27", "1.28"):
        await wait_until(lambda: apps.read_namespaced_deployment("hist", "default"), rolled_out)
        await apps.patch_namespaced_deployment(
            "hist",
            "default",
            {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": f"nginx:{tag}"}]}}}},
        )
    await wait_until(
        lambda: apps.read_namespaced_deployment("hist", "default"),
        lambda d: rolled_out(d) and d.metadata.generation == 4,
    )
    kept = await wait_until(rs_of(apps, "hist"), lambda items: len(items) == 2)
    assert [rs.metadata.annotations["deployment.kubernetes.io/revision"] for rs in kept] == ["3", "4"]


async def test_progress_deadline_exceeded_when_pods_never_become_ready(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await make_simcluster(SimConfig(failing_images=("*:broken",)))
    async with await api_client_for(sim) as api:
        apps = client.AppsV1Api(api)
        await apps.create_namespaced_deployment(
            "default", deployment("stuck", 1, image="nginx:broken", progressDeadlineSeconds=1)
        )
        d = await wait_until(
            lambda: apps.read_namespaced_deployment("stuck", "default"),
            lambda d: any(
                c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded"
                for c in d.status.conditions or []
            ),
            within=10,
        )
        (progressing,) = [c for c in d.status.conditions if c.type == "Progressing"]
        assert progressing.status == "False" and "has timed out progressing" in progressing.message


async def test_pause_holds_a_template_change_and_resume_rolls_it(k8s_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("pause", 2))
    await wait_until(lambda: apps.read_namespaced_deployment("pause", "default"), rolled_out)
    await apps.patch_namespaced_deployment("pause", "default", {"spec": {"paused": True}})
    await apps.patch_namespaced_deployment(
        "pause",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}}},
    )
    await wait_until(
        lambda: apps.read_namespaced_deployment("pause", "default"),
        lambda d: (
            d.status.observed_generation == 3
            and any(c.reason == "DeploymentPaused" for c in d.status.conditions)
        ),
    )
    assert len(await rs_of(apps, "pause")()) == 1
    await apps.patch_namespaced_deployment("pause", "default", {"spec": {"paused": False}})
    await wait_until(
        lambda: apps.read_namespaced_deployment("pause", "default"),
        lambda d: rolled_out(d) and d.metadata.generation == 4,
    )
    assert [rs.spec.replicas for rs in await rs_of(apps, "pause")()] == [0, 2]


async def test_a_deleted_pod_is_replaced_and_scaling_follows_replicas(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("heal", 2))
    await wait_until(lambda: apps.read_namespaced_deployment("heal", "default"), rolled_out)
    pods = (await core.list_namespaced_pod("default", label_selector="app=heal")).items
    await core.delete_namespaced_pod(pods[0].metadata.name, "default")

    async def names() -> set[str]:
        listed = (await core.list_namespaced_pod("default", label_selector="app=heal")).items
        return {p.metadata.name for p in listed if not p.metadata.deletion_timestamp}

    replaced = await wait_until(names, lambda n: len(n) == 2 and pods[0].metadata.name not in n)
    assert pods[1].metadata.name in replaced
    await apps.patch_namespaced_deployment_scale("heal", "default", {"spec": {"replicas": 4}})
    await wait_until(
        lambda: apps.read_namespaced_deployment("heal", "default"),
        lambda d: rolled_out(d) and d.spec.replicas == 4,
    )
    assert len(await names()) == 4


async def test_job_runs_its_completions_and_reports_complete(k8s_client: client.ApiClient) -> None:
    batch, core = client.BatchV1Api(k8s_client), client.CoreV1Api(k8s_client)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {
            "completions": 3,
            "parallelism": 2,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox:1.36"}]}
            },
        },
    }
    await batch.create_namespaced_job("default", body)
    job = await wait_until(
        lambda: batch.read_namespaced_job("migrate", "default"),
        lambda j: any(c.type == "Complete" and c.status == "True" for c in j.status.conditions or []),
    )
    assert job.status.succeeded == 3 and not job.status.failed and not job.status.active
    assert job.status.start_time and job.status.completion_time
    pods = (await core.list_namespaced_pod("default", label_selector="job-name=migrate")).items
    assert len(pods) == 3 and {p.status.phase for p in pods} == {"Succeeded"}
    assert all(p.status.container_statuses[0].state.terminated.exit_code == 0 for p in pods)
    assert not any("batch.kubernetes.io/job-tracking" in (p.metadata.finalizers or []) for p in pods)


async def test_job_fails_after_its_backoff_limit(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(crashing_images=("*:crash",)))
    async with await api_client_for(sim) as api:
        batch = client.BatchV1Api(api)
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "bad"},
            "spec": {
                "backoffLimit": 1,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "tool:crash"}]}
                },
            },
        }
        await batch.create_namespaced_job("default", body)
        job = await wait_until(
            lambda: batch.read_namespaced_job("bad", "default"),
            lambda j: any(c.type == "Failed" for c in j.status.conditions or []),
        )
        (failed,) = [c for c in job.status.conditions if c.type == "Failed"]
        assert failed.reason == "BackoffLimitExceeded" and job.status.failed == 2 and not job.status.succeeded


async def test_service_gets_endpoint_slices_from_ready_pods(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    discovery = client.DiscoveryV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("svc", 2))
    await core.create_namespaced_service(
        "default",
        {
            "metadata": {"name": "svc"},
            "spec": {
                "selector": {"app": "svc"},
                "ports": [{"name": "web", "port": 80, "targetPort": "http"}],
            },
        },
    )

    async def slices() -> list[client.V1EndpointSlice]:
        return (
            await discovery.list_namespaced_endpoint_slice(
                "default", label_selector="kubernetes.io/service-name=svc"
            )
        ).items

    (slice_,) = await wait_until(
        slices,
        lambda s: (
            len(s) == 1 and len(s[0].endpoints or []) == 2 and all(e.conditions.ready for e in s[0].endpoints)
        ),
    )
    assert slice_.address_type == "IPv4" and [(p.name, p.port) for p in slice_.ports] == [("web", 8080)]
    assert all(e.target_ref.kind == "Pod" and e.addresses[0].startswith("10.244.") for e in slice_.endpoints)
    await apps.patch_namespaced_deployment_scale("svc", "default", {"spec": {"replicas": 1}})
    await wait_until(slices, lambda s: len(s) == 1 and len(s[0].endpoints or []) == 1)


async def test_pdb_status_and_eviction_honouring_it(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    policy = client.PolicyV1Api(k8s_client)
    await apps.create_namespaced_deployment("default", deployment("guarded", 2))
    budget = {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await policy.create_namespaced_pod_disruption_budget("default", budget)
    pdb = await wait_until(
        lambda: policy.read_namespaced_pod_disruption_budget("guarded", "default"),
        lambda p: p.status is not None and p.status.current_healthy == 2,
    )
    assert (pdb.status.expected_pods, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 2, 0)
    assert [(c.type, c.status, c.reason) for c in pdb.status.conditions] == [
        ("DisruptionAllowed", "False", "InsufficientPods")
    ]
    pods = (await core.list_namespaced_pod("default", label_selector="app=guarded")).items
    name = pods[0].metadata.name
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod_eviction(name, "default", eviction)
    assert refused.value.status == 429
    body = json.loads(refused.value.body)
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget guarded needs 2 healthy pods and has 2 currently",
        }
    ]
    assert (await core.read_namespaced_pod(name, "default")).metadata.deletion_timestamp is None
    await policy.patch_namespaced_pod_disruption_budget("guarded", "default", {"spec": {"minAvailable": 1}})
    await wait_until(
        lambda: policy.read_namespaced_pod_disruption_budget("guarded", "default"),
        lambda p: p.status.observed_generation == 2 and p.status.disruptions_allowed == 1,
    )
    await core.create_namespaced_pod_eviction(name, "default", eviction)

    async def live() -> set[str]:
        listed = (await core.list_namespaced_pod("default", label_selector="app=guarded")).items
        return {p.metadata.name for p in listed if not p.metadata.deletion_timestamp}

    # The evicted pod goes; its Deployment replaces it.
    await wait_until(live, lambda names: name not in names and len(names) == 2)


def statefulset(name: str, replicas: int = 3, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "postgres:16"}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


def sts_rolled_out(s: client.V1StatefulSet) -> bool:
    """kubectl rollout status's test for a StatefulSet without a partition."""
    st = s.status
    return (
        st is not None
        and (st.observed_generation or 0) >= s.metadata.generation
        and (st.ready_replicas or 0) >= s.spec.replicas
        and st.update_revision == st.current_revision
        and (st.updated_replicas or 0) == s.spec.replicas
    )


async def test_statefulset_creates_ordinals_in_order_with_claims(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    # Each pod of an OrderedReady set is created only once the one before it is Running and Ready.
    ready_when_next_added: list[tuple[str, bool]] = []
    last_ready: dict[str, bool] = {}

    async def observe() -> None:
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "default", label_selector="app=db", timeout_seconds=10
        )
        async for event in stream:
            pod = event["object"]
            name = pod.metadata.name
            if event["type"] == "ADDED":
                ordinal = int(name.rsplit("-", 1)[1])
                ready_when_next_added.append(
                    (name, ordinal == 0 or last_ready.get(f"db-{ordinal - 1}", False))
                )
            last_ready[name] = pod.status.phase == "Running" and any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            )
            if len(ready_when_next_added) == 3 and all(last_ready.get(f"db-{i}") for i in range(3)):
                return

    watcher = asyncio.create_task(observe())
    await asyncio.sleep(0.05)  # the watch is open before the set exists
    claims = [
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    ]
    await apps.create_namespaced_stateful_set("default", statefulset("db", volumeClaimTemplates=claims))
    sts = await wait_until(lambda: apps.read_namespaced_stateful_set("db", "default"), sts_rolled_out)
    await asyncio.wait_for(watcher, 10)
    assert ready_when_next_added == [("db-0", True), ("db-1", True), ("db-2", True)]
    pods = {
        p.metadata.name: p for p in (await core.list_namespaced_pod("default", label_selector="app=db")).items
    }
    revision = sts.status.update_revision
    assert all(p.metadata.labels["controller-revision-hash"] == revision for p in pods.values())
    assert pods["db-1"].spec.hostname == "db-1" and pods["db-1"].spec.subdomain == "db"
    (data,) = [v for v in pods["db-2"].spec.volumes if v.name == "data"]
    assert data.persistent_volume_claim.claim_name == "data-db-2"
    assert (
        await core.read_namespaced_persistent_volume_claim("data-db-0", "default")
    ).spec.resources.requests == {"storage": "1Gi"}
    revisions = (await apps.list_namespaced_controller_revision("default")).items
    assert [
        (r.metadata.name, r.revision) for r in revisions if r.metadata.owner_references[0].name == "db"
    ] == [(revision, 1)]


async def test_statefulset_rolls_down_to_its_partition_then_all(k8s_client: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_stateful_set("default", statefulset("part"))
    first = await wait_until(lambda: apps.read_namespaced_stateful_set("part", "default"), sts_rolled_out)
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    await apps.patch_namespaced_stateful_set(
        "part",
        "default",
        {
            "spec": {
                "updateStrategy": strategy,
                "template": {"spec": {"containers": [{"name": "db", "image": "postgres:17"}]}},
            }
        },
    )

    async def images() -> dict[str, str]:
        pods = (await core.list_namespaced_pod("default", label_selector="app=part")).items
        return {
            p.metadata.name: p.spec.containers[0].image for p in pods if not p.metadata.deletion_timestamp
        }

    sts = await wait_until(
        lambda: apps.read_namespaced_stateful_set("part", "default"),
        lambda s: s.status.updated_replicas == 1 and s.status.ready_replicas == 3,
    )
    assert await images() == {"part-0": "postgres:16", "part-1": "postgres:16", "part-2": "postgres:17"}
    assert sts.status.current_revision == first.status.current_revision != sts.status.update_revision
    await apps.patch_namespaced_stateful_set(
        "part", "default", {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}
    )
    sts = await wait_until(lambda: apps.read_namespaced_stateful_set("part", "default"), sts_rolled_out)
    assert set((await images()).values()) == {"postgres:17"} and sts.status.current_replicas == 3


async def test_statefulset_on_delete_updates_a_pod_only_when_it_is_deleted(
    k8s_client: client.ApiClient,
) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_stateful_set(
        "default", statefulset("od", 2, updateStrategy={"type": "OnDelete"})
    )
    await wait_until(
        lambda: apps.read_namespaced_stateful_set("od", "default"),
        lambda s: (s.status.ready_replicas or 0) == 2,
    )
    await apps.patch_namespaced_stateful_set(
        "od",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}}},
    )
    await wait_until(
        lambda: apps.read_namespaced_stateful_set("od", "default"),
        lambda s: s.status.observed_generation == 2,
    )
    assert {
        p.spec.containers[0].image
        for p in (await core.list_namespaced_pod("default", label_selector="app=od")).items
    } == {"postgres:16"}
    await core.delete_namespaced_pod("od-1", "default")
    sts = await wait_until(
        lambda: apps.read_namespaced_stateful_set("od", "default"),
        lambda s: s.status.updated_replicas == 1 and s.status.ready_replicas == 2,
    )
    pods = {
        p.metadata.name: p.spec.containers[0].image
        for p in (await core.list_namespaced_pod("default", label_selector="app=od")).items
    }
    assert pods == {"od-0": "postgres:16", "od-1": "postgres:17"} and sts.status.current_replicas == 1


async def test_statefulset_parallel_scales_down_from_the_highest_ordinal(
    k8s_client: client.ApiClient,
) -> None:
    apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
    await apps.create_namespaced_stateful_set(
        "default", statefulset("par", 4, podManagementPolicy="Parallel")
    )
    await wait_until(lambda: apps.read_namespaced_stateful_set("par", "default"), sts_rolled_out)
    await apps.patch_namespaced_stateful_set_scale("par", "default", {"spec": {"replicas": 2}})

    async def names() -> set[str]:
        return {
            p.metadata.name
            for p in (await core.list_namespaced_pod("default", label_selector="app=par")).items
        }

    assert await wait_until(names, lambda n: len(n) == 2) == {"par-0", "par-1"}


async def test_deleting_a_job_removes_its_pods_despite_the_tracking_finalizer(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await make_simcluster(SimConfig(timing=Timing(run=60.0)))  # its pods keep running
    async with await api_client_for(sim) as api:
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "long"},
            "spec": {
                "parallelism": 2,
                "completions": 4,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox:1.36"}]}
                },
            },
        }
        await batch.create_namespaced_job("default", body)

        async def pods() -> list[client.V1Pod]:
            return (await core.list_namespaced_pod("default", label_selector="job-name=long")).items

        running = await wait_until(
            pods, lambda items: len(items) == 2 and all(p.status.phase == "Running" for p in items)
        )
        assert all("batch.kubernetes.io/job-tracking" in p.metadata.finalizers for p in running)
        job = await batch.read_namespaced_job("long", "default")
        assert (job.status.active, job.status.ready) == (2, 2)
        await batch.delete_namespaced_job("long", "default", propagation_policy="Background")
        await wait_until(pods, lambda items: not items)
