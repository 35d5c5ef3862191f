"""`rollbook demo` as a user runs it on a fresh machine (embedded Postgres and NATS, nothing configured), and
its loud failure when a step does not finish."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from kubernetes_asyncio import client

from services.cli.demo import DemoFailed, Workload, follow, ready_at
from services.infra.settings import Settings
from services.infra.supervisor import Supervisor
from services.simcluster import SimCluster
from tests.e2e.cluster import Cluster, seed_cloneset

REPO_ROOT = Path(__file__).resolve().parents[2]


def processes_using(data_dir: Path) -> list[str]:
    """Processes whose command line or environment names ``data_dir`` (embedded servers, services)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            text = (
                " ".join(process.info["cmdline"] or [])
                + " "
                + " ".join(f"{k}={v}" for k, v in process.environ().items())
            )
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if str(data_dir) in text:
            found.append(f"{process.info['pid']}: {' '.join(process.info['cmdline'] or [])}")
    return found


@pytest.mark.slow
@pytest.mark.servers  # the whole demo: embedded Postgres, NATS, simcluster and the services
def test_demo_runs_everything_and_leaves_nothing_running(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    env.update(ROLLBOOK_DATA_DIR=str(tmp_path / "data"), COLUMNS="160")
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "demo"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for expected in (
        "starting embedded Postgres and NATS",
        "10 pods and 5 PVCs created and ready",
        "sample scaled to 6",
        "partition 2 reached",
        "rollouts complete",
        "maxUnavailable during every rollout: never exceeded",
        "every requested pod action has exactly one terminal event: yes",
        "clean exit: watcher 0, planner 0, executor 0, auditor 0",
        "Postgres and NATS stopped",
    ):
        assert expected in output, f"missing {expected!r} in:\n{output}"
    # The audit summary lists every pod of both CloneSets as updated in place (6 + 5).
    assert output.count("succeeded") >= 2 + 11, output
    assert processes_using(tmp_path / "data") == []
    # The last rollout's receipt, written by the demo, verifies from the file alone: every server is
    # stopped and the checking command gets a data dir that holds nothing.
    assert "verified offline" in output, output
    found = re.search(r"audit verify-receipt (\S+) --public-key (\S+)", output)
    assert found is not None, output
    receipt, key = Path(found[1]), found[2]
    assert receipt == tmp_path / "data" / "demo" / "receipt.json"
    nowhere = {**env, "ROLLBOOK_DATA_DIR": str(tmp_path / "empty")}
    checked = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "audit", "verify-receipt", str(receipt),
         "--public-key", key],
        cwd=REPO_ROOT, env=nowhere, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0 and checked.stdout.startswith("OK: "), checked.stdout + checked.stderr
    by_script = subprocess.run(
        [sys.executable, "-I", str(REPO_ROOT / "docs" / "verify_receipt.py"), str(receipt), key],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert by_script.returncode == 0, by_script.stdout + by_script.stderr
    forged = bytearray(receipt.read_bytes())
    forged[forged.index(b'"payload"') + 12] ^= 1  # one byte of the first event's payload
    (tmp_path / "forged.json").write_bytes(bytes(forged))
    refused = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "audit", "verify-receipt", str(tmp_path / "forged.json"),
         "--public-key", key],
        cwd=REPO_ROOT, env=nowhere, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and "receipt refused" in refused.stdout + refused.stderr


async def test_a_step_that_does_not_finish_fails_with_its_name_and_last_status(
    simcluster: SimCluster, k8s_client: client.ApiClient, tmp_path: Path
) -> None:
    # No services run: the CloneSet is accepted by the API server but nobody creates its pods.
    await Cluster(k8s_client).create_cloneset(seed_cloneset("cloneset-sample.yaml"))
    nobody = Supervisor(Settings(), tmp_path)
    with pytest.raises(DemoFailed, match=r"create: not done after 1s \(default/sample: status"):
        targets = {Workload("default", "sample"): ready_at(5)}
        await follow(client.CustomObjectsApi(k8s_client), nobody, "create", targets, timeout=1.0)
