"""docs/install.md's commands, as written, against simcluster with Debian's kubectl: the Secrets, the
overlay made in a folder of a clone, `kubectl apply -k` of it, the migration Job waited for, the five
Deployments' rollout status, then both uninstall recipes, each command exiting 0.

The page's shell blocks are run by bash with `kubectl` bound to this cluster's kubeconfig, from a copy
of the clone's deploy/ (so the test writes nothing into the repository). Two things differ from the page:
kubectl 1.20's kustomize cannot apply an `images:` entry over the CRDs (the page says so), so that entry
is dropped from the overlay; and cert-manager's CRDs come from the test fixture (nothing here runs
cert-manager). The services run as simulated containers: the first rollout (step 5) needs the rollbook
image run for real and is not part of this test."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from services.simcluster import SimCluster, SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import Kubectl, wait_until
from .rollbook_webhook import rollbook_webhook

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "install.md"
FIXTURE = ROOT / "tests" / "fixtures" / "install"
SEED = ROOT / "tests" / "fixtures" / "seed"


def shell_blocks(section: str) -> list[str]:
    """The ```sh blocks of the page's part that starts with ``section``, up to the next heading."""
    text = PAGE.read_text()
    start = text.index(section)
    following = [m.start() for m in re.finditer(r"^\*\*\d\. |^## ", text[start + len(section) :], re.M)]
    end = start + len(section) + (following[0] if following else len(text))
    return re.findall(r"```sh\n(.*?)```", text[start:end], re.S)


async def run(script: str, sim: SimCluster, kubectl_binary: Path, cwd: Path, cache: Path) -> str:
    binding = f'"{kubectl_binary}" --kubeconfig "{sim.kubeconfig_path}" --cache-dir "{cache}"'
    prelude = f'kubectl() {{ {binding} "$@"; }}\n'
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        prelude + script,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"{script}\nexited {process.returncode}:\n{out.decode()}"
    return out.decode()


async def test_install_page_applies_waits_and_uninstalls(
    make_simcluster: MakeSimCluster, kubectl_binary: Path, tmp_path: Path
) -> None:
    sim = await make_simcluster(SimConfig(disabled_resources=("clonesets", "sidecarsets")))
    clone = tmp_path / "rollbook"
    clone.mkdir()
    shutil.copytree(ROOT / "deploy", clone / "deploy")
    shutil.copytree(SEED, clone / "tests" / "fixtures" / "seed")
    cache = tmp_path / "kubectl-cache"
    kubectl = Kubectl(kubectl_binary, sim, cache)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(rollbook_webhook(sim, tmp_path / "tls"))
        await kubectl("apply", "-f", str(FIXTURE / "cert-manager-crds.yaml"))
        await kubectl(
            "wait", "--for=condition=Established", "crd/certificates.cert-manager.io", "--timeout=10s"
        )

        # The Secrets of the logins, NATS identities, audit signing key and redaction key, as step 1 makes
        # them (the SQL block is the database administrator's, not run here).
        secrets = shell_blocks("**1. Database logins and connection URLs.**")
        assert len(secrets) == 4 and all("create secret generic" in block for block in secrets), secrets
        for block in secrets:
            await run(block, sim, kubectl_binary, clone, cache)
        (overlay,) = shell_blocks("**3. Your overlay**")
        await run(overlay, sim, kubectl_binary, clone, cache)
        kustomization = clone / "my-rollbook" / "kustomization.yaml"
        text = kustomization.read_text()
        assert "bases: [../deploy/standalone]" in text
        kustomization.write_text(re.sub(r"images:\n(  - .*\n)+", "", text))  # kubectl 1.20: see above

        # Step 4 from elsewhere than the clone, as the page allows, with the overlay's path.
        (apply_and_wait,) = shell_blocks("**4. Apply, then wait")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        out = await run(
            apply_and_wait.replace("-k my-rollbook", f"-k {clone / 'my-rollbook'}"),
            sim,
            kubectl_binary,
            elsewhere,
            cache,
        )
        assert "job.batch/rollbook-migrate-0.1.0 condition met" in out
        for service in ("watcher", "planner", "executor", "auditor", "webhook"):
            assert f'deployment "rollbook-{service}" successfully rolled out' in out

        async with await api_client_for(sim) as api:
            apps = client.AppsV1Api(api)
            deployments = (await apps.list_namespaced_deployment("rollbook-system")).items
            assert sorted((d.metadata.name, d.status.available_replicas) for d in deployments) == [
                (f"rollbook-{s}", 2) for s in ("auditor", "executor", "planner", "watcher", "webhook")
            ]
            core = client.CoreV1Api(api)
            pdbs = (
                await client.PolicyV1Api(api).list_namespaced_pod_disruption_budget("rollbook-system")
            ).items
            assert len(pdbs) == 5 and all(p.status.disruptions_allowed == 1 for p in pdbs)
            slices = (
                await client.DiscoveryV1Api(api).list_namespaced_endpoint_slice("rollbook-system")
            ).items
            webhook = [
                s for s in slices if s.metadata.labels["kubernetes.io/service-name"] == "rollbook-webhook"
            ]
            assert len(webhook) == 1 and len(webhook[0].endpoints) == 2

            # A CloneSet to remove with everything else (the standalone CRDs are installed).
            await kubectl("apply", "-f", str(SEED / "cloneset-sample.yaml"))
            keep, remove_all = shell_blocks("## Uninstall")
            await run(keep, sim, kubectl_binary, clone, cache)

            async def namespaces() -> set[str]:
                return {n.metadata.name for n in (await core.list_namespace()).items}

            await wait_until(namespaces, lambda names: "rollbook-system" not in names, within=20)
            custom = client.CustomObjectsApi(api)
            kept = await custom.list_namespaced_custom_object(
                "apps.kruise.io", "v1beta1", "default", "clonesets"
            )
            assert [c["metadata"]["name"] for c in kept["items"]] == ["sample"]

            # The full removal, in the page's order, after rollbook itself is gone already: still exit 0.
            await run(remove_all, sim, kubectl_binary, clone, cache)
            crds = {
                c.metadata.name
                for c in (await client.ApiextensionsV1Api(api).list_custom_resource_definition()).items
            }
            assert "clonesets.apps.kruise.io" not in crds and "sidecarsets.apps.kruise.io" not in crds
