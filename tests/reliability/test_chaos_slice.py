"""A slice of the fault matrix (bench/chaos.py): one trial per fault at small, fast settings. Every fault
must leave the rollout finished, nothing lost between Postgres and JetStream, no pod updated twice, no
maxUnavailable breach, and `verify` and `audit verify` clean."""

from __future__ import annotations

import asyncio
import os
import re
import sys

import pytest

from tests.plugins.stack import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.servers]  # starts its own Postgres, NATS cluster and services

ROW = re.compile(
    r"^\| (?P<fault>[a-z0-9-]+) +\| +(?P<done>\d+)/(?P<trials>\d+) +\| +(?P<restarts>\d+) \|"
    r" +(?P<lost_pg>\d+)/(?P<lost_js>\d+) +\| +(?P<dup>\d+) \| +(?P<breach>\d+) \|"
    r" +(?P<verify>\d+)/\d+ +\| +(?P<audit>\d+)/\d+ +\| +(?P<recovery>[\d.]+|inf) \|",
    re.M,
)


async def test_every_fault_leaves_a_finished_clean_rollout() -> None:
    # A few faults per run keeps this within a couple of minutes; bench/chaos.py runs them all.
    faults = "postgres-restart,nats-node-loss,api-errors-30,oversized-object,kill-auditor"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(REPO_ROOT / "bench" / "chaos.py"), "--faults", faults, "--trials", "1",
        "--replicas", "4", "--max-unavailable", "2", "--ready", "0.1", "--fault-seconds", "1",
        "--timeout", "120", "--seed", "7",
        cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output = (await asyncio.wait_for(process.communicate(), 600))[0].decode(errors="replace")
    assert process.returncode == 0, output
    rows = {m["fault"]: m for m in ROW.finditer(output)}
    assert set(rows) == set(faults.split(",")), output
    for fault, row in rows.items():
        trials = int(row["trials"])
        assert int(row["done"]) == trials, f"{fault} did not finish:\n{output}"
        assert (row["lost_pg"], row["lost_js"]) == ("0", "0"), f"{fault} lost events:\n{output}"
        assert row["dup"] == "0" and row["breach"] == "0", f"{fault}:\n{output}"
        assert int(row["restarts"]) == 1, f"{fault}: a pod restarted more than once:\n{output}"
        assert int(row["verify"]) == int(row["audit"]) == trials, f"{fault}: verify/audit:\n{output}"
        assert row["recovery"] != "inf", f"{fault}: services never all healthy again:\n{output}"
