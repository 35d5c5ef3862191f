"""Injection rules of services.model.sidecarset, one table row per rule, starting from the seed's YAML."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.model import sidecarset as ss

SEED = Path(__file__).parents[1] / "fixtures" / "seed"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def seed_sidecarset() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SEED / "sidecarset-test-sidecarset.yaml").read_text())
    return loaded


def seed_pod() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SEED / "pod-test-pod.yaml").read_text())
    return loaded


def make_sidecarset(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"selector": {"matchLabels": {"app": "nginx"}}}
    base.update(spec)
    return {"apiVersion": ss.API_VERSION, "kind": "SidecarSet", "metadata": {"name": name}, "spec": base}


def container(name: str, image: str = "busybox:1.36", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **fields}


def pod(containers: list[dict[str, Any]], *, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "labels": {"app": "nginx"}}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": containers, **spec},
    }


def run(pod_obj: dict[str, Any], *objs: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    injected, _ = ss.inject(pod_obj, [ss.parse_sidecarset(o) for o in objs], now=NOW, namespace=namespace)
    return injected


def names(items: list[dict[str, Any]] | None) -> list[str]:
    return [c["name"] for c in items or []]


# --- the seed's example -------------------------------------------------------------------------------


def test_seed_example_injects_tools_before_app_with_app_volumes_shared() -> None:
    app_pod = seed_pod()
    app_pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "html", "mountPath": "/usr/share/nginx/html"}
    ]
    app_pod["spec"]["volumes"] = [{"name": "html", "emptyDir": {}}]
    injected, records = ss.inject(app_pod, [ss.parse_sidecarset(seed_sidecarset())], now=NOW)
    containers = injected["spec"]["containers"]
    assert names(containers) == ["tools", "app"]
    tools = containers[0]
    assert tools["image"] == "centos:6.7"
    assert tools["command"] == ["sleep", "999d"]
    assert tools["volumeMounts"] == [{"name": "html", "mountPath": "/usr/share/nginx/html"}]
    assert {"name": "IS_INJECTED", "value": "true"} in tools["env"]
    # SidecarSet-only fields never reach the pod (the API server would reject them).
    assert not {"podInjectPolicy", "shareVolumePolicy", "upgradeStrategy"} & set(tools)
    assert containers[1] == app_pod["spec"]["containers"][0]
    assert [r.sidecarset for r in records] == ["test-sidecarset"]
    assert records[0].containers == ["tools"] and records[0].namespace == "default"


def test_input_pod_is_not_modified() -> None:
    original = seed_pod()
    before = copy.deepcopy(original)
    run(original, seed_sidecarset())
    assert original == before


# --- placement ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, ["sidecar", "app1", "app2"]),  # BeforeAppContainer is the default
        ("BeforeAppContainer", ["sidecar", "app1", "app2"]),
        ("AfterAppContainer", ["app1", "app2", "sidecar"]),
    ],
)
def test_pod_inject_policy(policy: str | None, expected: list[str]) -> None:
    sidecar = container("sidecar") if policy is None else container("sidecar", podInjectPolicy=policy)
    out = run(pod([container("app1"), container("app2")]), make_sidecarset("s1", containers=[sidecar]))
    assert names(out["spec"]["containers"]) == expected


def test_init_containers_sorted_by_name_and_placed_by_policy() -> None:
    # OpenKruise's TestInjectInitContainerSort-style example.
    s1 = make_sidecarset(
        "sidecarset1",
        initContainers=[container("init-2"), container("init-1")],
        containers=[
            container("dns-f", podInjectPolicy="BeforeAppContainer"),
            container("log-agent", podInjectPolicy="AfterAppContainer"),
        ],
    )
    out = run(pod([container("nginx")], initContainers=[container("init-0")]), s1)
    assert names(out["spec"]["initContainers"]) == ["init-0", "init-1", "init-2"]
    assert names(out["spec"]["containers"]) == ["dns-f", "nginx", "log-agent"]


def test_init_containers_before_app_policy_and_across_sidecarsets() -> None:
    a = make_sidecarset(
        "a", initContainers=[container("z-init"), container("b-init", podInjectPolicy=ss.BEFORE_APP)]
    )
    b = make_sidecarset("b", initContainers=[container("a-init")])
    out = run(pod([container("app")], initContainers=[container("own-init")]), b, a)
    assert names(out["spec"]["initContainers"]) == ["b-init", "own-init", "a-init", "z-init"]


def test_several_sidecarsets_inject_in_name_order_then_spec_order() -> None:
    zeta = make_sidecarset("zeta", containers=[container("z1"), container("z2")])
    alpha = make_sidecarset("alpha", containers=[container("a2"), container("a1")])
    after = make_sidecarset("mid", containers=[container("m1", podInjectPolicy=ss.AFTER_APP)])
    injected, records = ss.inject(
        pod([container("app")]), [ss.parse_sidecarset(o) for o in (zeta, after, alpha)], now=NOW
    )
    assert names(injected["spec"]["containers"]) == ["a2", "a1", "z1", "z2", "app", "m1"]
    assert [r.sidecarset for r in records] == ["alpha", "mid", "zeta"]
    annotations = injected["metadata"]["annotations"]
    assert annotations[ss.INJECTED_LIST_ANNOTATION] == "alpha,mid,zeta"


def test_pod_container_with_sidecar_name_is_replaced_in_place() -> None:
    sidecar = container("proxy", image="envoy:1.30", podInjectPolicy=ss.AFTER_APP)
    out = run(
        pod([container("app"), container("proxy", image="old:1"), container("tail")]),
        make_sidecarset("s", containers=[sidecar]),
    )
    assert names(out["spec"]["containers"]) == ["app", "proxy", "tail"]
    assert out["spec"]["containers"][1]["image"] == "envoy:1.30"


# --- volumes, env -------------------------------------------------------------------------------------


def test_only_volumes_the_sidecar_mounts_are_merged_and_pod_volume_wins() -> None:
    s = make_sidecarset(
        "s",
        containers=[
            container(
                "agent",
                volumeMounts=[{"name": "logs", "mountPath": "/logs"}, {"name": "conf", "mountPath": "/conf"}],
            )
        ],
        volumes=[
            {"name": "logs", "emptyDir": {}},
            {"name": "conf", "configMap": {"name": "sidecar-conf"}},
            {"name": "unused", "emptyDir": {}},
        ],
    )
    app_pod = pod([container("app")], volumes=[{"name": "conf", "configMap": {"name": "app-conf"}}])
    out = run(app_pod, s)
    assert out["spec"]["volumes"] == [
        {"name": "conf", "configMap": {"name": "app-conf"}},
        {"name": "logs", "emptyDir": {}},
    ]


@pytest.mark.parametrize(
    ("share", "expected_paths"),
    [
        ("enabled", ["/own", "/data", "/cache"]),  # app mounts appended, same path as the sidecar's skipped
        ("disabled", ["/own"]),
    ],
)
def test_share_volume_policy(share: str, expected_paths: list[str]) -> None:
    sidecar = container(
        "agent", shareVolumePolicy={"type": share}, volumeMounts=[{"name": "own", "mountPath": "/own"}]
    )
    app1 = container(
        "app1", volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "x", "mountPath": "/own"}]
    )
    app2 = container(
        "app2", volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "c", "mountPath": "/cache"}]
    )
    out = run(
        pod([app1, app2]),
        make_sidecarset("s", containers=[sidecar], volumes=[{"name": "own", "emptyDir": {}}]),
    )
    agent = out["spec"]["containers"][0]
    assert [m["mountPath"] for m in agent["volumeMounts"]] == expected_paths


def test_shared_subpath_expr_mount_brings_its_env() -> None:
    sidecar = container("agent", shareVolumePolicy={"type": "enabled"})
    app = container(
        "app",
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        volumeMounts=[{"name": "logs", "mountPath": "/logs", "subPathExpr": "$(POD_NAME)"}],
    )
    agent = run(pod([app]), make_sidecarset("s", containers=[sidecar]))["spec"]["containers"][0]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in agent["env"]


def test_transfer_env_copies_from_source_container_own_value_wins_missing_skipped() -> None:
    sidecar = container(
        "agent",
        env=[{"name": "REGION", "value": "sidecar-own"}],
        transferEnv=[
            {"sourceContainerName": "app", "envName": "TZ"},
            {"sourceContainerName": "app", "envName": "REGION"},
            {"sourceContainerName": "app", "envName": "ABSENT"},
            {"sourceContainerName": "nope", "envName": "TZ"},
        ],
    )
    app = container("app", env=[{"name": "TZ", "value": "Asia/Shanghai"}, {"name": "REGION", "value": "app"}])
    agent = run(pod([app]), make_sidecarset("s", containers=[sidecar]))["spec"]["containers"][0]
    assert agent["env"] == [
        {"name": "REGION", "value": "sidecar-own"},
        {"name": "IS_INJECTED", "value": "true"},
        {"name": "TZ", "value": "Asia/Shanghai"},
    ]


def test_transfer_env_source_from_pod_label() -> None:
    sidecar = container(
        "agent",
        transferEnv=[
            {
                "sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.labels['main']"}},
                "envNames": ["B", "A"],
            }
        ],
    )
    app_pod = pod([container("web", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])])
    app_pod["metadata"]["labels"]["main"] = "web"
    agent = run(app_pod, make_sidecarset("s", containers=[sidecar]))["spec"]["containers"][0]
    assert [e["name"] for e in agent["env"]] == ["IS_INJECTED", "A", "B"]


def test_image_pull_secrets_appended_without_duplicates() -> None:
    s = make_sidecarset(
        "s", containers=[container("a")], imagePullSecrets=[{"name": "reg"}, {"name": "mine"}]
    )
    out = run(pod([container("app")], imagePullSecrets=[{"name": "mine"}]), s)
    assert out["spec"]["imagePullSecrets"] == [{"name": "mine"}, {"name": "reg"}]


def test_image_pull_secrets_deduplicated_across_pod_and_sidecarsets_as_openkruise() -> None:
    # mergeSidecarSecrets: the pod's secrets (its own duplicates dropped), then each SidecarSet's,
    # one per name.
    a = make_sidecarset(
        "a", containers=[container("a")], imagePullSecrets=[{"name": "reg"}, {"name": "mine"}]
    )
    b = make_sidecarset("b", containers=[container("b")], imagePullSecrets=[{"name": "reg"}, {"name": "b"}])
    app_pod = pod([container("app")], imagePullSecrets=[{"name": "mine"}, {"name": "mine"}])
    out = run(app_pod, a, b)
    assert out["spec"]["imagePullSecrets"] == [{"name": "mine"}, {"name": "reg"}, {"name": "b"}]


def test_share_volume_policy_on_init_containers_shares_the_app_mounts() -> None:
    init = container(
        "init-agent",
        shareVolumePolicy={"type": "enabled"},
        volumeMounts=[{"name": "own", "mountPath": "/own"}],
    )
    app = container("app", volumeMounts=[{"name": "data", "mountPath": "/data"}])
    out = run(
        pod([app]), make_sidecarset("s", initContainers=[init], volumes=[{"name": "own", "emptyDir": {}}])
    )
    (injected_init,) = out["spec"]["initContainers"]
    assert [m["mountPath"] for m in injected_init["volumeMounts"]] == ["/own", "/data"]


def test_volumes_appended_in_openkruise_order_init_containers_first_mounts_then_devices() -> None:
    s = make_sidecarset(
        "s",
        containers=[
            container(
                "agent",
                volumeMounts=[{"name": "c-mount", "mountPath": "/m"}],
                volumeDevices=[{"name": "c-device", "devicePath": "/dev/x"}],
            )
        ],
        initContainers=[container("init", volumeMounts=[{"name": "i-mount", "mountPath": "/i"}])],
        volumes=[
            {"name": "c-device", "persistentVolumeClaim": {"claimName": "blk"}},
            {"name": "c-mount", "emptyDir": {}},
            {"name": "i-mount", "emptyDir": {}},
        ],
    )
    out = run(pod([container("app")], volumes=[{"name": "own", "emptyDir": {}}]), s)
    assert names(out["spec"]["volumes"]) == ["own", "i-mount", "c-mount", "c-device"]


# --- matching -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_namespace", "pod_namespace", "injected"),
    [
        ("default", None, True),  # a pod with no namespace is in default
        ("default", "default", True),
        ("team-a", "team-b", False),  # namespace-scoped: another namespace untouched
        (None, "team-b", True),  # cluster-wide
        (None, "kube-system", False),  # seed: cluster-wide skips kube-system ...
        (None, "kube-public", False),  # ... and kube-public
        ("kube-system", "kube-system", True),  # an explicit namespace is taken as asked
    ],
)
def test_namespace_scope(spec_namespace: str | None, pod_namespace: str | None, injected: bool) -> None:
    spec: dict[str, Any] = {"containers": [container("sidecar")]}
    if spec_namespace:
        spec["namespace"] = spec_namespace
    out = run(pod([container("app")], namespace=pod_namespace), make_sidecarset("s", **spec))
    assert ("sidecar" in names(out["spec"]["containers"])) is injected


def test_excluded_namespaces_can_follow_openkruise() -> None:
    s = ss.parse_sidecarset(make_sidecarset("s", containers=[container("sidecar")]))
    system_pod = pod([container("app")], namespace="kube-system")
    assert not ss.matches_pod(s, system_pod)
    assert ss.matches_pod(s, system_pod, excluded_namespaces=frozenset())


def test_request_namespace_overrides_object_namespace() -> None:
    s = ss.parse_sidecarset(make_sidecarset("s", namespace="prod", containers=[container("sidecar")]))
    assert ss.matches_pod(s, pod([container("app")]), "prod")
    assert not ss.matches_pod(s, pod([container("app")], namespace="prod"), "dev")


@pytest.mark.parametrize(
    ("selector", "pod_labels", "matched"),
    [
        ({"matchLabels": {"app": "nginx"}}, {"app": "nginx"}, True),
        ({"matchLabels": {"app": "nginx"}}, {"app": "redis"}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": "x"}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"other": "x"}, False),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]},
            {"tier": "api"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]},
            {"tier": "web"},
            False,
        ),
        (
            {
                "matchLabels": {"app": "a"},
                "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}],
            },
            {"app": "a", "canary": "true"},
            False,
        ),
    ],
)
def test_selector(selector: dict[str, Any], pod_labels: dict[str, str], matched: bool) -> None:
    s = ss.parse_sidecarset(make_sidecarset("s", selector=selector, containers=[container("c")]))
    p = pod([container("app")])
    p["metadata"]["labels"] = pod_labels
    assert ss.matches_pod(s, p) is matched


def test_namespace_selector_needs_namespace_labels() -> None:
    s = ss.parse_sidecarset(
        make_sidecarset("s", namespaceSelector={"matchLabels": {"mesh": "on"}}, containers=[container("c")])
    )
    p = pod([container("app")], namespace="kube-system")
    assert not ss.matches_pod(s, p)  # labels unknown: no match
    assert ss.matches_pod(s, p, namespace_labels={"mesh": "on"})
    assert not ss.matches_pod(s, p, namespace_labels={"mesh": "off"})


def test_paused_injection_and_inactive_pods_are_skipped() -> None:
    paused = make_sidecarset("s", containers=[container("c")], injectionStrategy={"paused": True})
    assert names(run(pod([container("app")]), paused)["spec"]["containers"]) == ["app"]
    s = ss.parse_sidecarset(make_sidecarset("s", containers=[container("c")]))
    done = pod([container("app")])
    done["status"] = {"phase": "Succeeded"}
    assert not ss.matches_pod(s, done)


def test_unselected_pod_comes_back_unchanged_with_empty_patch() -> None:
    other = pod([container("app")])
    other["metadata"]["labels"] = {"app": "redis"}
    injected, records = ss.inject(
        other, [ss.parse_sidecarset(make_sidecarset("s", containers=[container("c")]))], now=NOW
    )
    assert injected == other and records == []
    assert ss.json_patch(other, injected) == []


# --- annotations and revisions ------------------------------------------------------------------------


def test_annotations_record_revision_per_sidecarset_and_keep_others() -> None:
    s_obj = make_sidecarset(
        "s",
        containers=[container("b"), container("a")],
        initContainers=[container("native", restartPolicy="Always")],
        updateStrategy={"type": "NotUpdate"},
    )
    s_obj["status"] = {"latestRevision": "s-12345"}
    parsed = ss.parse_sidecarset(s_obj)
    p = pod([container("app")])
    p["metadata"]["annotations"] = {
        ss.HASH_ANNOTATION: json.dumps({"older": "flat-hash"}),
        ss.INJECTED_LIST_ANNOTATION: "older",
    }
    injected, _ = ss.inject(p, [parsed], now=NOW)
    annotations = injected["metadata"]["annotations"]
    hashes = json.loads(annotations[ss.HASH_ANNOTATION])
    assert hashes["older"] == "flat-hash"
    assert hashes["s"] == {
        "updateTimestamp": "2026-11-30T12:00:00Z",
        "hash": parsed.hash,
        "sidecarSetName": "s",
        "sidecarList": ["a", "b", "native"],
        "controllerRevision": "s-12345",
    }
    # The without-image entry has the same shape but names no controller revision (as OpenKruise's).
    assert json.loads(annotations[ss.HASH_WITHOUT_IMAGE_ANNOTATION])["s"] == {
        "updateTimestamp": "2026-11-30T12:00:00Z",
        "hash": parsed.hash_without_image,
        "sidecarSetName": "s",
        "sidecarList": ["a", "b", "native"],
    }
    assert annotations[ss.INJECTED_LIST_ANNOTATION] == "older,s"
    revisions = ss.pod_sidecar_revisions(injected)
    assert (
        revisions["s"].hash == parsed.hash and revisions["s"].hash_without_image == parsed.hash_without_image
    )
    assert revisions["older"].hash == "flat-hash"
    assert ss.injected_sidecarsets(injected) == ["older", "s"]


def test_hash_changes_with_containers_only_and_without_image_ignores_images() -> None:
    base = ss.parse_sidecarset(seed_sidecarset())
    assert len(base.hash) == 64
    same_defaults = seed_sidecarset()
    del same_defaults["spec"]["containers"][0]["podInjectPolicy"]  # the default: same hash
    assert ss.parse_sidecarset(same_defaults).hash == base.hash
    new_image = seed_sidecarset()
    new_image["spec"]["containers"][0]["image"] = "centos:7"
    changed = ss.parse_sidecarset(new_image)
    assert changed.hash != base.hash and changed.hash_without_image == base.hash_without_image
    new_command = seed_sidecarset()
    new_command["spec"]["containers"][0]["command"] = ["sleep", "1d"]
    assert ss.parse_sidecarset(new_command).hash_without_image != base.hash_without_image
    strategy_only = seed_sidecarset()
    strategy_only["spec"]["updateStrategy"]["paused"] = False
    strategy_only["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    assert ss.parse_sidecarset(strategy_only).hash == base.hash


def test_json_patch_applied_gives_the_injected_pod() -> None:
    original = seed_pod()
    injected = run(original, seed_sidecarset())
    assert ss.apply_patch(original, ss.json_patch(original, injected)) == injected


# --- validation and conflicts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o["metadata"].update(name="bad_name"), "metadata.name"),
        (lambda o: o["spec"].pop("selector"), "spec.selector"),
        (lambda o: o["spec"].update(containers=[]), "spec.containers"),
        (
            lambda o: o["spec"]["containers"][0].update(podInjectPolicy="Middle"),
            "spec.containers[0].podInjectPolicy",
        ),
        (lambda o: o["spec"]["containers"][0].pop("image"), "spec.containers[0].image"),
        (
            lambda o: o["spec"]["containers"][0].update(shareVolumePolicy={"type": "yes"}),
            "spec.containers[0].shareVolumePolicy.type",
        ),
        (lambda o: o["spec"]["updateStrategy"].update(partition="12.5"), "spec.updateStrategy.partition"),
        (lambda o: o["spec"]["updateStrategy"].update(partition="-5%"), "spec.updateStrategy.partition"),
        (
            lambda o: o["spec"]["updateStrategy"].update(maxUnavailable=-1),
            "spec.updateStrategy.maxUnavailable",
        ),
        (lambda o: o["spec"].update(namespaceSelector={"matchLabels": {"a": "b"}}), "spec.namespaceSelector"),
        (
            lambda o: o["spec"]["selector"]["matchExpressions"][0].update(operator="Maybe"),
            "spec.selector.matchExpressions[0].operator",
        ),
    ],
)
def test_invalid_sidecarset_names_the_field(mutate: Any, field: str) -> None:
    obj = seed_sidecarset()
    mutate(obj)
    with pytest.raises(ss.SidecarSetError) as err:
        ss.parse_sidecarset(obj)
    assert err.value.field == field


@pytest.mark.parametrize("value", ["12.5%", "0.5%", "100%", 3])
def test_partition_and_max_unavailable_take_decimal_percents_as_for_clonesets(value: Any) -> None:
    # The Kruise int-or-percent parser (services/model/intorpercent.py), never a silent 0.
    obj = seed_sidecarset()
    obj["spec"]["updateStrategy"].update(partition=value, maxUnavailable=value)
    strategy = ss.parse_sidecarset(obj).spec["updateStrategy"]
    assert (strategy["partition"], strategy["maxUnavailable"]) == (value, value)


def test_seed_sidecarset_is_valid_unchanged() -> None:
    parsed = ss.parse_sidecarset(seed_sidecarset())
    assert parsed.name == "test-sidecarset" and parsed.namespace == "default"


@pytest.mark.parametrize(
    ("a_spec", "b_spec", "conflict"),
    [
        ({}, {}, True),  # same selector, cluster-wide
        ({"namespace": "a"}, {"namespace": "b"}, False),
        ({"namespace": "a"}, {}, True),
        ({"selector": {"matchLabels": {"app": "x"}}}, {"selector": {"matchLabels": {"app": "y"}}}, False),
        (
            {"selector": {"matchLabels": {"app": "x"}}},
            {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}},
            True,
        ),
        (
            {"selector": {"matchLabels": {"app": "x"}}},
            {"selector": {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}},
            False,
        ),
        (
            {"selector": {"matchLabels": {"app": "x"}}},
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
            True,
        ),
    ],
)
def test_conflicting_container_names(a_spec: dict[str, Any], b_spec: dict[str, Any], conflict: bool) -> None:
    a = ss.parse_sidecarset(make_sidecarset("first", containers=[container("proxy")], **a_spec))
    b = ss.parse_sidecarset(make_sidecarset("second", containers=[container("proxy")], **b_spec))
    problems = ss.find_conflicts(b, [a])
    assert bool(problems) is conflict
    if conflict:
        assert "'first'" in problems[0] and "'second'" in problems[0] and "'proxy'" in problems[0]


def test_same_volume_name_must_be_identical() -> None:
    a = ss.parse_sidecarset(
        make_sidecarset("a", containers=[container("x")], volumes=[{"name": "v", "emptyDir": {}}])
    )
    b = ss.parse_sidecarset(
        make_sidecarset("b", containers=[container("y")], volumes=[{"name": "v", "hostPath": {"path": "/"}}])
    )
    same = ss.parse_sidecarset(
        make_sidecarset("c", containers=[container("z")], volumes=[{"name": "v", "emptyDir": {}}])
    )
    assert ss.find_conflicts(b, [a]) and not ss.find_conflicts(same, [a])
    assert not ss.find_conflicts(a, [a])  # an update of itself is no conflict


def test_update_cannot_add_containers_or_change_upgrade_type() -> None:
    old = ss.parse_sidecarset(seed_sidecarset())
    added = seed_sidecarset()
    added["spec"]["containers"].append(container("new"))
    with pytest.raises(ss.SidecarSetError, match="cannot be added"):
        ss.validate_update(old, ss.parse_sidecarset(added))
    hot = seed_sidecarset()
    hot["spec"]["containers"][0]["upgradeStrategy"]["upgradeType"] = "HotUpgrade"
    with pytest.raises(ss.SidecarSetError, match="immutable"):
        ss.validate_update(old, ss.parse_sidecarset(hot))
    image = seed_sidecarset()
    image["spec"]["containers"][0]["image"] = "centos:7"
    ss.validate_update(old, ss.parse_sidecarset(image))
