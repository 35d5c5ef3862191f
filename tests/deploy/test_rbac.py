"""Least privilege, checked against the code: the rules deploy/ grants each service's ServiceAccount are
exactly the Kubernetes API calls that service's code can make (tests/deploy/apicalls.py reads them from
the source). A new call without its rule fails here, and so does a rule no code needs."""

from __future__ import annotations

from collections import defaultdict

import pytest

from services.infra.kruise import KRUISE_DEPLOYMENT, KRUISE_MUTATING_WEBHOOK
from services.infra.leader import lease_name
from services.infra.partition_leases import member_lease_names, partition_lease_names
from services.infra.settings import Settings
from tests.deploy.apicalls import API_METHODS, Call, api_calls, custom_rbac_of, rbac_of
from tests.deploy.manifests import NAMESPACE, Manifest, named, of_kind, render

# What each service runs in its Deployment, and so which code it can reach.
ENTRIES = {
    "watcher": "services.watcher.service",
    "planner": "services.planner.service",
    "executor": "services.executor.service",
    "auditor": "services.auditor.service",
    "webhook": "services.cli.webhook",
}
# Code the deployed webhook never runs: it is started with --no-register (checked below), and its
# configurations are in deploy/base/webhook.yaml instead.
NOT_DEPLOYED = {"webhook": ("services.webhook.register",)}

# Discovery calls (GET /api/v1 and the like), which no Role grants.
DISCOVERY = frozenset({"get_api_resources"})

Permission = tuple[str, str, str, tuple[str, ...]]  # apiGroup, resource, verb, resourceNames (() = any)


def resource_names(service: str, group: str, resource: str, verb: str) -> tuple[str, ...]:
    """The objects a call reaches when they are known by name, so the rule can be limited to them."""
    if (group, resource) == ("coordination.k8s.io", "leases") and verb in ("get", "update", "delete"):
        return lease_names(service, verb)
    if (group, resource, verb) == ("apps", "deployments", "get"):
        return (KRUISE_DEPLOYMENT,)
    if (group, resource, verb) == ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"):
        return (KRUISE_MUTATING_WEBHOOK,)
    return ()


def lease_names(service: str, verb: str) -> tuple[str, ...]:
    """The Leases a service reads, renews or deletes with the default settings (the deployed ones): the
    watcher its one; the planner one per bus partition and its member slots (only those it deletes)."""
    if service != "planner":
        return (lease_name(service),)
    settings = Settings()
    members = member_lease_names(service, settings.partition_member_slots)
    if verb == "delete":
        return tuple(sorted(members))
    return tuple(sorted(partition_lease_names(service, settings.bus_partitions) + members))


def needed(service: str) -> dict[Permission, list[str]]:
    """Every permission the service's code needs, with where in the code it needs it."""
    permissions: dict[Permission, list[str]] = defaultdict(list)
    skipped = NOT_DEPLOYED.get(service, ())
    call: Call
    for call in api_calls(ENTRIES[service]):
        if call.module.startswith(skipped):
            continue
        if call.method in DISCOVERY:
            continue  # API discovery: every authenticated user may (the system:discovery ClusterRole)
        custom = API_METHODS.get(call.method) == "*custom*"
        group, resource, verb = custom_rbac_of(call) if custom else rbac_of(call.method)
        verbs = [verb, "watch"] if call.watched else [verb]
        for each in verbs:
            names = resource_names(service, group, resource, each)
            permissions[(group, resource, each, names)].append(f"{call.method} at {call.where}")
    return permissions


def granted(service: str, manifests: list[Manifest]) -> dict[Permission, str]:
    """Every permission the service's ServiceAccount holds, with the role granting it."""
    account = f"rollbook-{service}"
    permissions: dict[Permission, str] = {}
    for binding in of_kind(manifests, "RoleBinding") + of_kind(manifests, "ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in subjects
        ):
            continue
        role_ref = binding["roleRef"]
        role = named(manifests, role_ref["kind"], role_ref["name"])
        if binding["kind"] == "RoleBinding" and role_ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        key = (group, resource, verb, tuple(sorted(rule.get("resourceNames") or ())))
                        permissions[key] = f"{role['kind']} {role['metadata']['name']}"
    return permissions


@pytest.mark.parametrize("service", sorted(ENTRIES))
@pytest.mark.parametrize("overlay", ["standalone", "with-openkruise", "namespaced-executor"])
def test_each_service_is_granted_exactly_the_calls_its_code_makes(service: str, overlay: str) -> None:
    manifests = render(overlay)
    need = needed(service)
    have = granted(service, manifests)
    missing = {p: need[p] for p in need.keys() - have.keys()}
    unused = {p: have[p] for p in have.keys() - need.keys()}
    assert not missing, f"rollbook-{service} lacks rules for calls its code makes: {missing}"
    assert not unused, f"rollbook-{service} holds rules no code of it uses: {unused}"


def test_the_lease_rules_are_namespaced_to_where_the_leases_are() -> None:
    manifests = render("standalone")
    for service in ("watcher", "planner"):
        for permission, source in granted(service, manifests).items():
            if permission[1] == "leases":
                assert source.startswith("Role "), (permission, source)


def test_no_service_may_read_write_or_delete_a_lease_it_does_not_name() -> None:
    # Only create and list cannot be limited by name; any other Lease verb without resourceNames would
    # let one service take over another's Lease (the planner the watcher's rollbook-watcher).
    manifests = render("standalone")
    for service in ENTRIES:
        for _group, resource, verb, names in granted(service, manifests):
            if resource == "leases":
                assert names or verb in ("create", "list"), (service, verb)


def test_the_planner_lease_names_follow_the_partition_and_member_settings() -> None:
    settings = Settings()
    assert (settings.bus_partitions, settings.partition_member_slots) == (16, 16)
    granted_names = {
        permission[3] for permission in granted("planner", render("standalone")) if permission[2] == "update"
    }
    assert granted_names == {
        tuple(
            sorted(
                [f"rollbook-planner-p{n}" for n in range(16)]
                + [f"rollbook-planner-member-{k}" for k in range(16)]
            )
        )
    }


def test_the_auditors_token_only_reviews_history_readers() -> None:
    # Its one use of the Kubernetes API: TokenReview and SubjectAccessReview of /history requests.
    assert set(needed("auditor")) == {
        ("authentication.k8s.io", "tokenreviews", "create", ()),
        ("authorization.k8s.io", "subjectaccessreviews", "create", ()),
    }
    manifests = render("standalone")
    [config] = [
        m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"].startswith("rollbook-config")
    ]
    assert config["data"]["ROLLBOOK_API_AUTH"] == "kubernetes"


def test_nobody_is_bound_to_read_history_by_default() -> None:
    manifests = render("standalone")
    reader = named(manifests, "ClusterRole", "rollbook-history-reader")
    assert reader["rules"] == [{"apiGroups": ["rollbook.io"], "resources": ["history"], "verbs": ["get"]}]
    bindings = of_kind(manifests, "RoleBinding") + of_kind(manifests, "ClusterRoleBinding")
    assert not [b for b in bindings if b["roleRef"]["name"] == "rollbook-history-reader"]


def test_the_deployed_webhook_runs_without_registering() -> None:
    # Why services.webhook.register's calls need no rule: the Deployment turns registration off.
    [container] = named(render("standalone"), "Deployment", "rollbook-webhook")["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--no-register" in container["command"]
    register_calls = [c for c in api_calls(ENTRIES["webhook"]) if c.module == "services.webhook.register"]
    assert register_calls, "the webhook's registration calls moved: update NOT_DEPLOYED"


def test_the_scan_sees_calls_made_through_list_functions_and_the_leader_library() -> None:
    # The scan is what this file trusts; these are calls it must not miss.
    watcher = needed("watcher")
    assert ("", "pods", "watch", ()) in watcher  # core.list_pod_for_all_namespaces passed to a watch
    assert ("apps.kruise.io", "sidecarsets", "watch", ()) in watcher
    assert ("apps", "replicasets", "watch", ()) in watcher  # a recorded kind's Watched (services/kinds)
    assert ("coordination.k8s.io", "leases", "create", ()) in watcher  # kubernetes-asyncio's LeaseLock
    assert ("apps.kruise.io", "sidecarsets", "list", ()) in needed("webhook")  # passed with args=(...)


def _executor_bindings(manifests: list[Manifest]) -> list[Manifest]:
    """The bindings that name the executor's ServiceAccount."""
    return [
        b
        for b in of_kind(manifests, "RoleBinding") + of_kind(manifests, "ClusterRoleBinding")
        if any(s["name"] == "rollbook-executor" for s in b.get("subjects") or [])
    ]


def _namespaced_rules(manifests: list[Manifest], binding: Manifest) -> list[str]:
    """The namespaced resources a binding's role grants (pods, PVCs, CloneSets, Events)."""
    role = named(manifests, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    cluster_scoped = {"sidecarsets", "sidecarsets/status"}
    return [r for rule in role["rules"] for r in rule["resources"] if r not in cluster_scoped]


def test_by_default_the_executor_acts_in_every_namespace() -> None:
    manifests = render("standalone")
    wide = [b for b in _executor_bindings(manifests) if b["kind"] == "ClusterRoleBinding"]
    assert any("pods" in _namespaced_rules(manifests, b) for b in wide)


def test_the_namespaced_executor_may_touch_pods_only_in_the_managed_namespaces() -> None:
    manifests = render("namespaced-executor")
    [config] = [
        m for m in of_kind(manifests, "ConfigMap") if m["metadata"]["name"].startswith("rollbook-config")
    ]
    managed = {n.strip() for n in config["data"]["ROLLBOOK_MANAGE_NAMESPACES"].split(",") if n.strip()}
    assert managed, "the overlay names the namespaces it manages"
    bindings = _executor_bindings(manifests)
    for binding in bindings:
        if binding["kind"] == "ClusterRoleBinding":
            assert _namespaced_rules(manifests, binding) == [], binding["metadata"]["name"]
    granting = {
        b["metadata"]["namespace"]
        for b in bindings
        if b["kind"] == "RoleBinding" and "pods" in _namespaced_rules(manifests, b)
    }
    assert granting == managed
    # The emptied ClusterRoleBinding grants nobody anything.
    emptied = named(manifests, "ClusterRoleBinding", "rollbook-executor")
    assert emptied["subjects"] == []
