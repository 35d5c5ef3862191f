"""REST semantics through kubernetes-asyncio: concurrency, errors, selectors, paging, patch, status."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster

from .helpers import pod_manifest, ready_pod

pytestmark = pytest.mark.asyncio(loop_scope="session")


def cloneset_manifest(name: str, replicas: int = 2) -> dict:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]},
            },
        },
    }


async def test_stale_update_gets_409_conflict_with_status_body(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    created = await core.create_namespaced_pod("default", pod_manifest("stale"))
    stale_rv = created.metadata.resource_version
    await core.patch_namespaced_pod("stale", "default", {"metadata": {"labels": {"touched": "yes"}}})
    created.metadata.labels = {"app": "web", "mine": "yes"}
    created.metadata.resource_version = stale_rv
    with pytest.raises(ApiException) as caught:
        await core.replace_namespaced_pod("stale", "default", created)
    assert caught.value.status == 409
    body = json.loads(caught.value.body)
    assert body["kind"] == "Status" and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    # A patch carrying the stale resourceVersion is refused the same way.
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod("stale", "default", {"metadata": {"resourceVersion": stale_rv}})
    assert caught.value.status == 409


async def test_resource_versions_increase_on_every_write(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    a = await core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "rv-a"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    b = await core.patch_namespaced_persistent_volume_claim(
        "rv-a", "default", {"metadata": {"labels": {"x": "1"}}}
    )
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert a.metadata.uid and a.metadata.creation_timestamp


async def test_already_exists_not_found_and_invalid(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("dup"))
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("dup"))
    assert caught.value.status == 409 and json.loads(caught.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as caught:
        await core.read_namespaced_pod("nope", "default")
    assert caught.value.status == 404 and json.loads(caught.value.body)["reason"] == "NotFound"
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", pod_manifest("Bad_Name"))
    body = json.loads(caught.value.body)
    assert caught.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    no_image = pod_manifest("noimage")
    no_image["spec"]["containers"][0].pop("image")
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("default", no_image)
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "spec.containers[0].image"
    with pytest.raises(ApiException) as caught:
        await core.create_namespaced_pod("missing-ns", pod_manifest("p"))
    assert caught.value.status == 404


async def test_label_and_field_selectors_filter_lists(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "sel"}})
    for name, labels in [
        ("a", {"app": "web", "tier": "front"}),
        ("b", {"app": "web", "tier": "back"}),
        ("c", {"app": "db"}),
        ("d", {"app": "cache", "canary": "true"}),
    ]:
        await core.create_namespaced_pod("sel", pod_manifest(name, labels))

    async def names(**kwargs: str) -> list[str]:
        return [p.metadata.name for p in (await core.list_namespaced_pod("sel", **kwargs)).items]

    assert await names(label_selector="app=web") == ["a", "b"]
    assert await names(label_selector="app==web,tier!=front") == ["b"]
    assert await names(label_selector="app in (db, cache)") == ["c", "d"]
    assert await names(label_selector="app notin (web),!canary") == ["c"]
    assert await names(label_selector="canary") == ["d"]
    assert await names(field_selector="metadata.name=c") == ["c"]
    assert await names(field_selector="metadata.name!=c,metadata.namespace=sel") == ["a", "b", "d"]
    await ready_pod(core, "a", "sel")
    node = (await core.read_namespaced_pod("a", "sel")).spec.node_name
    on_node = await names(field_selector=f"spec.nodeName={node}")
    assert "a" in on_node and len(on_node) < 4  # pods spread over nodes
    assert "a" in await names(field_selector="status.phase=Running")
    with pytest.raises(ApiException) as caught:
        await core.list_namespaced_pod("sel", field_selector="spec.image=x")
    assert caught.value.status == 400


async def test_limit_and_continue_page_through_everything(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace({"metadata": {"name": "paging"}})
    for i in range(7):
        await core.create_namespaced_pod("paging", pod_manifest(f"p{i}"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await core.list_namespaced_pod("paging", limit=3, _continue=token)
        seen += [p.metadata.name for p in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3 and seen == [f"p{i}" for i in range(7)]


async def test_strategic_merge_patch_of_one_image_keeps_other_containers(
    k8s_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("smp", env=None))
    patched = await core.patch_namespaced_pod(
        "smp", "default", {"spec": {"containers": [{"name": "log", "image": "fluentd:2.0"}]}}
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("app", "nginx:1.25"),
        ("log", "fluentd:2.0"),
    ]
    merged = await core.patch_namespaced_pod(
        "smp",
        "default",
        {"metadata": {"labels": {"extra": "1"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.labels == {"app": "web", "extra": "1"}
    jsonpatched = await core.patch_namespaced_pod(
        "smp", "default", [{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"}]
    )
    assert jsonpatched.spec.containers[0].image == "nginx:1.26"
    assert jsonpatched.spec.containers[1].image == "fluentd:2.0"


async def test_pod_spec_is_immutable_except_images(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("immutable"))
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "immutable",
            "default",
            {"spec": {"containers": [{"name": "app", "env": [{"name": "MODE", "value": "fast"}]}]}},
        )
    body = json.loads(caught.value.body)
    assert caught.value.status == 422
    assert "pod updates may not change fields" in body["message"]
    await core.patch_namespaced_pod("immutable", "default", {"spec": {"activeDeadlineSeconds": 600}})


async def test_cloneset_status_subresource_and_generation(k8s_client: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    group, version = "apps.kruise.io", "v1alpha1"
    created = await custom.create_namespaced_custom_object(
        group, version, "default", "clonesets", cloneset_manifest("gen")
    )
    assert created["metadata"]["generation"] == 1 and "status" not in created
    status = await custom.patch_namespaced_custom_object_status(
        group,
        version,
        "default",
        "clonesets",
        "gen",
        {"status": {"replicas": 2, "observedGeneration": 1}},
        _content_type="application/merge-patch+json",
    )
    assert status["status"]["replicas"] == 2 and status["metadata"]["generation"] == 1
    # Status sent to the main resource is ignored; a spec change bumps generation.
    scaled = await custom.patch_namespaced_custom_object(
        group,
        version,
        "default",
        "clonesets",
        "gen",
        {"spec": {"replicas": 5}, "status": {"replicas": 99}},
        _content_type="application/merge-patch+json",
    )
    assert scaled["metadata"]["generation"] == 2 and scaled["status"]["replicas"] == 2
    labelled = await custom.patch_namespaced_custom_object(
        group,
        version,
        "default",
        "clonesets",
        "gen",
        [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
    )
    assert labelled["metadata"]["generation"] == 2
    # Custom resources refuse strategic merge, and a replace needs a resourceVersion.
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            group,
            version,
            "default",
            "clonesets",
            "gen",
            {"spec": {"replicas": 1}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert caught.value.status == 415
    # kubernetes-asyncio sends a dict body to patch_*_custom_object as JSON patch unless told otherwise.
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            group, version, "default", "clonesets", "gen", {"spec": {"replicas": 1}}
        )
    assert caught.value.status == 400 and "_content_type" in json.loads(caught.value.body)["message"]
    stale = dict(labelled)
    stale["metadata"] = dict(labelled["metadata"], resourceVersion=created["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as caught:
        await custom.replace_namespaced_custom_object(group, version, "default", "clonesets", "gen", stale)
    assert caught.value.status == 409
    invalid = cloneset_manifest("bad")
    invalid["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as caught:
        await custom.create_namespaced_custom_object(group, version, "default", "clonesets", invalid)
    assert caught.value.status == 422


async def test_sidecarset_is_cluster_scoped(k8s_client: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(k8s_client)
    body = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet",
        "metadata": {"name": "tools"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "containers": [{"name": "tools", "image": "centos:6.7"}],
        },
    }
    created = await custom.create_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets", body)
    assert "namespace" not in created["metadata"]
    listed = await custom.list_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["tools"]
    await custom.patch_cluster_custom_object_status(
        "apps.kruise.io",
        "v1alpha1",
        "sidecarsets",
        "tools",
        {"status": {"matchedPods": 3}},
        _content_type="application/merge-patch+json",
    )
    got = await custom.get_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets", "tools")
    assert got["status"] == {"matchedPods": 3}


async def test_finalizers_hold_deletion_until_removed(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "held", "finalizers": ["example.com/keep"]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    await core.delete_namespaced_persistent_volume_claim("held", "default")
    held = await core.read_namespaced_persistent_volume_claim("held", "default")
    assert held.metadata.deletion_timestamp is not None
    await core.patch_namespaced_persistent_volume_claim(
        "held", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    with pytest.raises(ApiException) as caught:
        await core.read_namespaced_persistent_volume_claim("held", "default")
    assert caught.value.status == 404


async def test_discovery_lists_served_resources(k8s_client: client.ApiClient, simcluster: SimCluster) -> None:
    groups = await client.ApisApi(k8s_client).get_api_versions()
    assert {"apps.kruise.io", "admissionregistration.k8s.io", "coordination.k8s.io"} <= {
        g.name for g in groups.groups
    }
    core_resources = await client.CoreV1Api(k8s_client).get_api_resources()
    names = {r.name for r in core_resources.resources}
    assert {"pods", "pods/status", "persistentvolumeclaims", "namespaces", "events"} <= names
    leases = client.CoordinationV1Api(k8s_client)
    lease = await leases.create_namespaced_lease(
        "default", {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}
    )
    assert lease.spec.holder_identity == "a"


async def test_lease_semantics_a_leader_election_relies_on(k8s_client: client.ApiClient) -> None:
    """What services/infra/leader.py needs of coordination.k8s.io/v1 Leases: 404 (as a Status with its
    code) before the first candidate creates it, 409 for the second create, 409 for an update carrying a
    resourceVersion someone else already moved past, and PUT replacing the spec (a release drops
    holderIdentity)."""
    leases = client.CoordinationV1Api(k8s_client)
    with pytest.raises(ApiException) as missing:
        await leases.read_namespaced_lease("election", "default")
    assert missing.value.status == 404 and json.loads(missing.value.body)["code"] == 404
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000001Z"}
    await leases.create_namespaced_lease("default", {"metadata": {"name": "election"}, "spec": spec})
    with pytest.raises(ApiException) as exists:
        await leases.create_namespaced_lease("default", {"metadata": {"name": "election"}, "spec": spec})
    assert exists.value.status == 409

    read_by_a = await leases.read_namespaced_lease("election", "default")
    read_by_b = await leases.read_namespaced_lease("election", "default")
    read_by_b.spec.holder_identity = "b"
    taken = await leases.replace_namespaced_lease("election", "default", read_by_b)
    assert taken.spec.holder_identity == "b"
    assert taken.metadata.resource_version != read_by_a.metadata.resource_version
    read_by_a.spec.renew_time = "2026-01-01T00:00:01.000001Z"
    with pytest.raises(ApiException) as conflict:
        await leases.replace_namespaced_lease("election", "default", read_by_a)
    assert conflict.value.status == 409

    taken.spec = client.V1LeaseSpec(lease_duration_seconds=1)
    released = await leases.replace_namespaced_lease("election", "default", taken)
    assert released.spec.holder_identity is None
    assert released.spec.lease_duration_seconds == 1


async def test_pod_status_subresource_takes_labels_and_annotations_but_not_spec_or_owners(
    k8s_client: client.ApiClient,
) -> None:
    # As Kubernetes' podStatusStrategy: pods/status resets only spec, deletionTimestamp and
    # ownerReferences, so a controller may write a condition and the labels that go with it at once.
    core = client.CoreV1Api(k8s_client)
    created = await core.create_namespaced_pod("default", pod_manifest("status-meta"))
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-1"}
    patched = await core.patch_namespaced_pod_status(
        "status-meta",
        "default",
        {
            "metadata": {
                "uid": created.metadata.uid,
                "labels": {"state": "marked"},
                "annotations": {"by": "status"},
                "ownerReferences": [owner],
            },
            "spec": {"activeDeadlineSeconds": 5},
            "status": {"conditions": [{"type": "Example", "status": "True"}]},
        },
    )
    assert patched.metadata.labels["state"] == "marked" and patched.metadata.annotations["by"] == "status"
    assert not patched.metadata.owner_references and patched.spec.active_deadline_seconds is None
    assert any(c.type == "Example" for c in patched.status.conditions)
    # Its managedFields: the status entry owns what pods/status took, not the spec or the owners.
    [entry] = [e for e in patched.metadata.managed_fields if e.subresource == "status"]
    assert entry.fields_v1 == {
        "f:metadata": {"f:labels": {}, "f:annotations": {}},
        "f:status": {"f:conditions": {}},
    }
    # The uid in the patch is a precondition: another incarnation's is refused (it is immutable).
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod_status(
            "status-meta", "default", {"metadata": {"uid": "not-this-pod", "labels": {"state": "other"}}}
        )
    assert caught.value.status == 422
    # A custom resource's status subresource still takes nothing but the status.
    custom = client.CustomObjectsApi(k8s_client)
    group, version = "apps.kruise.io", "v1alpha1"
    await custom.create_namespaced_custom_object(
        group, version, "default", "clonesets", cloneset_manifest("status-meta")
    )
    written = await custom.patch_namespaced_custom_object_status(
        group,
        version,
        "default",
        "clonesets",
        "status-meta",
        {"metadata": {"labels": {"state": "marked"}}, "status": {"replicas": 1}},
        _content_type="application/merge-patch+json",
    )
    assert "state" not in written["metadata"]["labels"] and written["status"]["replicas"] == 1


def status_owners(obj: dict) -> dict[str, set[str]]:
    """manager -> the status fields its status-subresource entry in managedFields owns."""
    return {
        e["manager"]: {k.removeprefix("f:") for k in e["fieldsV1"].get("f:status", {})}
        for e in obj["metadata"].get("managedFields") or []
        if e.get("subresource") == "status"
    }


async def test_status_writes_are_owned_by_their_field_manager_the_last_writer_owning_a_field(
    k8s_client: client.ApiClient,
) -> None:
    """As kube-apiserver: a status-subresource write names its manager (``fieldManager``, else the
    User-Agent) as owner of the status fields it set, in an entry with ``subresource: status``; an update
    takes a field from every other manager, and a manager left owning nothing is dropped. A write to the
    main resource owns no status field."""
    custom = client.CustomObjectsApi(k8s_client)
    args = ("apps.kruise.io", "v1alpha1", "default", "clonesets", "owners")
    merge = "application/merge-patch+json"
    await custom.create_namespaced_custom_object(*args[:4], cloneset_manifest("owners"))
    first = {"replicas": 2, "readyReplicas": 2, "observedGeneration": 1}
    written = await custom.patch_namespaced_custom_object_status(
        *args, {"status": first}, field_manager="kruise-manager", _content_type=merge
    )
    assert status_owners(written) == {"kruise-manager": {"replicas", "readyReplicas", "observedGeneration"}}
    written = await custom.patch_namespaced_custom_object_status(
        *args,
        {"status": {**first, "readyReplicas": 1}},
        field_manager="rollbook-executor",
        _content_type=merge,
    )
    assert status_owners(written) == {
        "kruise-manager": {"replicas", "observedGeneration"},
        "rollbook-executor": {"readyReplicas"},
    }
    written = await custom.patch_namespaced_custom_object_status(
        *args, {"status": {"replicas": 3, "observedGeneration": 2}}, field_manager="rollbook-executor",
        _content_type=merge,
    )  # fmt: skip
    assert status_owners(written) == {
        "rollbook-executor": {"readyReplicas", "replicas", "observedGeneration"}
    }
    scaled = await custom.patch_namespaced_custom_object(
        *args, {"spec": {"replicas": 4}, "status": {"readyReplicas": 9}}, _content_type=merge
    )
    assert status_owners(scaled) == status_owners(written)
    spec_writers = [e for e in scaled["metadata"]["managedFields"] if not e.get("subresource")]
    assert all("f:status" not in e["fieldsV1"] for e in spec_writers) and spec_writers
    fetched = await custom.get_namespaced_custom_object(*args)
    assert fetched["metadata"]["managedFields"] == scaled["metadata"]["managedFields"]
