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


def _first_env(container: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((e for e in container.get("env") or [] if e.get("name") == name), None)


def share_mounts(sidecar: dict[str, Any], app_containers: Sequence[Mapping[str, Any]]) -> None:
    """shareVolumePolicy / shareVolumeDevicePolicy enabled: the app containers' volumeMounts, then their
    volumeDevices, at the same paths (OpenKruise's GetInjectedVolumeMountsAndEnvs, MergeVolumeMounts,
    GetInjectedVolumeDevices, MergeVolumeDevices).

    Mounts first: each app mount is appended unless its mountPath is one of the sidecar's mount or device
    paths or an earlier shared mount's; every shared mount's ``subPathExpr`` brings the ``$(VAR)`` env it
    needs from its container (even when the mount itself was skipped), unless the sidecar has that name.
    Devices after: each app device is appended unless its devicePath is one of the sidecar's own device
    paths, any of its (own or shared) mount paths, or an earlier shared device's.
    """
    if (sidecar.get("shareVolumePolicy") or {}).get("type") == "enabled":
        taken = {m.get("mountPath") for m in sidecar.get("volumeMounts") or []}
        taken |= {d.get("devicePath") for d in sidecar.get("volumeDevices") or []}
        for app in app_containers:
            for mount in app.get("volumeMounts") or []:
                for var in _SUBPATH_VAR_RE.findall(mount.get("subPathExpr") or ""):
                    env = _first_env(app, var)
                    if env is not None:
                        add_env(sidecar, env)
                if mount.get("mountPath") in taken:
                    continue
                taken.add(mount.get("mountPath"))
                sidecar.setdefault("volumeMounts", []).append(copy.deepcopy(mount))
    if (sidecar.get("shareVolumeDevicePolicy") or {}).get("type") == "enabled":
        taken = {d.get("devicePath") for d in sidecar.get("volumeDevices") or []}
        taken |= {m.get("mountPath") for m in sidecar.get("volumeMounts") or []}
        for app in app_containers:
            for device in app.get("volumeDevices") or []:
                if device.get("devicePath") in taken:
                    continue
                taken.add(device.get("devicePath"))
                sidecar.setdefault("volumeDevices", []).append(copy.deepcopy(device))
