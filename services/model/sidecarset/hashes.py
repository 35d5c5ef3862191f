"""SidecarSet hashes (``kruise.io/sidecarset-hash`` and the without-image hash), which decide upgrades.

Only containers count, and the init containers when one of them is a native sidecar (``restartPolicy:
Always``), as OpenKruise's ``encodeSidecarSet``; volumes, selector, strategies do not.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

_SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery rand.SafeEncodeString's alphabet


def _safe_encode(text: str) -> str:
    return "".join(_SAFE_ALPHANUMS[ord(ch) % len(_SAFE_ALPHANUMS)] for ch in text)


def _hash_input(spec: Mapping[str, Any], *, without_image: bool) -> dict[str, Any]:
    containers = copy.deepcopy(list(spec.get("containers") or []))
    init_containers = copy.deepcopy(list(spec.get("initContainers") or []))
    if without_image:
        for container in containers + init_containers:
            container["image"] = ""
    payload: dict[str, Any] = {"containers": containers}
    # Native sidecars (init containers with restartPolicy Always) are upgradable, so they count; with one,
    # every init container does (OpenKruise's encodeSidecarSet), which keeps recorded hashes as they are.
    if any(c.get("restartPolicy") == "Always" for c in init_containers):
        payload["initContainers"] = init_containers
    return payload


def _hash(payload: Mapping[str, Any]) -> str:
    # Canonical JSON (sorted keys, compact). OpenKruise hashes Go's struct-order JSON, so the values
    # differ from a Kruise cluster's, but equal specs give equal hashes and any change a new one.
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _safe_encode(hashlib.sha256(canonical.encode()).hexdigest())


def sidecarset_hash(spec: Mapping[str, Any]) -> str:
    """``kruise.io/sidecarset-hash`` of a defaulted spec.

    Only containers count (and native-sidecar init containers); volumes, selector, strategies do not.
    """
    return _hash(_hash_input(spec, without_image=False))


def sidecarset_hash_without_image(spec: Mapping[str, Any]) -> str:
    """The same with every image blanked: equal values mean only images differ (in-place upgradable)."""
    return _hash(_hash_input(spec, without_image=True))
