"""Run rollbook's services as real subprocesses against real Postgres/NATS and a simcluster over HTTP.

- `stack_settings`: Settings for one test: a fresh migrated database, its own JetStream stream and
  subject prefix, the simcluster's kubeconfig.
- `stack`: a `Stack` (rollbook's supervisor, services/infra/supervisor.py) to start, stop (SIGTERM), kill
  (SIGKILL) and restart services by name; every process is stopped at the end, its log kept in the
  test's tmp_path and printed when it failed.
- `shared_stack`: one stack for a whole test module whose tests need no fresh one (they stop, kill and
  restart nothing, and each works in a namespace of its own: `module_simcluster`, `namespace`); its
  services are started by the first test that asks (`Stack.ensure`) and stopped after the module's last.
  (`scripts/test` runs a module's tests in one pytest-xdist worker: `--dist loadscope`.)

    await stack.start("watcher", "planner", "executor", "auditor")   # waits for /readyz of each
    await stack.start("executor", name="executor-2")
    stack.kill("planner"); await stack.start("planner")
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import nats.js.errors
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from services.infra.api_auth import ensure_token, token_path
from services.infra.bus import Bus
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.db_roles import DUTIES, role_name
from services.infra.settings import Settings
from services.infra.supervisor import ServiceFailed, Supervisor
from services.simcluster import SimCluster, SimConfig
from tests.plugins.database import with_database
from tests.plugins.servers import ServerUrls

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stack(Supervisor):
    """The services of one test, run by rollbook's own supervisor (services/infra/supervisor.py) with
    their logs in the test's tmp_path; plus reading their HTTP endpoints."""

    async def start(
        self,
        *services: str,
        name: str | None = None,
        ready_timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start each service and wait until its /readyz answers 200 (AssertionError otherwise). ``env``
        adds to (or overrides) the stack's settings for these services, e.g. a kubeconfig of their own."""
        try:
            await super().start(*services, name=name, ready_timeout=ready_timeout, env=env)
        except ServiceFailed as failure:
            raise AssertionError(str(failure)) from None

    async def ensure(self, *services: str) -> None:
        """Start those of ``services`` that are not running yet (a stack shared by a module's tests)."""
        missing = [service for service in services if service not in self.children]
        if missing:
            await self.start(*missing)

    async def stop(self, name: str, timeout: float | None = None) -> int:  # noqa: ASYNC109
        try:
            return await super().stop(name, timeout)
        except ServiceFailed as failure:
            raise AssertionError(str(failure)) from None

    def api_headers(self) -> dict[str, str]:
        """The bearer token of the stack's API token file (services/infra/api_auth.py, token mode)."""
        return {"Authorization": "Bearer " + ensure_token(token_path(self.settings))}

    async def get_json(self, name: str, path: str) -> Any:
        async with aiohttp.ClientSession(headers=self.api_headers()) as session:
            async with session.get(self.children[name].base_url + path) as response:
                response.raise_for_status()
                return await response.json()

    async def get_text(self, name: str, path: str) -> str:
        async with aiohttp.ClientSession(headers=self.api_headers()) as session:
            async with session.get(self.children[name].base_url + path) as response:
                response.raise_for_status()
                return await response.text()


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


# server URL -> a database migrated to head once in this test process, which every e2e database is cloned
# from (CREATE DATABASE ... TEMPLATE: a file copy, a fraction of running the migrations again per test).
# Nobody connects to it after migrating (Postgres refuses to copy a database in use); dropped at the end.
_templates: dict[str, str] = {}


async def _migrated_template(server_url: str) -> str:
    name = _templates.get(server_url)
    if name is None:
        name = f"rollbook_template_{uuid.uuid4().hex[:12]}"
        await _admin_execute(server_url, f'CREATE DATABASE "{name}"')
        try:
            await upgrade_async(with_database(server_url, name))
        except BaseException:
            await _drop_database(server_url, name)
            raise
        _templates[server_url] = name
    return name


async def _admin_execute(server_url: str, statement: str) -> None:
    admin = await asyncpg.connect(asyncpg_url(server_url))
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


@asynccontextmanager
async def e2e_database(server_url: str) -> AsyncIterator[str]:
    """A fresh migrated database (a copy of this process's migrated template), dropped afterwards (the drop
    is retried: other test sessions on the same server may terminate backends, including ours, while they
    test lost connections)."""
    name = f"rollbook_e2e_{uuid.uuid4().hex[:12]}"
    template = await _migrated_template(server_url)
    await _admin_execute(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = with_database(server_url, name)
    try:
        yield url
    finally:
        if os.environ.get("ROLLBOOK_TEST_KEEP_DATABASES"):
            # Debugging a failed end-to-end run: keep its event store to query afterwards.
            print(f"kept test database {name}", file=sys.stderr)
        else:
            await _drop_database(server_url, name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop this process's migrated templates, on a loop of its own (the tests' loop is not running now).
    An embedded server may already be stopped, its data (the templates with it) removed: nothing to drop."""

    async def drop_all() -> None:
        for server_url, name in list(_templates.items()):
            del _templates[server_url]
            try:
                await _drop_database(server_url, name)
                # The roles its copies shared (migration 0016 named them after the template).
                for duty in DUTIES:
                    await _admin_execute(server_url, f'DROP ROLE IF EXISTS "{role_name(name, duty)}"')
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                pass

    if _templates:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(drop_all())
        finally:
            loop.close()


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
    prefix (deleted afterwards), their own data dir (the auditor's signing key and checkpoint files, the
    redaction key: another stack's checkpoints are not this log's), short leader Leases."""
    suffix = uuid.uuid4().hex[:10]
    stack_dir = Path(tempfile.mkdtemp(prefix="rollbook-stack-"))
    settings = Settings(
        data_dir=str(stack_dir),
        api_token_file=str(stack_dir / "api-token"),
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
        shutil.rmtree(stack_dir, ignore_errors=True)
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
    running = Stack(stack_settings, tmp_path, cwd=REPO_ROOT)
    try:
        async with running:
            yield running
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for proc in [*running.exited]:
                sys.stderr.write(f"\n----- {proc.name} log (tail) -----\n{running.tail(proc.name)}\n")


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def module_simcluster() -> AsyncIterator[SimCluster]:
    """A simcluster (zero delays) for a whole test module: its tests work in namespaces of their own."""
    async with SimCluster(SimConfig()) as sim:
        yield sim


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def module_stack(
    server_urls: ServerUrls, module_simcluster: SimCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    async with e2e_database(server_urls.database_url) as database_url:
        async with settings_for_stack(
            database_url, server_urls.nats_url, str(module_simcluster.kubeconfig_path)
        ) as settings:
            async with Stack(settings, tmp_path_factory.mktemp("stack"), cwd=REPO_ROOT) as running:
                yield running


@pytest_asyncio.fixture(loop_scope="session")
async def shared_stack(module_stack: Stack, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """The module's stack, for one test; the tail of every service's log printed when the test failed."""
    yield module_stack
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        sys.stderr.write(f"\n----- service logs (tails) -----\n{module_stack.tails(lines=40)}\n")


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(module_simcluster: SimCluster) -> AsyncIterator[str]:
    """A namespace of this test's own on the module's simcluster."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    api = await config.new_client_from_config(config_file=str(module_simcluster.kubeconfig_path))
    async with api:
        namespace_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await client.CoreV1Api(api).create_namespace(namespace_object)
    yield name


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
