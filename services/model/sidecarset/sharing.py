"""What a sidecar takes from the app containers: transferred env vars, shared volume mounts and devices."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from services.model.sidecarset.core import INJECTED_ENV

_SUBPATH_VAR_RE = re.compile(r"\$\(([^)]+)\)")


def _env_names(container: Mapping[str, Any]) -> set[Any]:
    return {e.get("name") for e in container.get("env") or [] if isinstance(e, Mapping)}


def add_env(container: dict[str, Any], env: Mapping[str, Any]) -> None:
    """Append ``env`` unless the container already has one of that name (the sidecar's own values win)."""
    if env.get("name") not in _env_names(container):
        container.setdefault("env", []).append(copy.deepcopy(dict(env)))


def is_injected(container: Mapping[str, Any]) -> bool:
    return any(e.get("name") == INJECTED_ENV and e.get("value") == "true" for e in container.get("env") or [])


def _field_ref_value(pod: Mapping[str, Any], field_path: str) -> str | None:
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path.strip())
    if not match:
        return None
    return ((pod.get("metadata") or {}).get(match.group(1)) or {}).get(match.group(2))


def transfer_envs(sidecar: Mapping[str, Any], pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The env vars ``transferEnv`` copies from the pod's app containers (missing ones are skipped)."""
    by_name = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    result: list[dict[str, Any]] = []
    for transfer in sidecar.get("transferEnv") or []:
        source_name = transfer.get("sourceContainerName")
        source_from = transfer.get("sourceContainerNameFrom") or {}
        if not source_name and source_from.get("fieldRef"):
            source_name = _field_ref_value(pod, source_from["fieldRef"].get("fieldPath", ""))
        source = by_name.get(source_name)
        if source is None:
            continue
        wanted = sorted({n for n in [transfer.get("envName"), *(transfer.get("envNames") or [])] if n})
        source_env = {e.get("name"): e for e in source.get("env") or []}
        result.extend(copy.deepcopy(source_env[name]) for name in wanted if name in source_env)
    return result


def share_mounts(sidecar: dict[str, Any], app_containers: Sequence[Mapping[str, Any]]) -> None:
    """shareVolume(Device)Policy enabled: mount the app containers' volumes at the same paths."""
    taken_paths = {m.get("mountPath") for m in sidecar.get("volumeMounts") or []}
    taken_paths |= {d.get("devicePath") for d in sidecar.get("volumeDevices") or []}
    share_mounts = (sidecar.get("shareVolumePolicy") or {}).get("type") == "enabled"
    share_devices = (sidecar.get("shareVolumeDevicePolicy") or {}).get("type") == "enabled"
    for app in app_containers:
        app_env = {e.get("name"): e for e in app.get("env") or []}
        if share_mounts:
            for mount in app.get("volumeMounts") or []:
                if mount.get("mountPath") in taken_paths:
                    continue
                taken_paths.add(mount.get("mountPath"))
                sidecar.setdefault("volumeMounts", []).append(copy.deepcopy(mount))
                # A subPathExpr mount resolves $(VAR) from the container's env: bring those vars along.
                for var in _SUBPATH_VAR_RE.findall(mount.get("subPathExpr") or ""):
                    if var in app_env:
                        add_env(sidecar, app_env[var])
        if share_devices:
            for device in app.get("volumeDevices") or []:
                if device.get("devicePath") in taken_paths:
                    continue
                taken_paths.add(device.get("devicePath"))
                sidecar.setdefault("volumeDevices", []).append(copy.deepcopy(device))
