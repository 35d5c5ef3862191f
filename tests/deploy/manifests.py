"""deploy/ as `kubectl apply -k` sees it: every overlay rendered by `kubectl kustomize`."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("standalone", "with-openkruise", "monitoring", "namespaced-executor")
NAMESPACE = "rollbook-system"
SERVICES = ("watcher", "planner", "executor", "auditor", "webhook")

Manifest = dict[str, Any]


def kubectl() -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        if os.environ.get("ROLLBOOK_CI"):
            pytest.fail("kubectl is missing in CI: .ci/run installs Debian's kubernetes-client package")
        pytest.skip("kubectl is not installed (Debian's kubernetes-client package provides it)")
    return binary


@functools.cache
def _render(overlay: str, binary: str) -> tuple[Manifest, ...]:
    result = subprocess.run(
        [binary, "kustomize", str(DEPLOY / overlay)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize deploy/{overlay} failed:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(overlay: str) -> list[Manifest]:
    """The overlay's objects, a fresh copy for each caller (tests may change them)."""
    return copy.deepcopy(list(_render(overlay, kubectl())))


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    [found] = [m for m in of_kind(manifests, kind) if m["metadata"]["name"] == name]
    return found
