"""docs/install.md's "Try it on simcluster", run as written against the built manifests: simcluster
started by the page's command with the process runtime, the Secrets, cert-manager's part, `kubectl apply
-k` of the overlay, the migration Job and the five Deployments (two replicas each, leader election and
partitioned planners across them), a CloneSet rolled in place by the rollbook running inside simcluster
and its trail verified; then a replica of each service killed and replaced, the page's full uninstall
exiting 0, and Ctrl-C stopping simcluster with every process it ran.

The page's blocks run in bash from a copy of the clone's files, with Debian's kubectl (1.20) first on
PATH and the virtualenv's bin next (the page's "activated virtualenv"). Two things differ from the page:
the `DB=` and `NATS=` lines name this test's fresh database and the test NATS, and the overlay also sets
a stream name and subject prefix of its own (as every test here does, the NATS server being shared)."""

from __future__ import annotations

import asyncio
import copy
import os
import re
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from ..plugins.database import fresh_database, password_inline
from ..plugins.servers import ServerUrls
from .helpers import wait_until

# simcluster's process runtime gives the pods of every simcluster the same loopback addresses (127.77.0.x):
# two at once would collide on their ports; scripts/test's `--dist loadscope` runs a module's tests in one
# pytest-xdist worker, one after the other.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "install.md"
SERVICES = ("watcher", "planner", "executor", "auditor", "webhook")
NAMESPACE = "rollbook-system"
POLL = 0.5  # seconds between looks at the cluster, which also serves the ten services


def section_blocks(heading: str) -> list[str]:
    """The ```sh blocks of the page's section ``heading``, up to the next ``## `` heading."""
    text = PAGE.read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return re.findall(r"```sh\n(.*?)```", text[start : end if end > 0 else len(text)], re.S)


async def bash(script: str, cwd: Path, env: dict[str, str]) -> str:
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 400)
    assert process.returncode == 0, f"{script}\nexited {process.returncode}:\n{out.decode()}"
    return out.decode()


def available(deployment: client.V1Deployment) -> bool:
    return (deployment.status.available_replicas or 0) == 2 and (deployment.status.updated_replicas or 0) == 2


def process_ids(pods: list[client.V1Pod]) -> set[int]:
    return {
        int(s.container_id.removeprefix("process://"))
        for p in pods
        for s in p.status.container_statuses or []
        if (s.container_id or "").startswith("process://")
    }


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@dataclass
class Installed:
    api: client.ApiClient
    kubeconfig: Path
    clone: Path
    env: dict[str, str]
    names: str  # the page's block naming KUBECONFIG, DB and NATS, with this test's servers
    children: set[int]  # process ids of the pods' processes seen; all must be gone at the end


@asynccontextmanager
async def installed(
    kubectl_binary: Path, server_urls: ServerUrls, tmp_path: Path, edit: Callable[[str], str] = str
) -> AsyncIterator[Installed]:
    """The page up to its step 4 (``edit`` changes the apply block), checked; at exit the page's full
    uninstall, then Ctrl-C to simcluster, which must stop every process it ran."""
    start, names, secrets, certificates, apply_and_wait, _ = section_blocks("## Try it on simcluster")
    _, uninstall = section_blocks("## Uninstall")
    clone = tmp_path / "rollbook"
    for folder in ("deploy", "migrations", "tests/fixtures/seed", "tests/fixtures/install"):
        shutil.copytree(ROOT / folder, clone / folder)
    shutil.copy(ROOT / "alembic.ini", clone / "alembic.ini")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(kubectl_binary)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    env["PATH"] = os.pathsep.join([str(tools), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["HOME"] = str(tmp_path)  # kubectl's cache, nats-auth and the like stay in the test's folder
    unique = uuid.uuid4().hex[:8]

    async with fresh_database(server_urls.database_url) as database:
        # The embedded Postgres's URL names a password file under /tmp, which a pod does not see (its /tmp
        # is its own emptyDir, on simcluster as on a cluster): the password goes in the URL, as a user's.
        names = re.sub(r"^DB=.*$", f"DB={password_inline(database)}", names, flags=re.M)
        names = re.sub(r"^NATS=.*$", f"NATS={server_urls.nats_url}", names, flags=re.M)
        literals = "literals: [ROLLBOOK_SERVICE_ACCOUNT_DIR=/var/run/secrets/kubernetes.io/serviceaccount"
        assert literals in apply_and_wait
        apply_and_wait = edit(
            apply_and_wait.replace(
                literals, f"{literals}, ROLLBOOK_STREAM_NAME=TRY{unique}, ROLLBOOK_SUBJECT_PREFIX=try{unique}"
            )
        )
        log = (tmp_path / "simcluster.log").open("wb")
        simcluster = await asyncio.create_subprocess_exec(
            "bash", "-c", "exec " + start.strip(), cwd=clone, env=env,
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        children: set[int] = set()
        try:
            kubeconfig = clone / ".rollbook" / "simcluster" / "kubeconfig"
            await wait_until(lambda: asyncio.sleep(0, kubeconfig.exists()), bool, within=60)
            await bash(names + secrets, clone, env)
            await bash(names + certificates, clone, env)
            out = await bash(names + apply_and_wait, clone, env)
            assert "job.batch/rollbook-migrate-0.1.0 condition met" in out
            for service in SERVICES:
                assert f'deployment "rollbook-{service}" successfully rolled out' in out

            async with await config.new_client_from_config(config_file=str(kubeconfig)) as api:
                apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
                deployments = (await apps.list_namespaced_deployment(NAMESPACE)).items
                assert sorted(d.metadata.name for d in deployments if available(d)) == [
                    f"rollbook-{s}" for s in sorted(SERVICES)
                ]
                pods = (await core.list_namespaced_pod(NAMESPACE)).items
                children |= process_ids(pods)
                assert len(children) >= 11  # ten service replicas and the migration, each a process

                # Leader election (one watcher holds its Lease) and partitioned planners: once both
                # replicas hold a member Lease, the partitions are shared between them (a rebalance).
                planners = {p.metadata.name for p in pods if p.metadata.name.startswith("rollbook-planner-")}
                leases_api = client.CoordinationV1Api(api)

                async def holders() -> dict[str, str]:
                    await asyncio.sleep(POLL)
                    leases = (await leases_api.list_namespaced_lease(NAMESPACE)).items
                    return {lease.metadata.name: lease.spec.holder_identity or "" for lease in leases}

                def shared(held: dict[str, str]) -> bool:
                    partitions = {h for n, h in held.items() if re.fullmatch(r"rollbook-planner-p\d+", n)}
                    return partitions == planners

                held = await wait_until(holders, shared, within=120)
                assert held.get("rollbook-watcher", "").startswith("rollbook-watcher-"), held

                yield Installed(api, kubeconfig, clone, env, names, children)
                children |= process_ids((await core.list_namespaced_pod(NAMESPACE)).items)

            await bash(f"export KUBECONFIG={kubeconfig}\n" + uninstall, clone, env)
        finally:
            if simcluster.returncode is None:
                simcluster.send_signal(signal.SIGINT)  # Ctrl-C, as the page says
                try:
                    await asyncio.wait_for(simcluster.wait(), 60)
                except TimeoutError:
                    simcluster.kill()
                    await simcluster.wait()
            log.close()
        assert simcluster.returncode == 0, (tmp_path / "simcluster.log").read_text()[-3000:]
        assert children and all(gone(pid) for pid in children)


async def test_the_page_installs_rolls_out_and_uninstalls_on_simcluster(
    kubectl_binary: Path, server_urls: ServerUrls, tmp_path: Path
) -> None:
    rollout = section_blocks("## Try it on simcluster")[-1]
    async with installed(kubectl_binary, server_urls, tmp_path) as it:
        apps, core = client.AppsV1Api(it.api), client.CoreV1Api(it.api)
        out = await bash(it.names + rollout, it.clone, it.env)
        assert "default/sample" in out and "diverge" not in out.lower(), out
        logs = await bash(
            it.names + "kubectl -n rollbook-system logs deploy/rollbook-planner", it.clone, it.env
        )
        assert "manage_selection" in logs  # what step 4 says the planner's log shows
        # The rollout is over in the trail; the CloneSet's status is the executor's next write after it.
        for _ in range(120):
            clone_set = await client.CustomObjectsApi(it.api).get_namespaced_custom_object(
                "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample"
            )
            status = clone_set["status"]
            # A status written before the image change also says 5 updated: only one that observed the
            # CloneSet's current generation speaks of the new revision.
            current = status.get("observedGeneration") == clone_set["metadata"]["generation"]
            if current and status.get("updatedReadyReplicas") == 5:
                break
            await asyncio.sleep(0.25)
        assert clone_set["status"]["updatedReadyReplicas"] == 5, clone_set["status"]
        sample = (await core.list_namespaced_pod("default")).items
        images = {p.metadata.name: p.spec.containers[0].image for p in sample}
        assert all(image == "nginx:1.27-alpine" for image in images.values()), (images, clone_set["status"])
        assert sum(s.restart_count for p in sample for s in p.status.container_statuses) == 5  # in place

        # One replica of each service killed; its Deployment replaces it.
        pods = (await core.list_namespaced_pod(NAMESPACE)).items
        killed = set()
        for service in SERVICES:
            victim = next(p for p in pods if p.metadata.name.startswith(f"rollbook-{service}-"))
            await core.delete_namespaced_pod(victim.metadata.name, NAMESPACE)
            killed.add(victim.metadata.name)

        async def replaced() -> list[client.V1Deployment]:
            await asyncio.sleep(POLL)
            current = {p.metadata.name for p in (await core.list_namespaced_pod(NAMESPACE)).items}
            if current & killed:
                return []
            return (await apps.list_namespaced_deployment(NAMESPACE)).items

        await wait_until(replaced, lambda ds: len(ds) == 5 and all(map(available, ds)), within=120)


def beside_openkruise(block: str) -> str:
    """The apply block for deploy/with-openkruise on a cluster serving OpenKruise's CloneSets: no CRD to
    patch, and the webhooks keep the overlay's objectSelectors (their CA bundle patched in, not replaced)."""
    assert "bases: [../deploy/standalone]" in block
    block = block.replace("bases: [../deploy/standalone]", "bases: [../deploy/with-openkruise]")
    block = re.sub(r"rollbook webhook-config .*\\\n.*\n", "", block)
    block = re.sub(r"kubectl patch crd .*\\\n.*\n", "", block)
    ops = ",".join(
        f'{{"op":"add","path":"/webhooks/{i}/clientConfig/caBundle","value":"$CA"}}' for i in (0, 1)
    ).replace('"', '\\"')  # inside the shell's double quotes
    block += "CA=$(base64 -w0 webhook-tls/ca.crt)\n"
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        block += f'kubectl patch {kind} rollbook-sidecarset --type=json -p "[{ops}]"\n'
    return block


async def test_beside_openkruise_unlabelled_clonesets_stay_untouched(
    kubectl_binary: Path, server_urls: ServerUrls, tmp_path: Path
) -> None:
    seed = yaml.safe_load((ROOT / "tests" / "fixtures" / "seed" / "cloneset-sample.yaml").read_text())
    async with installed(kubectl_binary, server_urls, tmp_path, beside_openkruise) as it:
        custom, core = client.CustomObjectsApi(it.api), client.CoreV1Api(it.api)
        unlabelled = await custom.create_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", seed
        )
        labelled = copy.deepcopy(seed)
        labelled["metadata"]["name"] = "managed"
        labelled["metadata"].setdefault("labels", {})["rollbook.io/manage"] = "true"
        await custom.create_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", labelled
        )

        async def managed() -> dict[str, Any]:
            await asyncio.sleep(POLL)
            obj: dict[str, Any] = await custom.get_namespaced_custom_object(
                "apps.kruise.io", "v1alpha1", "default", "clonesets", "managed"
            )
            return obj

        await wait_until(managed, lambda c: (c.get("status") or {}).get("readyReplicas") == 5, within=120)
        # By then the watcher has seen both; rollbook acted on the labelled one only.
        after = await custom.get_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample"
        )
        assert after["metadata"]["resourceVersion"] == unlabelled["metadata"]["resourceVersion"]
        pods = (await core.list_namespaced_pod("default")).items
        owners = {ref.name for p in pods for ref in p.metadata.owner_references or []}
        assert owners == {"managed"}
