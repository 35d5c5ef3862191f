"""Fixtures of the simcluster tests that use a client no one here wrote: Debian's kubectl
(kubernetes-client package), fetched with `apt-get download kubernetes-client` and unpacked with
`dpkg -x` into the pytest cache (a folder these tests own; with the cache plugin disabled, `-p
no:cacheprovider`, a temporary folder of the session instead); any system kubectl is left alone. Without
apt or a reachable Debian mirror those tests are skipped with the reason."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

from services.simcluster import SimCluster

from .helpers import Kubectl


@pytest.fixture(scope="session")
def kubectl_binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache: pytest.Cache | None = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    if cache is None:
        folder = tmp_path_factory.mktemp("simcluster-kubectl")
    else:
        folder = Path(cache.mkdir("simcluster-kubectl"))
    # pytest-xdist workers share the cache: one fetches and unpacks, the others wait for it and use it.
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fetched_kubectl(folder)


def _fetched_kubectl(folder: Path) -> Path:
    binary = folder / "root" / "usr" / "bin" / "kubectl"
    if binary.exists():
        return binary
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        pytest.skip("apt-get/dpkg not available to fetch Debian's kubernetes-client")
    try:
        subprocess.run(
            ["apt-get", "download", "kubernetes-client"],
            cwd=folder,
            check=True,
            capture_output=True,
            timeout=180,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"could not download Debian's kubernetes-client: {exc}")
    package = next(folder.glob("kubernetes-client_*.deb"))
    subprocess.run(["dpkg", "-x", str(package), str(folder / "root")], check=True, timeout=120)
    if not binary.exists():
        pytest.skip("the kubernetes-client package holds no usr/bin/kubectl")
    return binary


@pytest.fixture
def kubectl(kubectl_binary: Path, simcluster: SimCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_binary, simcluster, tmp_path / "kubectl-cache")
