"""`rollbook apply`, `rollbook status` and `rollbook history` as a user runs them: a subprocess talking HTTP
to a simcluster and SQL to Postgres."""

from __future__ import annotations

import asyncio
import copy
import os
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client

from services.infra.store import EventStore
from services.simcluster import SimCluster, SimConfig
from tests.e2e.cluster import Cluster
from tests.infra.audit_helpers import Trail
from tests.plugins.simcluster import MakeSimCluster, api_client_for

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = REPO_ROOT / "tests" / "fixtures" / "seed"


async def rollbook(*args: str, **env: str) -> tuple[int, str]:
    """Run the CLI without blocking the loop the simcluster serves on; returns (exit code, output)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(COLUMNS="200", **env)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args,
        cwd=REPO_ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    return int(process.returncode or 0), output.decode()


async def test_apply_creates_then_updates_the_seed_manifests(simcluster: SimCluster, tmp_path: Path) -> None:
    kubeconfig = str(simcluster.kubeconfig_path)
    namespace = tmp_path / "ops.yaml"
    namespace.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ops\n")
    code, output = await rollbook(
        "apply", "-f", str(namespace), "-f", str(SEED / "cloneset-sample-data.yaml"),
        "-f", str(SEED / "cloneset-sample.yaml"), "-f", str(SEED / "sidecarset-test-sidecarset.yaml"),
        ROLLBOOK_KUBECONFIG=kubeconfig,
    )  # fmt: skip
    assert code == 0, output
    assert output.splitlines() == [
        "Namespace ops created",
        "CloneSet ops/sample-data created",
        "CloneSet default/sample created",
        "SidecarSet test-sidecarset created",  # cluster-scoped
    ]
    changed = tmp_path / "sample.yaml"
    changed.write_text((SEED / "cloneset-sample.yaml").read_text().replace("replicas: 5", "replicas: 7"))
    code, output = await rollbook("apply", "-f", str(changed), ROLLBOOK_KUBECONFIG=kubeconfig)
    assert (code, output.strip()) == (0, "CloneSet default/sample configured")
    async with await api_client_for(simcluster) as api:
        sample = await Cluster(api).cloneset("sample")
    assert sample["spec"]["replicas"] == 7
    assert sample["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:alpine"


async def test_apply_refuses_bad_input_with_a_clear_message(simcluster: SimCluster, tmp_path: Path) -> None:
    kubeconfig = str(simcluster.kubeconfig_path)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n")
    code, output = await rollbook("apply", "-f", str(unknown), ROLLBOOK_KUBECONFIG=kubeconfig)
    assert code == 1 and "the cluster does not serve Gadget in example.com/v1" in output
    nameless = tmp_path / "nameless.yaml"
    nameless.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {}\n")
    code, output = await rollbook("apply", "-f", str(nameless), ROLLBOOK_KUBECONFIG=kubeconfig)
    assert code == 1 and "document 1: missing metadata.name" in output
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    code, output = await rollbook("apply", "-f", str(broken), ROLLBOOK_KUBECONFIG=kubeconfig)
    assert code == 1 and "not valid YAML" in output
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: CloneSet\nmetadata:\n  name: bad\nspec:\n  replicas: -1\n"
    )
    code, output = await rollbook("apply", "-f", str(invalid), ROLLBOOK_KUBECONFIG=kubeconfig)
    # refused before it is sent, by the validation the webhook and the planner share
    assert code == 1 and output.startswith("rollbook: CloneSet default/bad is invalid: spec."), output


async def test_apply_refuses_what_the_planner_would_reject_and_changes_nothing(
    simcluster: SimCluster, tmp_path: Path
) -> None:
    """The issue's cases: `maxUnavailable: 0` with `maxSurge: 0`, or `partition: "abc%"`, printed
    "configured" and exited 0; now one `rollbook apply:` line with OpenKruise's message, exit 1."""
    kubeconfig = str(simcluster.kubeconfig_path)
    seed = yaml.safe_load((SEED / "cloneset-sample.yaml").read_text())
    code, output = await rollbook(
        "apply", "-f", str(SEED / "cloneset-sample.yaml"), ROLLBOOK_KUBECONFIG=kubeconfig
    )
    assert code == 0, output
    cases = [
        ({"maxUnavailable": 0, "maxSurge": 0}, "spec.updateStrategy.maxUnavailable: Invalid value:"),
        ({"partition": "abc%"}, 'spec.updateStrategy.partition: Invalid value: "abc%": failed'),
    ]
    for strategy, message in cases:
        changed = copy.deepcopy(seed)
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:mainline"
        changed["spec"]["updateStrategy"] = strategy
        (tmp_path / "changed.yaml").write_text(yaml.safe_dump(changed))
        code, output = await rollbook(
            "apply", "-f", str(tmp_path / "changed.yaml"), ROLLBOOK_KUBECONFIG=kubeconfig
        )
        assert code == 1, output
        assert len(output.strip().splitlines()) == 1 and message in output, output
    async with await api_client_for(simcluster) as api:
        sample = await Cluster(api).cloneset("sample")
    assert sample["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:alpine"  # nothing applied


async def test_history_prints_rollouts_and_pod_actions_from_sql(
    event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store)
    await trail.three_ready_pods()
    await trail.start_rollout(10)
    for index in range(3):
        await trail.update_in_place(f"web-{index}", 10 + 5 * index)
    await trail.complete(30)
    code, output = await rollbook("history", f"{trail.namespace}/web", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 0, output
    assert "111 → 222" in output and "InPlaceIfPossible" in output and "20.00s" in output
    assert [line.split("│")[2].strip() for line in output.splitlines() if "updateInPlace" in line] == [
        "web-0", "web-1", "web-2",
    ]  # fmt: skip
    assert "3.20s" in output  # markNotReady requested → markReady done, per pod

    code, output = await rollbook("history", f"{trail.namespace}/nothing", ROLLBOOK_DATABASE_URL=database_url)
    assert code == 1 and "no rollouts or pod actions recorded" in output


async def test_status_shows_counts_and_the_latest_rollout(
    simcluster: SimCluster, event_store: EventStore, database_url: str
) -> None:
    trail = Trail(event_store, name="sample")
    await trail.start_rollout(10)  # in progress: no RolloutCompleted
    async with await api_client_for(simcluster) as api:
        cluster = Cluster(api, namespace=trail.namespace)
        await cluster.core.create_namespace({"metadata": {"name": trail.namespace}})
        await cluster.create_cloneset(
            {
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "CloneSet",
                "metadata": {"name": "sample"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "s"}},
                    "template": {
                        "metadata": {"labels": {"app": "s"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                    },
                },
            }
        )
    code, output = await rollbook(
        "status", ROLLBOOK_KUBECONFIG=str(simcluster.kubeconfig_path), ROLLBOOK_DATABASE_URL=database_url
    )
    assert code == 0, output
    row = next(line for line in output.splitlines() if f"{trail.namespace}/sample" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[1] == "0/2"  # no controller ran: the status counts nothing yet
    assert trail.rollout in cells[5] and cells[6] == "in progress, partition 0"


async def test_status_names_clonesets_the_api_server_cannot_give(
    make_simcluster: MakeSimCluster, database_url: str
) -> None:
    """rollbook's CloneSet CRD stores v1beta1; `rollbook status` reads v1alpha1, through the conversion
    webhook, whose Service does not exist: the one line says which resource and why."""
    import yaml

    sim = await make_simcluster(SimConfig())
    async with await api_client_for(sim) as api:
        crd = yaml.safe_load((REPO_ROOT / "deploy" / "base" / "crds" / "clonesets.yaml").read_text())
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        body = yaml.safe_load((SEED / "cloneset-sample.yaml").read_text())
        body["apiVersion"] = "apps.kruise.io/v1beta1"
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "apps.kruise.io", "v1beta1", "default", "clonesets", body
        )
    code, output = await rollbook(
        "status", ROLLBOOK_KUBECONFIG=str(sim.kubeconfig_path), ROLLBOOK_DATABASE_URL=database_url
    )
    assert code == 1 and "Traceback" not in output
    assert output.strip().startswith(
        "rollbook: the API server cannot convert CloneSets to apps.kruise.io/v1alpha1: their conversion"
        " webhook cannot be reached (the API server said: "
    ), output
    assert 'service "rollbook-webhook" not found' in output


async def test_status_says_when_clonesets_are_not_served(
    make_simcluster: MakeSimCluster, database_url: str
) -> None:
    sim = await make_simcluster(SimConfig(disabled_resources=("clonesets",)))
    code, output = await rollbook(
        "status", ROLLBOOK_KUBECONFIG=str(sim.kubeconfig_path), ROLLBOOK_DATABASE_URL=database_url
    )
    assert code == 1
    assert output.strip().startswith(
        "rollbook: the cluster does not serve CloneSets (apps.kruise.io/v1alpha1):"
        " is the CloneSet CRD installed?"
    ), output
