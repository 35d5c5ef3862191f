"""Small Kubernetes helpers for the end-to-end tests (kubernetes-asyncio over HTTP to simcluster)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

GROUP, VERSION, PLURAL = "apps.kruise.io", "v1alpha1", "clonesets"
SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed"


def seed_cloneset(file: str, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((SEED / file).read_text())
    obj = copy.deepcopy(obj)
    obj["spec"].update(spec)
    return obj


class Cluster:
    def __init__(self, api: client.ApiClient, namespace: str = "default") -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace

    async def create_cloneset(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = self.namespace
        result: dict[str, Any] = await self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, obj
        )
        return result

    async def patch_cloneset(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            patch,
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )
        return result

    async def cloneset(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return result

    async def pods(self, owner: str) -> dict[str, dict[str, Any]]:
        """Live (not terminating) pods controlled by the CloneSet, by name, as plain dicts."""
        response: Any = await self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return _owned(json.loads(await response.read()), owner)

    async def pvcs(self, owner: str) -> dict[str, dict[str, Any]]:
        response: Any = await self.core.list_namespaced_persistent_volume_claim(
            self.namespace, _preload_content=False
        )
        return _owned(json.loads(await response.read()), owner)

    async def delete_pod(self, name: str) -> None:
        await self.core.delete_namespaced_pod(name, self.namespace)


def _owned(listing: dict[str, Any], owner: str) -> dict[str, dict[str, Any]]:
    result = {}
    for item in listing.get("items") or []:
        metadata = item.get("metadata") or {}
        refs = metadata.get("ownerReferences") or []
        if not metadata.get("deletionTimestamp") and any(
            r.get("controller") and r.get("name") == owner for r in refs
        ):
            result[metadata["name"]] = item
    return result


def with_image(obj: dict[str, Any], image: str) -> dict[str, Any]:
    """A merge patch changing only the first container's image (lists are replaced whole by merge patches,
    so the patch carries the full container list)."""
    containers = copy.deepcopy(obj["spec"]["template"]["spec"]["containers"])
    containers[0]["image"] = image
    return {"spec": {"template": {"spec": {"containers": containers}}}}


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def revision_of(pod: dict[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get("controller-revision-hash", ""))


def instance_id(obj: dict[str, Any]) -> str:
    return str(
        ((obj.get("metadata") or {}).get("labels") or {}).get("apps.kruise.io/cloneset-instance-id", "")
    )


def restart_count(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def pod_ip(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def image_of(pod: dict[str, Any]) -> str:
    return str(((pod.get("spec") or {}).get("containers") or [{}])[0].get("image", ""))
