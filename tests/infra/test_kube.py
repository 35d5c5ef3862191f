"""services.infra.kube.raw_json over HTTP (simcluster): an error answer is an ApiException, as for a
preloaded call, never a Status body mistaken for an object or an empty list; and the client reaches the
API server through the proxy the environment names."""

from __future__ import annotations

import asyncio
import json
from typing import NamedTuple

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.infra.ratelimit import TokenBucket
from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig
from tests.plugins.simcluster import MakeSimCluster, api_client_for


async def test_error_answers_raise(make_simcluster: MakeSimCluster) -> None:
    sim: SimCluster = await make_simcluster(SimConfig(disabled_resources=("sidecarsets",)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as raised:
            await kube.raw_json(await core.read_namespaced_pod("missing", "default", _preload_content=False))
        assert raised.value.status == 404 and "NotFound" in str(raised.value.body)
        with pytest.raises(ApiException) as raised:
            await kube.raw_json(
                await client.CustomObjectsApi(api).list_cluster_custom_object(
                    "apps.kruise.io", "v1alpha1", "sidecarsets", _preload_content=False
                )
            )
        assert raised.value.status == 404

        listing = await kube.raw_json(await core.list_namespace(_preload_content=False))
        assert {n["metadata"]["name"] for n in listing["items"]} >= {"default", "kube-system"}


class Recorded(NamedTuple):
    line: str  # the request line
    headers: dict[str, str]  # names lowercased
    body: bytes


class RecordingServer:
    """An HTTP server on 127.0.0.1 (an API server or a forward proxy stand-in) that records each request
    and answers every one with ``answer`` (a proxied request's line names the full URL of the server)."""

    def __init__(self, answer: bytes = b'{"kind": "NamespaceList", "metadata": {}, "items": []}') -> None:
        self.answer = answer
        self.requests: list[Recorded] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> RecordingServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, *fields = (await reader.readuntil(b"\r\n\r\n")).decode().strip().split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append(Recorded(line, headers, body))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(self.answer)}\r\n\r\n".encode()
            + self.answer
        )
        await writer.drain()
        writer.close()


async def test_requests_go_through_the_proxy_the_environment_names(
    simcluster: SimCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY / HTTPS_PROXY (credentials in the URL included) reach the API server through the proxy,
    though the client's session no longer looks at the environment per request; NO_PROXY still exempts."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path))
    async with RecordingServer() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://rb:secret@"))
        async with await kube.api_client(settings) as api:
            listing = await kube.raw_json(await client.CoreV1Api(api).list_namespace(_preload_content=False))
        assert listing["items"] == []  # the proxy's answer, not the cluster's
        [through_proxy] = proxy.requests
        assert through_proxy.line == f"GET {simcluster.url}/api/v1/namespaces HTTP/1.1"
        assert through_proxy.headers["proxy-authorization"] == "Basic cmI6c2VjcmV0"  # rb:secret

        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with await kube.api_client(settings) as api:
            listing = await kube.raw_json(await client.CoreV1Api(api).list_namespace(_preload_content=False))
        assert {n["metadata"]["name"] for n in listing["items"]} >= {"default"}  # straight to the cluster
        assert len(proxy.requests) == 1


def test_a_kubeconfig_proxy_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.proxy = "http://kubeconfig-proxy:8080"
    kube.use_env_proxy(configuration)
    assert configuration.proxy == "http://kubeconfig-proxy:8080"
    configuration = client.Configuration(host="https://10.0.0.1:6443")
    kube.use_env_proxy(configuration)
    assert configuration.proxy == "http://env-proxy:3128"


async def test_a_hot_path_request_is_the_request_the_generated_client_sends() -> None:
    """kube's pod read and patches (the executor's hot calls) send what the generated API methods send:
    method, path, bearer token, content type (strategic merge for a pod patch) and body."""
    pod = b'{"kind": "Pod", "metadata": {"name": "web-0", "uid": "u1"}}'
    patch = {"metadata": {"annotations": {"a": "b"}, "resourceVersion": "7"}}
    async with RecordingServer(answer=pod) as server:
        configuration = client.Configuration(host=server.url)
        configuration.api_key = {"BearerToken": "Bearer s3cret"}  # as the kubeconfig loader sets it
        async with client.ApiClient(configuration) as api:
            core = client.CoreV1Api(api)
            await core.read_namespaced_pod("web-0", "default")
            await core.patch_namespaced_pod("web-0", "default", patch)
            await core.patch_namespaced_pod_status("web-0", "default", patch)
            generated = list(server.requests)
            server.requests.clear()
            assert await kube.read_namespaced_pod(api, "web-0", "default") == json.loads(pod)
            await kube.patch_namespaced_pod(api, "web-0", "default", patch)
            await kube.patch_namespaced_pod_status(api, "web-0", "default", patch)
    same = ("authorization", "content-type", "accept", "user-agent")
    assert [(r.line, {h: r.headers.get(h) for h in same}, r.body) for r in server.requests] == [
        (r.line, {h: r.headers.get(h) for h in same}, r.body) for r in generated
    ]
    assert [r.line for r in generated] == [
        "GET /api/v1/namespaces/default/pods/web-0 HTTP/1.1",
        "PATCH /api/v1/namespaces/default/pods/web-0 HTTP/1.1",
        "PATCH /api/v1/namespaces/default/pods/web-0/status HTTP/1.1",
    ]
    assert generated[0].headers["authorization"] == "Bearer s3cret"
    assert generated[1].headers["content-type"] == "application/strategic-merge-patch+json"


async def test_a_request_to_a_server_that_never_answers_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A half-open connection (the API server's node gone) ends the request after the default timeout
    instead of holding it, and the action it serves, forever; a watch is long-running and exempt."""
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT_SECONDS", 0.3)
    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # keep the connection open, say nothing

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    api = kube.RateLimitedApiClient(client.Configuration(host=url), TokenBucket(0, 0), "test")
    try:
        reading = asyncio.create_task(kube.read_namespaced_pod(api, "web-0", "default"))
        done, _ = await asyncio.wait({reading}, timeout=10)
        if not done:
            reading.cancel()
            pytest.fail("the request was still waiting for an answer after 10 s")
        assert isinstance(reading.exception(), TimeoutError)
    finally:
        await api.close()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert kube._is_watch([("watch", True), ("timeoutSeconds", 300)])
    assert not kube._is_watch([("labelSelector", "app=web")]) and not kube._is_watch(None)
