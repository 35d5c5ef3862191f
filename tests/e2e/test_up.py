"""`rollbook up` runs the four services on OS-chosen ports, says once that they are ready and where
everything is (service logs go to files, its own output stays quiet), and SIGTERM stops them all cleanly
(no child left running)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import psutil
import pytest

from services.infra.runtime import logged_port
from services.infra.settings import Settings
from services.infra.supervisor import settings_env
from tests.e2e.cluster import Cluster, is_ready, seed_cloneset
from tests.plugins.stack import REPO_ROOT, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("watcher", "planner", "executor", "auditor")
# One summary row per service: "  planner     http://127.0.0.1:PORT  (/healthz /readyz /metrics)".
READY_LINE = re.compile(r"^  (\w+) +(http://127\.0\.0\.1:\d+)  \(/healthz", re.MULTILINE)


def last_logged_port(log: Path) -> int | None:
    """The HTTP port of the service's last start (a restart logs a new http_listening line)."""
    data = log.read_bytes()
    at = data.rfind(b'"http_listening"')
    return logged_port(log, data.rfind(b"\n", 0, at) + 1) if at >= 0 else None


async def test_up_runs_all_services_and_stops_on_sigterm(
    stack_settings: Settings, cluster: Cluster, tmp_path: Path
) -> None:
    env = {**os.environ, **settings_env(stack_settings), "ROLLBOOK_DATA_DIR": str(tmp_path / "data")}
    output = tmp_path / "up.out"
    with output.open("wb") as out:
        up = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "up", cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    children: list[psutil.Process] = []
    try:

        async def announced() -> dict[str, str]:
            found = {m[1]: m[2] for m in READY_LINE.finditer(output.read_text(errors="replace"))}
            return found if set(found) == set(SERVICES) else {}

        urls = await wait_for(announced, within=120, what="`rollbook up` to report the four services ready")
        logs = tmp_path / "data" / "logs"
        # The ports were chosen by the OS and read back from each service's log (its last start's: a
        # service that lost its Lease while starting on a loaded machine was started again).
        assert {s: f"http://127.0.0.1:{last_logged_port(logs / f'{s}.log')}" for s in SERVICES} == urls
        said = output.read_text(errors="replace")
        assert said.count("rollbook up: ready in ") == 1, said
        assert f"  postgres    {stack_settings.database_url}\n" in said
        assert f"  kubeconfig  {stack_settings.kubeconfig}\n" in said
        assert f"  logs        {logs}/<service>.log\n" in said
        assert not [line for line in said.splitlines() if line.startswith("{")], said  # no service log here

        async def all_ready() -> bool:
            async with aiohttp.ClientSession() as session:
                for url in urls.values():
                    try:
                        async with session.get(f"{url}/readyz") as response:
                            if response.status != 200:
                                return False
                    except aiohttp.ClientError:
                        return False
            return True

        assert await all_ready()
        await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", replicas=2))

        async def two_ready() -> bool:
            pods = await cluster.pods("sample")
            return len(pods) == 2 and all(is_ready(p) for p in pods.values())

        await wait_for(two_ready, within=40, what="2 ready pods")
        children = psutil.Process(up.pid).children()
        assert children
        up.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(up.wait(), 30) == 0
        assert not await all_ready()
        assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        if up.returncode is None:
            up.kill()
            await up.wait()
        for child in children:  # only if the test failed before `up` stopped them
            if child.is_running():
                child.kill()


async def test_services_do_not_outlive_a_killed_up(stack_settings: Settings, tmp_path: Path) -> None:
    # SIGKILL leaves `up` no chance to clean up: the children's parent-death signal stops them (Linux).
    env = {**os.environ, **settings_env(stack_settings), "ROLLBOOK_DATA_DIR": str(tmp_path / "data")}
    output = tmp_path / "up.out"
    with output.open("wb") as out:
        up = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "up", cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    children: list[psutil.Process] = []
    try:

        async def announced() -> bool:
            return len(READY_LINE.findall(output.read_text(errors="replace"))) == len(SERVICES)

        await wait_for(announced, within=120, what="`rollbook up` to report the four services ready")
        children = psutil.Process(up.pid).children()
        assert children
        up.kill()
        await up.wait()
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], f"still running after `up` was killed: {[p.pid for p in alive]}"
    finally:
        if up.returncode is None:
            up.kill()
            await up.wait()
        for child in children:
            if child.is_running():
                child.kill()
