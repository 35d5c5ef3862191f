"""`rollbook up` runs the four services, says once that they are ready and where everything is (service
logs go to files, its own output stays quiet), and SIGTERM stops them all cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import aiohttp
import pytest

from services.infra.runtime import PORT_OFFSETS
from services.infra.settings import Settings
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset
from tests.plugins.stack import REPO_ROOT, free_port, settings_env, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


async def test_up_runs_all_services_and_stops_on_sigterm(
    stack_settings: Settings, cluster: Cluster, tmp_path: Any
) -> None:
    base = free_port()
    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        **settings_env(stack_settings),
        "ROLLBOOK_HTTP_PORT": str(base),
        "ROLLBOOK_DATA_DIR": str(data_dir),
    }
    log = (tmp_path / "up.log").open("wb")
    up = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "up", cwd=REPO_ROOT, env=env, stdout=log, stderr=log
    )
    try:

        async def all_ready() -> bool:
            async with aiohttp.ClientSession() as session:
                for offset in PORT_OFFSETS.values():
                    try:
                        async with session.get(f"http://127.0.0.1:{base + offset}/readyz") as response:
                            if response.status != 200:
                                return False
                    except aiohttp.ClientError:
                        return False
            return True

        await wait_for(all_ready, within=120, what="the four services ready under `rollbook up`")

        async def summary() -> str | None:
            text = (tmp_path / "up.log").read_text()
            return text if "  stop " in text else None

        said = await wait_for(summary, within=120, what="the ready summary of `rollbook up`")
        logs = data_dir / "logs"
        assert said.count("rollbook up: ready in ") == 1, said
        for service, offset in PORT_OFFSETS.items():
            assert f"  {service:<10}  http://127.0.0.1:{base + offset}  " in said, said
            assert '"http_listening"' in (logs / f"{service}.log").read_text()
        assert f"  postgres    {stack_settings.database_url}\n" in said
        assert f"  kubeconfig  {stack_settings.kubeconfig}\n" in said
        assert f"  logs        {logs}/<service>.log\n" in said
        assert not [line for line in said.splitlines() if line.startswith("{")], said  # no service log here
        await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", replicas=2))

        async def two_ready() -> bool:
            pods = await cluster.pods("sample")
            return len(pods) == 2 and all(is_ready(p) for p in pods.values())

        await wait_for(two_ready, within=40, what="2 ready pods")
        up.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(up.wait(), 30) == 0
        assert not await all_ready()
    finally:
        if up.returncode is None:
            up.kill()
            await up.wait()
        log.close()
