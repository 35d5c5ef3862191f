"""`rollbook simcluster` as a user runs it: a process that writes a kubeconfig the standard loader reads."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_rollbook_simcluster_serves_the_kubeconfig_it_writes(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "simcluster",
        "--instant",
        "--nodes",
        "2",
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        banner = await asyncio.wait_for(process.stdout.readline(), 30)
        assert b"simcluster listening on http://127.0.0.1:" in banner
        api_client = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api_client:
            core = client.CoreV1Api(api_client)
            nodes = await core.list_node()
            assert [n.metadata.name for n in nodes.items] == ["sim-node-0", "sim-node-1"]
            namespaces = {n.metadata.name for n in (await core.list_namespace()).items}
            assert "default" in namespaces
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0 and b"simcluster stopped" in out
