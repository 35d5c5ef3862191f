"""The Kubernetes client every service, the webhook and the CLI use: kubernetes-asyncio configured from
settings.kubeconfig, or in-cluster config, or ~/.kube/config, so the same code runs against simcluster
and a real cluster.

Every request goes through a client-side rate limit (``kube_api_qps`` / ``kube_api_burst``, a token
bucket as client-go's): one bucket per process and client group, so everything a service sends shares
it. Leader election asks for its own group, so a Lease renewal never queues behind a burst of pod actions
(controller-runtime gives its leader election a client of its own for the same reason).

Proxies: kubernetes-asyncio's HTTP session trusts the environment, so aiohttp looked up HTTPS_PROXY /
NO_PROXY and read ~/.netrc in a worker thread on every request (about 15% of the executor's CPU). Here
the session does not; the environment's proxy for the API server (HTTPS_PROXY or HTTP_PROXY by the
server's scheme, unless NO_PROXY covers its host; credentials in the proxy URL kept) is looked up once,
when the client is built, and set as the configuration's proxy. A kubeconfig's ``proxy-url`` wins."""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from services.infra.metrics import KUBE_API_REQUESTS, KUBE_API_THROTTLED, KUBE_API_THROTTLED_REQUESTS
from services.infra.ratelimit import TokenBucket
from services.infra.settings import Settings

API_GROUP = "api"  # what a service sends: watches, reads, pod actions, status writes
LEADER_ELECTION_GROUP = "leader-election"

# Throttled requests go in groups of this many (TokenBucket's grain: this many tokens' time): at 100
# QPS, 5 every 50 ms instead of one every 10 ms, which wakes every service 5 times less often.
THROTTLE_GROUP = 5

# One bucket per (process, group): every client a service builds for a group shares it.
_buckets: dict[str, TokenBucket] = {}


def rate_limiter(settings: Settings, group: str = API_GROUP) -> TokenBucket:
    bucket = _buckets.get(group)
    if bucket is None or (bucket.qps, bucket.burst) != (settings.kube_api_qps, settings.kube_api_burst):
        bucket = _buckets[group] = TokenBucket(
            settings.kube_api_qps,
            settings.kube_api_burst,
            grain=THROTTLE_GROUP / max(settings.kube_api_qps, 1e-9),
        )
    return bucket


# A request without a timeout of its own (kubernetes-asyncio's default is none at all) gets the bound
# kube-apiserver puts on every request that is not a watch (--request-timeout, 60 s): without one a
# half-open connection would hold it forever, and with the bus's in-progress heartbeats an executor
# action held that way would never be handed to another executor.
REQUEST_TIMEOUT_SECONDS = 60.0


def _is_watch(query_params: Any) -> bool:
    return any(key == "watch" and value for key, value in query_params or ())


class RateLimitedApiClient(client.ApiClient):  # type: ignore[misc]
    """An ApiClient whose every request first takes a token from ``limiter``; the wait and each
    request's time are metrics (``rollbook_kube_api_throttled_seconds_total``,
    ``rollbook_kube_api_request_seconds``)."""

    def __init__(self, configuration: client.Configuration, limiter: TokenBucket, group: str) -> None:
        super().__init__(configuration)
        self.limiter = limiter
        self.group = group
        _stop_trusting_env(self.rest_client)

    async def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None and not _is_watch(kwargs.get("query_params")):
            kwargs["_request_timeout"] = REQUEST_TIMEOUT_SECONDS
        waited = await self.limiter.acquire()
        if waited > 0:
            KUBE_API_THROTTLED.labels(self.group).inc(waited)
            KUBE_API_THROTTLED_REQUESTS.labels(self.group).inc()
        started = time.perf_counter()
        try:
            return await super().request(method, url, *args, **kwargs)
        finally:
            KUBE_API_REQUESTS.labels(self.group, method).observe(time.perf_counter() - started)


async def api_client(settings: Settings, *, group: str = API_GROUP) -> client.ApiClient:
    configuration = client.Configuration()
    if settings.kubeconfig:
        _check_exists(settings.kubeconfig, "the kubeconfig {} does not exist")
        await config.load_kube_config(config_file=settings.kubeconfig, client_configuration=configuration)
    else:
        try:
            account = settings.service_account_dir.rstrip("/")
            config.load_incluster_config(
                client_configuration=configuration,
                token_filename=f"{account}/token",
                cert_filename=f"{account}/ca.crt",
            )
        except config.ConfigException:
            _check_exists(
                config.KUBE_CONFIG_DEFAULT_LOCATION,
                "not in a cluster, ROLLBOOK_KUBECONFIG is empty and {} does not exist",
            )
            await config.load_kube_config(client_configuration=configuration)
    use_env_proxy(configuration)
    return RateLimitedApiClient(configuration, rate_limiter(settings, group), group)


def use_env_proxy(configuration: client.Configuration) -> None:
    """Set the environment's proxy for the API server (``configuration.host``) as the configuration's
    proxy, as aiohttp would find it per request with ``trust_env`` (same rules, same function), but once.
    A proxy set already (a kubeconfig's ``proxy-url``) is kept."""
    if configuration.proxy:
        return
    try:
        proxy, auth = get_env_proxy_for_url(URL(configuration.host or ""))
    except LookupError:  # no proxy for this scheme, or NO_PROXY covers the host
        return
    if auth is not None:  # back into the URL: aiohttp sends a proxy URL's credentials, plain HTTP or CONNECT
        proxy = proxy.with_user(auth.login).with_password(auth.password)
    configuration.proxy = str(proxy)


def _stop_trusting_env(rest_client: Any) -> None:
    """Give kubernetes-asyncio's REST client a session like its own (same connector) that does not look
    at the environment per request (the module docstring); the old session lets go of the connector."""
    old: aiohttp.ClientSession = rest_client.pool_manager
    rest_client.pool_manager = aiohttp.ClientSession(
        connector=old.connector,
        trust_env=False,
        read_bufsize=2**21,  # as kubernetes-asyncio's: a watch event can carry a large object
    )
    old.detach()


def _check_exists(path: str, message: str) -> None:
    """A missing kubeconfig named plainly (kubernetes-asyncio logs a warning, then fails on an empty one)."""
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        raise config.ConfigException(message.format(full))


async def raw_body(response: Any) -> bytes:
    """Bytes of a ``_preload_content=False`` call's 2xx answer; the ApiException of any other status
    (``raw_json``)."""
    async with response:
        data = await response.read()
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = data.decode("utf-8", errors="replace")
        error.headers = response.headers
        raise error
    body: bytes = data
    return body


async def raw_json(response: Any) -> dict[str, Any]:
    """Body of a ``_preload_content=False`` call as the API returned it (camelCase JSON, no models).

    kubernetes-asyncio checks the status only when it preloads the content, so this raises the
    ApiException a preloaded call would: without it a 404/403/500 ``Status`` body would read as an
    object, or as an empty list (and a relist would then take every object for deleted)."""
    data = await raw_body(response)
    parsed: dict[str, Any] = _decode_json(data)  # msgspec: about 3x faster than json.loads, same objects
    return parsed


_decode_json = msgspec.json.Decoder().decode

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


# The executor's hot calls (a pod read, patch and status patch per action), answered as raw JSON. Named
# and called as the generated methods they replace, so tests/deploy/apicalls.py finds them for RBAC.


async def read_namespaced_pod(api: client.ApiClient, name: str, namespace: str) -> dict[str, Any]:
    return await request_json(api, "GET", _pod_path(namespace, name))


async def patch_namespaced_pod(
    api: client.ApiClient,
    name: str,
    namespace: str,
    body: dict[str, Any] | list[dict[str, Any]],
    *,
    content_type: str = STRATEGIC_MERGE_PATCH,
    answer: bool = True,
) -> dict[str, Any]:
    """A strategic merge patch, as the generated method sends a dict; or ``content_type``'s (a JSON patch
    is a list of operations). ``answer=False``: as ``patch_namespaced_pod_status``."""
    return await request_json(
        api, "PATCH", _pod_path(namespace, name), body, content_type=content_type, answer=answer
    )


async def patch_namespaced_pod_status(
    api: client.ApiClient,
    name: str,
    namespace: str,
    body: dict[str, Any] | list[dict[str, Any]],
    *,
    content_type: str = STRATEGIC_MERGE_PATCH,
    answer: bool = True,
) -> dict[str, Any]:
    """A strategic merge patch of the status subresource (conditions merge by type), or ``content_type``'s.
    ``answer=False``: the pod as written is not decoded, and ``{}`` is returned (``request_json``)."""
    return await request_json(
        api, "PATCH", _pod_path(namespace, name) + "/status", body, content_type=content_type, answer=answer
    )


def _pod_path(namespace: str, name: str) -> str:
    if not namespace or not name:  # an empty name would make this the list path, not one pod's
        raise ValueError(f"a pod needs a namespace and a name, got {namespace!r}/{name!r}")
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


async def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    answer: bool = True,
) -> dict[str, Any]:
    """One request of a hot path and its answer as raw JSON (``raw_json``: an error answer raises
    ApiException). The same client as the generated API methods (rate limit, metrics, bearer token and
    its refresh, proxy, TLS, timeouts) without their per-call parameter checks, sanitising and URL
    templating, which cost about as much CPU as aiohttp's request. ``body``: a JSON-able dict.
    ``answer=False``, for a caller that does not read the answer: a 2xx body is read off the connection
    but not decoded (a pod is a few KiB of JSON), and ``{}`` is returned; an error still raises."""
    headers = {
        **api.default_headers,
        "Accept": "application/json",
        "Content-Type": content_type,
        "User-Agent": api.user_agent,
    }
    if api.cookie:
        headers["Cookie"] = api.cookie
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    response = await api.request(
        method, f"{api.configuration.host}{path}", headers=headers, body=body, _preload_content=False
    )
    if not answer:
        await raw_body(response)
        return {}
    return await raw_json(response)


def status_of(error: BaseException) -> int | None:
    return error.status if isinstance(error, ApiException) else None


def controller_owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference marked controller=true, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None
