"""The Kubernetes client every service, the webhook and the CLI use: kubernetes-asyncio configured from
settings.kubeconfig, or in-cluster config, or ~/.kube/config, so the same code runs against simcluster
and a real cluster."""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra.settings import Settings


async def api_client(settings: Settings) -> client.ApiClient:
    configuration = client.Configuration()
    if settings.kubeconfig:
        _check_exists(settings.kubeconfig, "the kubeconfig {} does not exist")
        await config.load_kube_config(config_file=settings.kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            _check_exists(
                config.KUBE_CONFIG_DEFAULT_LOCATION,
                "not in a cluster, ROLLBOOK_KUBECONFIG is empty and {} does not exist",
            )
            await config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)


def _check_exists(path: str, message: str) -> None:
    """A missing kubeconfig named plainly (kubernetes-asyncio logs a warning, then fails on an empty one)."""
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        raise config.ConfigException(message.format(full))


async def raw_json(response: Any) -> dict[str, Any]:
    """Body of a ``_preload_content=False`` call as the API returned it (camelCase JSON, no models).

    kubernetes-asyncio checks the status only when it preloads the content, so this raises the
    ApiException a preloaded call would: without it a 404/403/500 ``Status`` body would read as an
    object, or as an empty list (and a relist would then take every object for deleted)."""
    async with response:
        data = await response.read()
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = data.decode("utf-8", errors="replace")
        error.headers = response.headers
        raise error
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def status_of(error: BaseException) -> int | None:
    return error.status if isinstance(error, ApiException) else None


def controller_owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference marked controller=true, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None
