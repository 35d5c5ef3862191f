"""Pure rules of simcluster's API-server fidelity (no server): image pull policy defaulting, idempotent
defaulting (kube-apiserver defaults again after mutating webhooks), the namespace controller's deletion
conditions (`pkg/controller/namespace/deletion/namespaced_resources_deleter.go`), RBAC rule matching
(`plugin/pkg/auth/authorizer/rbac`)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from services.simcluster.defaults import _pull_policy, apply_defaults
from services.simcluster.faults import FaultConfig, Faults
from services.simcluster.namespaces import deletion_conditions
from services.simcluster.plugins import admit_pod
from services.simcluster.rbac import Request, User, allowed, rule_allows, verb_of
from services.simcluster.resources import PODS


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("registry.local:5000/team/app", "Always"),
        ("registry.local:5000/team/app:v2", "IfNotPresent"),
        ("app@sha256:" + "b" * 64, "IfNotPresent"),
    ],
)
def test_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert _pull_policy(image) == policy


def test_defaulting_and_plugins_are_idempotent() -> None:
    """The API server defaults a body again after mutating webhooks: twice must equal once."""
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "a", "image": "x"}]},
    }
    apply_defaults(PODS, pod, None)
    admit_pod("CREATE", pod, random.Random(1))
    once = repr(pod)
    apply_defaults(PODS, pod, None)
    admit_pod("CREATE", pod, random.Random(2))
    assert repr(pod) == once


def test_deletion_conditions_keep_transition_times_while_unchanged() -> None:
    first = deletion_conditions({"pods.": 2}, {}, [], "t1")
    second = deletion_conditions({"pods.": 1}, {}, first, "t2")
    by_type = {c["type"]: c for c in second}
    assert by_type["NamespaceContentRemaining"]["lastTransitionTime"] == "t1"
    assert (
        by_type["NamespaceContentRemaining"]["message"]
        == "Some resources are remaining: pods. has 1 resource instances"
    )
    done = {c["type"]: c for c in deletion_conditions({}, {}, second, "t3")}
    assert done["NamespaceContentRemaining"] == {
        "type": "NamespaceContentRemaining",
        "status": "False",
        "lastTransitionTime": "t3",
        "reason": "ContentRemoved",
        "message": "All content successfully removed",
    }
    assert done["NamespaceFinalizersRemaining"]["reason"] == "ContentHasNoFinalizers"


def test_unknown_lost_response_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="lost_response_modes"):
        Faults(FaultConfig(lost_response_modes=("teleport",)))


def test_rbac_rules_match_as_kubernetes_does() -> None:
    pods = Request("list", "", "pods", namespace="ns")
    assert rule_allows({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}, pods)
    assert rule_allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, pods)
    assert not rule_allows({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["list"]}, pods)
    status = Request("patch", "", "pods", "status", "ns", "p")
    assert not rule_allows({"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}, status)
    assert rule_allows({"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]}, status)
    named = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["p"]}
    assert rule_allows(named, Request("get", "", "pods", namespace="ns", name="p"))
    assert not rule_allows(named, Request("get", "", "pods", namespace="ns", name="q"))
    assert verb_of("GET", False, True) == "watch" and verb_of("DELETE", False, False) == "deletecollection"
    # A RoleBinding grants only in its namespace; a ClusterRole bound by a RoleBinding likewise.
    user = User("system:serviceaccount:ns:sa", ("system:serviceaccounts",))
    role = {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
    binding = {
        "metadata": {"name": "b", "namespace": "ns"},
        "roleRef": {"kind": "ClusterRole", "name": "view-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa"}],
    }
    assert allowed(user, pods, [], [binding], {"view-pods": role}, {})
    assert not allowed(user, Request("list", "", "pods"), [], [binding], {"view-pods": role}, {})
