"""The EndpointSlice controller (discovery.k8s.io/v1): for each Service with a selector, the pods it
selects that have an IP, as endpoints with ``ready`` / ``serving`` / ``terminating`` conditions, their
``targetRef`` and ``nodeName``, and the Service's ports resolved against each pod (a named
``targetPort`` looks the port up in the pod's containers, so pods resolving differently get different
slices). Slices are labelled ``kubernetes.io/service-name`` and owned by the Service."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from ..errors import ApiError
from ..resources import ENDPOINT_SLICES, PODS, SERVICES
from ..store import Key, Obj, WatchEvent, key_of
from .base import Controller, controlled, owner_reference, pod_ready, pod_terminal

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
MAX_ENDPOINTS = 100  # --max-endpoints-per-slice's default


def selects(service: Obj, pod: Obj) -> bool:
    selector = (service.get("spec") or {}).get("selector")
    if not selector:
        return False
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def resolve_port(port: dict[str, Any], pod: Obj) -> int | None:
    """The pod port a Service port's targetPort names (podutil.FindPort), None when the pod has none."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for container_port in container.get("ports") or []:
            if container_port.get("name") == target and container_port.get("protocol", "TCP") == port.get(
                "protocol", "TCP"
            ):
                return int(container_port["containerPort"])
    return None


def endpoint_of(pod: Obj) -> dict[str, Any]:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    terminating = bool(meta.get("deletionTimestamp"))
    ready = pod_ready(pod)
    endpoint: dict[str, Any] = {
        "addresses": [status["podIP"]],
        "conditions": {"ready": ready and not terminating, "serving": ready, "terminating": terminating},
        "targetRef": {
            "kind": "Pod",
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta["uid"],
        },
    }
    if spec.get("nodeName"):
        endpoint["nodeName"] = spec["nodeName"]
    if spec.get("hostname"):
        endpoint["hostname"] = spec["hostname"]
    return endpoint


def desired_slices(service: Obj, pods: list[Obj]) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(ports, endpoints) per slice: pods grouped by how the Service's ports resolve on them, sorted by
    pod name, at most MAX_ENDPOINTS per slice. A Service with a selector and no pods has one empty slice."""
    service_ports = (service.get("spec") or {}).get("ports") or []
    groups: dict[tuple[Any, ...], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod_terminal(pod) or not (pod.get("status") or {}).get("podIP") or not selects(service, pod):
            continue
        ports = []
        for port in service_ports:
            number = resolve_port(port, pod)
            if number is None:
                continue
            entry: dict[str, Any] = {
                "name": port.get("name", ""),
                "protocol": port.get("protocol", "TCP"),
                "port": number,
            }
            if port.get("appProtocol"):
                entry["appProtocol"] = port["appProtocol"]
            ports.append(entry)
        signature = tuple((p["name"], p["protocol"], p["port"]) for p in ports)
        groups.setdefault(signature, (ports, []))[1].append(endpoint_of(pod))
    out: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    for ports, endpoints in groups.values():
        for start in range(0, len(endpoints), MAX_ENDPOINTS):
            out.append((ports, endpoints[start : start + MAX_ENDPOINTS]))
    if not out:
        out.append(([], []))
    return out


class EndpointSliceController(Controller):
    name = "endpointslice-controller"
    watches = (SERVICES, PODS, ENDPOINT_SLICES)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is SERVICES:
            return [key_of(event.obj)]
        if event.resource is ENDPOINT_SLICES:
            name = ((event.obj.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME)
            return [(key_of(event.obj)[0], name)] if name else []
        namespace = key_of(event.obj)[0]
        out = []
        for service in self._services(namespace):
            if selects(service, event.obj) or (event.prev is not None and selects(service, event.prev)):
                out.append(key_of(service))
        return out

    def _services(self, namespace: str) -> list[Obj]:
        return [s for (ns, _), s in self.store.objects[SERVICES].items() if ns == namespace]

    async def sync(self, key: Key) -> float | None:
        service = self.store.find(SERVICES, *key)
        if service is None or service["metadata"].get("deletionTimestamp"):
            return None
        if not (service.get("spec") or {}).get("selector"):
            return None  # a Service without a selector: its slices are someone else's
        pods, _, _, _ = self.store.list(PODS, key[0], lambda p: selects(service, p))
        wanted = desired_slices(service, pods)
        existing = sorted(
            (s for s in controlled(self.store, service, ENDPOINT_SLICES)),
            key=lambda s: s["metadata"]["name"],
        )
        for index, (ports, endpoints) in enumerate(wanted):
            body = {
                "addressType": "IPv4",
                "ports": ports,
                "endpoints": endpoints,
            }
            if index < len(existing):
                current = existing[index]
                if all(current.get(k) == v for k, v in body.items()):
                    continue
                self.store.update(ENDPOINT_SLICES, key[0], current["metadata"]["name"], dict(current, **body))
                continue
            self.store.create(
                ENDPOINT_SLICES,
                key[0],
                {
                    "metadata": {
                        "generateName": f"{key[1]}-",
                        "namespace": key[0],
                        "labels": {SERVICE_NAME: key[1], MANAGED_BY: CONTROLLER_NAME},
                        "ownerReferences": [owner_reference(service)],
                    },
                    **body,
                },
            )
        for surplus in existing[len(wanted) :]:
            with contextlib.suppress(ApiError):
                self.store.delete(ENDPOINT_SLICES, key[0], surplus["metadata"]["name"])
        return None
