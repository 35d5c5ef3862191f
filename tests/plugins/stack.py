"""Run rollbook's services as real subprocesses against real Postgres/NATS and a simcluster over HTTP.

- `stack_settings`: Settings for one test: a fresh migrated database, its own JetStream stream and
  subject prefix, the simcluster's kubeconfig.
- `stack`: a `Stack` to start, stop (SIGTERM), kill (SIGKILL) and restart services by name; every
  process is stopped at the end, its log kept in the test's tmp_path and printed when it failed.

    await stack.start("watcher", "planner", "executor", "auditor")   # waits for /readyz of each
    await stack.start("executor", name="executor-2")
    stack.kill("planner"); await stack.start("planner")
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import nats.js.errors
import pytest
import pytest_asyncio

from services.cli.services import settings_env
from services.infra.bus import Bus
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.runtime import logged_port
from services.infra.settings import Settings
from services.simcluster import SimCluster
from tests.plugins.database import with_database
from tests.plugins.servers import ServerUrls

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServiceProcess:
    name: str
    service: str
    process: asyncio.subprocess.Process
    log_path: Path
    log_start: int  # the log file's size when the process started (restarts append to the same file)
    port: int = 0  # the OS-chosen HTTP port, read back from the "http_listening" log line

    @property
    def base_url(self) -> str:
        assert self.port, f"{self.name} has not reported its HTTP port yet"
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Stack:
    settings: Settings
    log_dir: Path
    processes: dict[str, ServiceProcess] = field(default_factory=dict)
    exited: list[ServiceProcess] = field(default_factory=list)

    async def start(self, *services: str, name: str | None = None, ready_timeout: float = 30.0) -> None:
        """Start each service and wait until its /readyz answers 200."""
        started = []
        for service in services:
            label = name or service
            if label in self.processes:
                raise RuntimeError(f"{label} is already running")
            # Port 0: the service binds an OS-chosen port and logs it (no free-port race between tests).
            env = {**os.environ, **settings_env(self.settings), "ROLLBOOK_HTTP_PORT": "0"}
            log_path = self.log_dir / f"{label}.log"
            log_file = log_path.open("ab")
            log_start = log_file.tell()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "services.cli.main",
                service,
                cwd=REPO_ROOT,
                env=env,
                stdout=log_file,
                stderr=log_file,
            )
            log_file.close()
            proc = ServiceProcess(label, service, process, log_path, log_start)
            self.processes[label] = proc
            started.append(proc)
        for proc in started:
            await self._wait_ready(proc, ready_timeout)

    async def _wait_ready(self, proc: ServiceProcess, timeout: float) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if proc.process.returncode is not None:
                    raise AssertionError(
                        f"{proc.name} exited with {proc.process.returncode}:\n{self.tail(proc.name)}"
                    )
                if not proc.port:
                    proc.port = logged_port(proc.log_path, proc.log_start) or 0
                    if not proc.port:
                        await asyncio.sleep(0.05)
                        continue
                try:
                    async with session.get(proc.base_url + "/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        unknown_port = "" if proc.port else " (it never logged http_listening: is the log level above INFO?)"
        raise AssertionError(f"{proc.name} not ready after {timeout}s{unknown_port}:\n{self.tail(proc.name)}")

    async def stop(self, name: str, timeout: float = 20.0) -> int:  # noqa: ASYNC109
        """SIGTERM, then wait for a clean exit; returns the exit code."""
        proc = self.processes.pop(name)
        self.exited.append(proc)
        if proc.process.returncode is None:
            proc.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.process.wait(), timeout)
            except TimeoutError:
                proc.process.kill()
                await proc.process.wait()
                raise AssertionError(f"{name} did not stop within {timeout}s of SIGTERM") from None
        return int(proc.process.returncode or 0)

    async def kill(self, name: str) -> None:
        """SIGKILL: no cleanup at all, as in a crash."""
        proc = self.processes.pop(name)
        self.exited.append(proc)
        if proc.process.returncode is None:
            proc.process.kill()
        await proc.process.wait()

    async def stop_all(self) -> None:
        """SIGTERM every running service at once and wait for all of them."""
        await asyncio.gather(*(self.stop(name) for name in list(self.processes)), return_exceptions=True)

    async def get_json(self, name: str, path: str) -> Any:
        async with aiohttp.ClientSession() as session:
            async with session.get(self.processes[name].base_url + path) as response:
                response.raise_for_status()
                return await response.json()

    async def get_text(self, name: str, path: str) -> str:
        async with aiohttp.ClientSession() as session:
            async with session.get(self.processes[name].base_url + path) as response:
                response.raise_for_status()
                return await response.text()

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def dead(self) -> list[str]:
        """Services that exited without being asked to."""
        return [n for n, p in self.processes.items() if p.process.returncode is not None]


async def wait_for(
    check: Callable[[], Awaitable[Any]],
    *,
    within: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with the last value after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last value: {last!r}")


@asynccontextmanager
async def e2e_database(server_url: str) -> AsyncIterator[str]:
    """A fresh migrated database, dropped afterwards (the drop is retried: other test sessions on the same
    server may terminate backends, including ours, while they test lost connections)."""
    name = f"rollbook_e2e_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(asyncpg_url(server_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(server_url, name)
    try:
        await upgrade_async(url)
        yield url
    finally:
        if os.environ.get("ROLLBOOK_TEST_KEEP_DATABASES"):
            # Debugging a failed end-to-end run: keep its event store to query afterwards.
            print(f"kept test database {name}", file=sys.stderr)
        else:
            await _drop_database(server_url, name)


async def _drop_database(server_url: str, name: str) -> None:
    for attempt in range(3):
        try:
            admin = await asyncpg.connect(asyncpg_url(server_url))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()
            break
        except (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError):
            if attempt == 2:
                raise
            await asyncio.sleep(0.5)


@asynccontextmanager
async def settings_for_stack(database_url: str, nats_url: str, kubeconfig: str) -> AsyncIterator[Settings]:
    """Settings for one test's services on a migrated database: their own JetStream stream and subject
    prefix (deleted afterwards), short leader Leases."""
    suffix = uuid.uuid4().hex[:10]
    settings = Settings(
        database_url=database_url,
        nats_url=nats_url,
        kubeconfig=kubeconfig,
        stream_name=f"RBE2E_{suffix}",
        subject_prefix=f"rbe2e{suffix}",
        max_deliver=5,
        log_level="INFO",
        # Leader election on, as by default, with short Leases: a planner or watcher restarted after a
        # SIGKILL waits for its predecessor's Lease to expire (4 s here, 15 s by default).
        leader_lease_duration=4,
        leader_renew_deadline=3.0,
        leader_retry_period=1.0,
    )
    try:
        yield settings
    finally:
        bus = await Bus.connect(settings, name="rollbook-e2e-cleanup")
        for stream in (settings.stream_name, f"{settings.stream_name}_CHECKPOINTS"):
            try:
                await bus.js.delete_stream(stream)
            except nats.js.errors.NotFoundError:
                pass
        await bus.close()


@pytest_asyncio.fixture(loop_scope="session")
async def stack_settings(server_urls: ServerUrls, simcluster: SimCluster) -> AsyncIterator[Settings]:
    async with e2e_database(server_urls.database_url) as database_url:
        async with settings_for_stack(
            database_url, server_urls.nats_url, str(simcluster.kubeconfig_path)
        ) as settings:
            yield settings


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    stack_settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    running = Stack(stack_settings, tmp_path)
    try:
        yield running
    finally:
        await running.stop_all()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for proc in [*running.exited]:
                sys.stderr.write(f"\n----- {proc.name} log (tail) -----\n{running.tail(proc.name)}\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
