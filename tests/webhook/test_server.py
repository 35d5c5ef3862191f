"""AdmissionReview v1 over real HTTPS against the webhook server (self-signed CA made at start)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.model import sidecarset as ss
from services.webhook.cache import NamespaceLabels, SidecarSetCache
from services.webhook.recorder import InjectionRecorder, PendingEvent
from services.webhook.server import RunningServer, WebhookState, start_server
from services.webhook.tls import ServingCertificate, generate_self_signed
from tests.webhook.test_injection_rules import container, make_sidecarset, seed_pod, seed_sidecarset


class FlakySink:
    """An event sink that is down until ``up`` is set, deduplicating by event id like the store does."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.events: dict[uuid.UUID, PendingEvent] = {}
        self.refused = 0

    async def append(self, event: PendingEvent) -> None:
        if not self.up:
            self.refused += 1
            raise ConnectionError("event store unavailable")
        self.events.setdefault(event.event_id, event)


@dataclass
class Webhook:
    server: RunningServer
    certificate: ServingCertificate
    state: WebhookState
    sink: FlakySink
    session: aiohttp.ClientSession
    synced: list[bool]

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        async with self.session.post(self.server.base_url + path, json=body) as response:
            return response.status, await response.json()

    async def review(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        status, body = await self.post(
            path, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        assert status == 200, body
        assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == request["uid"]
        response: dict[str, Any] = body["response"]
        return response


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> ServingCertificate:
    return generate_self_signed(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture
async def webhook(certificate: ServingCertificate) -> AsyncIterator[Webhook]:
    sidecarsets = SidecarSetCache()
    sidecarsets.replace([seed_sidecarset()])
    sink = FlakySink()
    recorder = InjectionRecorder(sink, first_retry_seconds=0.01, max_retry_seconds=0.05)
    recorder.start()
    synced = [True]
    state = WebhookState(
        sidecarsets=sidecarsets, namespaces=NamespaceLabels(), recorder=recorder, synced=lambda: synced[0]
    )
    server = await start_server(state, certificate)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=certificate.client_context()))
    try:
        yield Webhook(server, certificate, state, sink, session, synced)
    finally:
        await session.close()
        await server.stop()
        await recorder.stop(wait_seconds=0.1)


def pod_request(pod: dict[str, Any], namespace: str = "default", **extra: Any) -> dict[str, Any]:
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": "CREATE",
        "object": pod,
        **extra,
    }


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["patchType"] == "JSONPatch"
    return ss.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


async def test_seed_pod_gets_tools_sidecar_first_and_an_event(webhook: Webhook) -> None:
    pod = seed_pod()
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "html", "mountPath": "/usr/share/nginx/html"}]
    request = pod_request(pod)
    response = await webhook.review("/mutate-pod", request)
    assert response["allowed"] is True
    admitted = patched(pod, response)
    assert [c["name"] for c in admitted["spec"]["containers"]] == ["tools", "app"]
    assert admitted["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "html", "mountPath": "/usr/share/nginx/html"}
    ]
    annotations = admitted["metadata"]["annotations"]
    assert annotations[ss.INJECTED_LIST_ANNOTATION] == "test-sidecarset"
    assert annotations[ss.INJECTION_ID_ANNOTATION] == request["uid"]
    expected_hash = ss.parse_sidecarset(seed_sidecarset()).hash
    assert json.loads(annotations[ss.HASH_ANNOTATION])["test-sidecarset"]["hash"] == expected_hash

    assert await webhook.state.recorder.flush(2.0)
    [event] = webhook.sink.events.values()
    assert event.stream == "SidecarSet//test-sidecarset"
    assert event.payload.pod == "test-pod" and event.payload.namespace == "default"
    assert event.payload.sidecarset == "test-sidecarset" and event.payload.revision == expected_hash
    assert event.payload.containers == ["tools"]
    assert event.correlation_id == request["uid"]


async def test_same_admission_twice_records_one_event(webhook: Webhook) -> None:
    request = pod_request(seed_pod())
    await webhook.review("/mutate-pod", request)
    await webhook.review("/mutate-pod", request)  # the API server retried the call
    assert await webhook.state.recorder.flush(2.0)
    assert len(webhook.sink.events) == 1


@pytest.mark.parametrize(
    ("labels", "namespace"),
    [
        ({"other": "x"}, "default"),  # selector does not match
        ({"app": "nginx"}, "team-b"),  # the seed's SidecarSet is scoped to default
    ],
)
async def test_unselected_pod_is_admitted_unchanged(
    webhook: Webhook, labels: dict[str, str], namespace: str
) -> None:
    pod = seed_pod()
    pod["metadata"]["labels"] = labels
    response = await webhook.review("/mutate-pod", pod_request(pod, namespace))
    assert response["allowed"] is True and "patch" not in response
    assert await webhook.state.recorder.flush(1.0)
    assert webhook.sink.events == {}


async def test_cluster_wide_sidecarset_leaves_kube_system_alone(webhook: Webhook) -> None:
    webhook.state.sidecarsets.apply("ADDED", make_sidecarset("mesh", containers=[container("proxy")]))
    pod = seed_pod()
    system = await webhook.review("/mutate-pod", pod_request(pod, "kube-system"))
    assert "patch" not in system
    team = await webhook.review("/mutate-pod", pod_request(pod, "team-b"))
    assert [c["name"] for c in patched(pod, team)["spec"]["containers"]] == ["proxy", "app"]


async def test_dry_run_is_patched_but_not_recorded(webhook: Webhook) -> None:
    response = await webhook.review("/mutate-pod", pod_request(seed_pod(), dryRun=True))
    assert len(patched(seed_pod(), response)["spec"]["containers"]) == 2
    assert await webhook.state.recorder.flush(1.0)
    assert webhook.sink.events == {}


async def test_update_of_a_pod_passes_unchanged(webhook: Webhook) -> None:
    response = await webhook.review("/mutate-pod", pod_request(seed_pod(), operation="UPDATE"))
    assert response["allowed"] is True and "patch" not in response


async def test_store_outage_does_not_block_admission_and_events_arrive_later(webhook: Webhook) -> None:
    webhook.sink.up = False
    response = await asyncio.wait_for(webhook.review("/mutate-pod", pod_request(seed_pod())), 2.0)
    assert response["allowed"] is True and "patch" in response
    # The recorder's first attempt is refused (that proves it tried): nothing is stored meanwhile.
    for _ in range(500):  # 5 s at most
        if webhook.sink.refused >= 1:
            break
        await asyncio.sleep(0.01)
    assert webhook.sink.refused >= 1 and webhook.sink.events == {}
    webhook.sink.up = True
    assert await webhook.state.recorder.flush(2.0)
    assert len(webhook.sink.events) == 1


async def test_not_synced_admits_unchanged_with_warning_and_is_not_ready(webhook: Webhook) -> None:
    webhook.synced[0] = False
    response = await webhook.review("/mutate-pod", pod_request(seed_pod()))
    assert response["allowed"] is True and "patch" not in response and response["warnings"]
    async with webhook.session.get(webhook.server.base_url + "/readyz") as ready:
        assert ready.status == 503
    webhook.synced[0] = True
    async with webhook.session.get(webhook.server.base_url + "/readyz") as ready:
        assert ready.status == 200
    async with webhook.session.get(webhook.server.base_url + "/healthz") as healthy:
        assert healthy.status == 200


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
    ],
)
async def test_malformed_review_is_a_400_with_reason(webhook: Webhook, body: Any) -> None:
    async with webhook.session.post(
        webhook.server.base_url + "/mutate-pod", data=body if isinstance(body, str) else json.dumps(body)
    ) as response:
        assert response.status == 400
        assert (await response.json())["error"]


def sidecarset_request(
    obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": "SidecarSet"},
        "resource": {"group": "apps.kruise.io", "version": "v1alpha1", "resource": "sidecarsets"},
        "operation": operation,
        "object": obj,
        "oldObject": old,
    }


async def test_conflicting_sidecarset_is_refused_naming_the_other(webhook: Webhook) -> None:
    clash = make_sidecarset("second-tools", namespace="default", containers=[container("tools")])
    response = await webhook.review("/validate-sidecarset", sidecarset_request(clash))
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 500,
        "message": 'spec.containers: Invalid value: "tools": '
        "container tools already exist in test-sidecarset",
    }
    elsewhere = make_sidecarset("other-ns-tools", namespace="prod", containers=[container("tools")])
    assert (await webhook.review("/validate-sidecarset", sidecarset_request(elsewhere)))["allowed"] is True


async def test_invalid_sidecarset_is_refused_naming_the_field(webhook: Webhook) -> None:
    bad = seed_sidecarset()
    bad["spec"]["containers"][0]["podInjectPolicy"] = "Sometimes"
    response = await webhook.review("/validate-sidecarset", sidecarset_request(bad))
    assert response["allowed"] is False and response["status"] == {
        "code": 500,
        "message": 'spec.container.podInjectPolicy: Invalid value: "Sometimes": '
        "unsupported pod inject policy",
    }


async def test_sidecarset_update_rules(webhook: Webhook) -> None:
    old = seed_sidecarset()
    new_image = seed_sidecarset()
    new_image["spec"]["containers"][0]["image"] = "centos:7"
    assert (await webhook.review("/validate-sidecarset", sidecarset_request(new_image, "UPDATE", old)))[
        "allowed"
    ]
    renamed = seed_sidecarset()
    renamed["spec"]["containers"][0]["name"] = "tools2"
    response = await webhook.review("/validate-sidecarset", sidecarset_request(renamed, "UPDATE", old))
    assert response["allowed"] is False
    assert (
        response["status"]["message"]
        == 'spec.containers.name: Invalid value: "tools2": container tools2 is not found'
    )


async def test_tls_is_real_untrusted_client_is_refused(webhook: Webhook) -> None:
    async with aiohttp.ClientSession() as plain:  # system CAs only: our self-signed CA is not among them
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await plain.get(webhook.server.base_url + "/healthz")
    assert isinstance(webhook.certificate.client_context(), ssl.SSLContext)


async def test_metrics_count_reviews(webhook: Webhook) -> None:
    await webhook.review("/mutate-pod", pod_request(seed_pod()))
    async with webhook.session.get(webhook.server.base_url + "/metrics") as response:
        text = await response.text()
    assert 'rollbook_webhook_reviews_total{endpoint="mutate-pod",outcome="injected"} 1.0' in text
    assert 'rollbook_webhook_injections_total{sidecarset="test-sidecarset"} 1.0' in text


async def test_malformed_pod_is_admitted_unchanged_with_a_warning(webhook: Webhook) -> None:
    broken = seed_pod()
    broken["spec"]["containers"] = "not-a-list"  # the API server's validation would refuse it after us
    response = await webhook.review("/mutate-pod", pod_request(broken))
    assert response["allowed"] is True and "patch" not in response
    assert "injection failed" in response["warnings"][0]


async def test_sidecarset_gets_its_hash_annotations(webhook: Webhook) -> None:
    obj = seed_sidecarset()
    response = await webhook.review("/mutate-sidecarset", sidecarset_request(obj))
    annotated = patched(obj, response)["metadata"]["annotations"]
    parsed = ss.parse_sidecarset(obj)
    assert annotated == {
        ss.HASH_ANNOTATION: parsed.hash,
        ss.HASH_WITHOUT_IMAGE_ANNOTATION: parsed.hash_without_image,
    }
    obj["metadata"]["annotations"] = annotated  # already right: nothing to patch
    assert "patch" not in await webhook.review("/mutate-sidecarset", sidecarset_request(obj))
    invalid = make_sidecarset("bad", containers=[])  # refused by the validating webhook, not here
    assert "patch" not in await webhook.review("/mutate-sidecarset", sidecarset_request(invalid))


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_the_webhook_serves_https_on_uvloop(certificate: ServingCertificate) -> None:
    """`rollbook webhook` runs on uvloop (services/cli/runtime.py), whose server is not asyncio's class."""
    import uvloop

    async def serve_once() -> int:
        state = WebhookState(
            sidecarsets=SidecarSetCache(),
            namespaces=NamespaceLabels(),
            recorder=InjectionRecorder(FlakySink()),
            synced=lambda: True,
        )
        server = await start_server(state, certificate)
        try:
            connector = aiohttp.TCPConnector(ssl=certificate.client_context())
            async with aiohttp.ClientSession(connector=connector) as session:
                async with session.get(server.base_url + "/healthz") as response:
                    assert server.base_url == f"https://127.0.0.1:{server.port}"
                    return response.status
        finally:
            await server.stop()

    assert uvloop.run(serve_once()) == 200
