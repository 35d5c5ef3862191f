"""Write a kubeconfig the standard loaders (kubernetes-asyncio, kubectl) read."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path,
    server_url: str,
    context: str = "simcluster",
    namespace: str = "default",
    token: str = "simcluster",
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
        ],
        "current-context": context,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
