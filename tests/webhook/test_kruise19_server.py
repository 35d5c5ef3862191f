"""OpenKruise 1.9's SidecarSet features through the webhook's real admission path (AdmissionReview over
HTTPS): a pinned revision read from the event store, resourcesPolicy, and the sort-by-name gate."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from services.infra.store import EventStore
from services.kinds.registry import SIDECARSET
from services.kinds.sidecarset.rules.revisions import plan_revision, revision_object
from services.model import sidecarset as ss
from services.model.events import RevisionCreated, new_event
from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder
from services.webhook.revisions import RevisionSource, StoreRevisions
from services.webhook.server import WebhookState, start_server
from services.webhook.tls import ServingCertificate
from tests.kinds.sidecarset.test_upgrade import NEW, NOW, OLD, sidecarset
from tests.webhook.test_injection_rules import container, make_sidecarset
from tests.webhook.test_kruise19_rules import APPS, ORDER_SETS, app_pod, policy
from tests.webhook.test_revision_source import FakeStore
from tests.webhook.test_server import FlakySink, Webhook, certificate, patched, pod_request

__all__ = ["certificate"]  # the module-scoped TLS fixture


@asynccontextmanager
async def serving(
    cert: ServingCertificate,
    sidecarsets: list[dict[str, Any]],
    *,
    revisions: RevisionSource | None = None,
    revisions_unavailable: str = "skip",
    sort_containers_by_name: bool = False,
) -> AsyncIterator[Webhook]:
    cache = SidecarSetCache()
    cache.replace(sidecarsets)
    sink = FlakySink()
    recorder = InjectionRecorder(sink, first_retry_seconds=0.01, max_retry_seconds=0.05)
    recorder.start()
    state = WebhookState(
        sidecarsets=cache,
        namespaces=NamespaceLabels(),
        recorder=recorder,
        revisions=revisions,
        revisions_unavailable=revisions_unavailable,
        sort_containers_by_name=sort_containers_by_name,
    )
    server = await start_server(state, cert)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=cert.client_context()))
    try:
        yield Webhook(server, cert, state, sink, session, [True])
    finally:
        await session.close()
        await server.stop()
        await recorder.stop(wait_seconds=0.1)


async def record_revision(store: EventStore, obj: dict[str, Any], recorded: dict[str, dict[str, Any]]) -> str:
    """Record ``obj``'s revision on its decisions stream as the planner does; its name."""
    parsed = ss.parse_sidecarset(obj)
    decision = plan_revision(parsed, recorded.values(), 0, set())
    assert decision.record is not None
    record = revision_object(parsed.name, decision.record)
    recorded[decision.record.name] = record
    stream = SIDECARSET.decisions_stream("", parsed.name)
    event = RevisionCreated(
        name=decision.record.name,
        revision=decision.record.number,
        hash=parsed.hash,
        template=decision.record.data,
        object=record,
    )
    version = await store.stream_version(stream)
    await store.append(
        [new_event(event, stream=stream, stream_version=version + 1, occurred_at=NOW)], version
    )
    return decision.record.name


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["metadata"]["name"] = name
    return obj


def store_factory(store: EventStore) -> Callable[[], Any]:
    async def connect() -> EventStore:
        return store

    return connect


async def test_a_pinned_revision_is_read_from_the_event_store_and_injected(
    certificate: ServingCertificate, event_store: EventStore
) -> None:
    name = f"pinned-{uuid.uuid4().hex[:8]}"
    recorded: dict[str, dict[str, Any]] = {}
    old_name = await record_revision(event_store, named(sidecarset(OLD), name), recorded)
    await record_revision(event_store, named(sidecarset(NEW), name), recorded)
    obj = named(sidecarset(NEW), name)
    obj["spec"]["injectionStrategy"] = {"revision": {"revisionName": old_name}}
    revisions = StoreRevisions(store_factory(event_store))
    async with serving(certificate, [obj], revisions=revisions) as webhook:
        pod = app_pod()
        response = await webhook.review("/mutate-pod", pod_request(pod))
        admitted = patched(pod, response)
        assert admitted["spec"]["containers"][0]["image"] == OLD
        entry = ss.pod_sidecar_revisions(admitted)[name]
        assert entry.controller_revision == old_name
        assert entry.hash == ss.parse_sidecarset(sidecarset(OLD)).hash

        # A revision the planner records later is found: the stream is caught up at the next admission.
        later = await record_revision(event_store, named(sidecarset("centos:8"), name), recorded)
        obj["spec"]["injectionStrategy"] = {"revision": {"revisionName": later}}
        webhook.state.sidecarsets.apply("MODIFIED", obj)
        response = await webhook.review("/mutate-pod", pod_request(app_pod()))
        assert patched(app_pod(), response)["spec"]["containers"][0]["image"] == "centos:8"

        # A name that is not recorded: the pod is refused with the reason (OpenKruise refuses it too).
        obj["spec"]["injectionStrategy"] = {"revision": {"revisionName": f"{name}-gone"}}
        webhook.state.sidecarsets.apply("MODIFIED", obj)
        response = await webhook.review("/mutate-pod", pod_request(app_pod()))
        assert response["allowed"] is False and response["status"]["code"] == 500
        assert f"'{name}-gone' is not a recorded revision" in response["status"]["message"]
        assert "patch" not in response


def unavailable_count(webhook: Webhook, name: str, action: str) -> float:
    registry = webhook.state.metrics.registry
    sample = registry.get_sample_value(
        "rollbook_webhook_revisions_unavailable_total", {"sidecarset": name, "action": action}
    )
    return sample or 0.0


@pytest.mark.parametrize("action", ["skip", "latest", "refuse"])
async def test_with_the_event_store_down_a_never_read_pin_admits_the_pod_as_configured(
    certificate: ServingCertificate, action: str
) -> None:
    """A restarted webhook meets a pinned pod while Postgres is down: it does not refuse the pod (unless
    told to): it skips that SidecarSet, or injects its latest, with a warning and a count."""
    store = FakeStore()
    store.down = True

    async def connect() -> Any:
        return store

    obj = sidecarset(NEW)
    obj["spec"]["injectionStrategy"] = {"revision": {"revisionName": "test-sidecarset-1"}}
    plain = named(make_sidecarset("plain", containers=[container("agent")]), "plain")
    revisions = StoreRevisions(connect, timeout_seconds=0.5)
    async with serving(
        certificate, [obj, plain], revisions=revisions, revisions_unavailable=action
    ) as webhook:
        pod = app_pod()
        response = await webhook.review("/mutate-pod", pod_request(pod))
        assert unavailable_count(webhook, "test-sidecarset", action) == 1
        if action == "refuse":
            assert response["allowed"] is False and response["status"]["code"] == 500
            assert "'test-sidecarset' cannot be read" in response["status"]["message"]
            return
        assert response["allowed"] is True
        (warning,) = response["warnings"]
        assert "'test-sidecarset'" in warning and "event store unavailable" in warning
        containers = patched(pod, response)["spec"]["containers"]
        if action == "skip":  # the other SidecarSet still injects
            assert [c["name"] for c in containers] == ["agent", "app"]
            assert "not injected" in warning
        else:
            assert [c["image"] for c in containers if c["name"] != "app" and c["name"] != "agent"] == [NEW]
            assert "latest" in warning


async def test_without_an_event_store_a_pinned_sidecarset_is_skipped_with_a_warning(
    certificate: ServingCertificate,
) -> None:
    obj = sidecarset(NEW)
    obj["spec"]["injectionStrategy"] = {"revision": {"customVersion": "v1"}}
    plain = named(make_sidecarset("plain", containers=[container("agent")]), "plain")
    plain["spec"]["selector"] = {"matchLabels": {"team": "x"}}
    async with serving(certificate, [obj, plain]) as webhook:
        response = await webhook.review("/mutate-pod", pod_request(app_pod()))
        assert response["allowed"] is True and "patch" not in response
        assert "reads no event store" in response["warnings"][0]
        # A pod no pinned SidecarSet selects is injected as usual.
        other = app_pod(labels={"team": "x"})
        response = await webhook.review("/mutate-pod", pod_request(other))
        assert [c["name"] for c in patched(other, response)["spec"]["containers"]] == ["agent", "app"]
        assert "warnings" not in response


async def test_a_pod_shape_the_selection_pass_cannot_read_is_admitted_with_a_warning(
    certificate: ServingCertificate,
) -> None:
    obj = sidecarset(NEW)
    obj["spec"]["injectionStrategy"] = {"revision": {"revisionName": "x"}}
    async with serving(certificate, [obj]) as webhook:
        pod = {**app_pod(), "metadata": ["p"]}  # metadata not a map: the selection pass cannot read it
        response = await webhook.review("/mutate-pod", pod_request(pod))
        assert response["allowed"] is True and "patch" not in response
        assert "pod admitted unchanged" in response["warnings"][0]
        assert (
            webhook.state.metrics.registry.get_sample_value(
                "rollbook_webhook_reviews_total", {"endpoint": "mutate-pod", "outcome": "error"}
            )
            == 1
        )


async def test_readyz_waits_for_the_pinning_sidecarsets_revisions(certificate: ServingCertificate) -> None:
    loaded = [False]
    async with serving(certificate, []) as webhook:
        webhook.state.revisions_loaded = lambda: loaded[0]
        async with webhook.session.get(webhook.server.base_url + "/readyz") as response:
            assert response.status == 503 and "revisions" in await response.text()
        loaded[0] = True
        async with webhook.session.get(webhook.server.base_url + "/readyz") as response:
            assert response.status == 200


async def test_resources_policy_sets_the_sidecar_resources_at_admission(
    certificate: ServingCertificate,
) -> None:
    with_policy = make_sidecarset("sized", containers=[container("agent", resourcesPolicy=policy("sum"))])
    async with serving(certificate, [with_policy]) as webhook:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "nginx"}}}
        pod["spec"] = {"containers": APPS}
        response = await webhook.review("/mutate-pod", pod_request(pod))
        agent = patched(pod, response)["spec"]["containers"][0]
        assert agent["name"] == "agent"
        assert agent["resources"] == {
            "limits": {"cpu": "300m", "memory": "200Mi"},
            "requests": {"cpu": "75m", "memory": "100Mi"},
        }
        # No target container (every container is a sidecar of it): refused with the reason.
        lonely = {**pod, "spec": {"containers": [container("agent")]}}
        response = await webhook.review("/mutate-pod", pod_request(lonely))
        assert response["allowed"] is False and response["status"]["code"] == 500
        assert "no containers match the regex pattern" in response["status"]["message"]


async def test_sort_containers_by_name_gate_at_admission(certificate: ServingCertificate) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "nginx"}}}
    pod["spec"] = {"containers": [container("app")]}
    for gate, expected in (
        (False, ["b-proxy", "a-agent", "app", "z-log"]),
        (True, ["a-agent", "b-proxy", "app", "z-log"]),
    ):
        async with serving(certificate, ORDER_SETS, sort_containers_by_name=gate) as webhook:
            response = await webhook.review("/mutate-pod", pod_request(pod))
            assert [c["name"] for c in patched(pod, response)["spec"]["containers"]] == expected
