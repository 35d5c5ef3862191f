"""How the API server reaches a webhook named by ``clientConfig`` (admission and CRD conversion), as
kube-apiserver does: a ``url`` as is; a ``service`` through that Service's endpoints (its EndpointSlices'
ready addresses and the port its ``port`` resolves to). A Service that does not exist, or that has no ready
endpoint, fails the call with kube-apiserver's reason. Simulated containers listen on no port, so an
endpoint that is a simulated pod refuses the connection; a pod run by the process runtime (processes.py)
listens on its own loopback address, and is called there over HTTPS with the Service's DNS name
(``<name>.<namespace>.svc``) as the TLS server name, as kube-apiserver checks it. ``SimConfig.service_urls``
/ ``SimCluster.route_service`` send a Service's traffic to a server of the test's own instead."""

from __future__ import annotations

import random
from typing import Any

from .processes import LOOPBACK_PREFIX
from .resources import ENDPOINT_SLICES, SERVICES
from .store import Store

Obj = dict[str, Any]


class Unreachable(RuntimeError):
    """The webhook cannot be called; the message is the reason kube-apiserver gives."""


class ServiceRouter:
    def __init__(self, store: Store, service_urls: dict[str, str] | None = None) -> None:
        self.store = store
        self.service_urls = dict(service_urls or {})

    def url(self, client_config: Obj, timeout_seconds: float) -> str:
        return self.target(client_config, timeout_seconds)[0]

    def target(self, client_config: Obj, timeout_seconds: float) -> tuple[str, str | None]:
        """(URL to post to, TLS server name to check when it is not the URL's host)."""
        if client_config.get("url"):
            return str(client_config["url"]), None
        service = client_config.get("service") or {}
        namespace, name = service.get("namespace", ""), service.get("name", "")
        port = int(service.get("port") or 443)
        path = str(service.get("path") or "/")
        routed = self.service_urls.get(f"{namespace}/{name}")
        if routed is not None:
            return routed.rstrip("/") + path, None
        shown = f'Post "https://{name}.{namespace}.svc:{port}{path}?timeout={int(timeout_seconds)}s"'
        svc = self.store.find(SERVICES, namespace, name)
        if svc is None:
            raise Unreachable(f'{shown}: service "{name}" not found')
        target = self._endpoint(svc, port)
        if target is None:
            raise Unreachable(f'{shown}: no endpoints available for service "{name}"')
        if target.startswith(LOOPBACK_PREFIX + "."):
            return f"https://{target}{path}", f"{name}.{namespace}.svc"
        raise Unreachable(f"{shown}: dial tcp {target}: connect: connection refused")

    def _endpoint(self, svc: Obj, port: int) -> str | None:
        """``ip:port`` of the Service's first ready endpoint for ``port``, None when it has none."""
        meta = svc["metadata"]
        service_port = next(
            (p for p in (svc.get("spec") or {}).get("ports") or [] if int(p.get("port", 0)) == port), None
        )
        if service_port is None:
            return None
        slices, _, _, _ = self.store.list(
            ENDPOINT_SLICES,
            meta.get("namespace", ""),
            lambda s: (
                ((s.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name")
                == meta["name"]
            ),
        )
        ready: list[str] = []
        for endpoint_slice in slices:
            ports = [
                p.get("port")
                for p in endpoint_slice.get("ports") or []
                if p.get("name", "") == service_port.get("name", "")
            ]
            if not ports:
                continue
            for endpoint in endpoint_slice.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready") and endpoint.get("addresses"):
                    ready.append(f"{endpoint['addresses'][0]}:{ports[0]}")
        live = [t for t in ready if t.startswith(LOOPBACK_PREFIX + ".")]
        if live:  # pods that listen: any of them, as kube-proxy spreads calls
            return random.choice(live)
        return ready[0] if ready else None
