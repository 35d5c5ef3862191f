"""Write a kubeconfig the standard loaders (kubernetes-asyncio, kubectl) read."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path,
    server_url: str,
    context: str = "simcluster",
    namespace: str = "default",
    token: str = "simcluster",
    ca_pem: str | None = None,
) -> Path:
    """``ca_pem``: the CA an ``https`` server_url is checked against."""
    cluster: dict[str, str] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
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
