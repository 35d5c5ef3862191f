"""services.infra.kube.raw_json over HTTP (simcluster): an error answer is an ApiException, as for a
preloaded call, never a Status body mistaken for an object or an empty list; and the client reaches the
API server through the proxy the environment names."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
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


class RecordingProxy:
    """An HTTP forward proxy stand-in on 127.0.0.1: records each request line and answers every request
    with an empty NamespaceList itself (a proxied request names the full URL of the server)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> RecordingProxy:
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
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        self.requests.append(head.splitlines()[0])
        self.requests.extend(line for line in head.splitlines() if line.lower().startswith("proxy-"))
        body = b'{"kind": "NamespaceList", "apiVersion": "v1", "metadata": {}, "items": []}'
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
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
    async with RecordingProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://rb:secret@"))
        async with await kube.api_client(settings) as api:
            listing = await kube.raw_json(await client.CoreV1Api(api).list_namespace(_preload_content=False))
        assert listing["items"] == []  # the proxy's answer, not the cluster's
        assert proxy.requests[0] == f"GET {simcluster.url}/api/v1/namespaces HTTP/1.1"
        assert "Proxy-Authorization: Basic cmI6c2VjcmV0" in proxy.requests  # rb:secret

        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with await kube.api_client(settings) as api:
            listing = await kube.raw_json(await client.CoreV1Api(api).list_namespace(_preload_content=False))
        assert {n["metadata"]["name"] for n in listing["items"]} >= {"default"}  # straight to the cluster
        assert len(proxy.requests) == 2


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
