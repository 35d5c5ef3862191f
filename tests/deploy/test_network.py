"""deploy/ closes the network: every pod of rollbook-system denies ingress unless a policy lets it in;
NATS and Postgres only from rollbook's pods; the webhook port alone from the API server's addresses;
health ports from the monitoring namespace; /history only from pods labelled as its readers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import NAMESPACE, named, of_kind, render


@pytest.mark.parametrize("overlay", ["standalone", "with-openkruise"])
def test_ingress_is_denied_unless_a_policy_lets_it_in(overlay: str) -> None:
    manifests = render(overlay)
    deny = named(manifests, "NetworkPolicy", "rollbook-default-deny")
    assert deny["metadata"]["namespace"] == NAMESPACE
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}


def _ports(policy: dict[str, Any]) -> set[int]:
    return {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}


def test_nats_and_postgres_only_from_rollbooks_pods() -> None:
    policy = named(render("standalone"), "NetworkPolicy", "rollbook-servers-from-rollbook")
    clients, routes = policy["spec"]["ingress"]
    assert clients["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "rollbook"}}}]
    assert {p["port"] for p in clients["ports"]} == {4222, 5432}
    assert routes["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nats"}}}]


def test_every_container_port_is_reached_only_through_a_named_policy() -> None:
    manifests = render("standalone")
    policies = [
        p for p in of_kind(manifests, "NetworkPolicy") if p["metadata"]["name"] != "rollbook-default-deny"
    ]
    for deployment in of_kind(manifests, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        name = labels["app.kubernetes.io/name"]
        ports = {
            p["containerPort"]
            for c in deployment["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        covered: set[int] = set()
        for policy in policies:
            selector = policy["spec"]["podSelector"]
            wanted = selector.get("matchLabels", {})
            expressions = selector.get("matchExpressions", [])
            if all(labels.get(k) == v for k, v in wanted.items()) and all(
                labels.get(e["key"]) in e["values"] for e in expressions
            ):
                covered |= _ports(policy)
        assert ports <= covered, (name, ports - covered)
    webhook = named(manifests, "NetworkPolicy", "rollbook-webhook-from-apiserver")
    assert _ports(webhook) == {9443}
    assert all("ipBlock" in source for rule in webhook["spec"]["ingress"] for source in rule["from"])
