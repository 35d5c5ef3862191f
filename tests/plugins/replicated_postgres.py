"""Two Postgres servers on 127.0.0.1 with streaming replication, for the failover faults of the chaos bench
(bench/chaos.py): a primary and a standby made from it by pg_basebackup, from the machine's Postgres
binaries (--pg-bin, default /usr/lib/postgresql/15/bin).

    async with ReplicatedPostgres(root) as pair:
        url = pair.url("rollbook")       # both servers, target_session_attrs=read-write
        await pair.set_synchronous(True) # commits wait for the standby (False: asynchronous)
        await pair.fail_over(lag=1.0)    # the standby 1 s behind; SIGKILL the primary, promote the standby
        await pair.rebuild_standby()     # the old primary, made again from the new one, follows it

Every server is started with a parent-death signal and stopped on exit (services/infra/embedded.py's
helpers). Logins are trusted from 127.0.0.1 only: the servers listen there and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType

import asyncpg

from services.infra.embedded import (
    EmbeddedError,
    _as_user,
    _free_port,
    _give_to,
    _postgres_user,
    _spawn,
    _terminate,
    _wait_until,
)


def default_bin() -> Path:
    """The machine's Postgres binaries: version 15's, else the newest installed."""
    preferred = Path("/usr/lib/postgresql/15/bin")
    if preferred.exists():
        return preferred
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name or 0))
    return found[-1] if found else preferred


DEFAULT_BIN = default_bin()
STANDBY_NAME = "standby"  # the application_name every standby connects with (synchronous_standby_names)


class ReplicatedPostgres:
    def __init__(self, root: Path, *, bin_dir: Path = DEFAULT_BIN) -> None:
        if not (bin_dir / "pg_basebackup").exists():
            raise EmbeddedError(f"no Postgres binaries (pg_basebackup) in {bin_dir}: give --pg-bin")
        self.root = root
        self.bin_dir = bin_dir
        self.ports = [_free_port(), _free_port()]
        self.processes: list[subprocess.Popen[bytes] | None] = [None, None]
        self.primary = 0  # which of the two is the primary now
        self.synchronous = False
        self.run_as = _postgres_user()

    def url(self, database: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def server_url(self, index: int, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[index]}/{database}"

    async def __aenter__(self) -> ReplicatedPostgres:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _data(self, index: int) -> Path:
        return self.root / f"pg{index}"

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [str(self.bin_dir / argv[0]), *argv[1:]],
            cwd=self.root,
            capture_output=True,
            **_as_user(self.run_as),
        )
        if done.returncode != 0:
            raise EmbeddedError(f"{argv[0]} failed: {done.stderr.decode(errors='replace')[-2000:]}")

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            _give_to(self.root, self.run_as)
        data = self._data(0)
        await asyncio.to_thread(
            self._run, "initdb", "-D", str(data), "--auth=trust", "--username=postgres", "--no-sync"
        )
        with (data / "pg_hba.conf").open("w") as hba:  # loopback only, replication included
            hba.write("host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")
        await self._start(0)
        await self._make_standby(1, of=0)

    async def _start(self, index: int) -> None:
        log_path = self.root / f"pg{index}.log"
        with log_path.open("ab") as log_file:
            if self.run_as:
                _give_to(log_path, self.run_as)
            self.processes[index] = _spawn(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self._data(index)),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"port={self.ports[index]}",
                    "-c",
                    "unix_socket_directories=",
                    "-c",
                    "wal_level=replica",
                    "-c",
                    "hot_standby=on",
                    "-c",
                    "max_connections=200",
                ],
                log_file,
                signal.SIGINT,
                user=self.run_as,
            )
        process = self.processes[index]
        assert process is not None
        url = self.server_url(index)
        await _wait_until(lambda: _accepts(url), process, f"postgres pg{index}", log_path)

    async def _make_standby(self, index: int, *, of: int) -> None:
        data = self._data(index)
        if data.exists():
            await asyncio.to_thread(shutil.rmtree, data)
        conninfo = f"host=127.0.0.1 port={self.ports[of]} user=postgres application_name={STANDBY_NAME}"
        # --checkpoint=fast: the backup starts with a checkpoint, by default a spread one, which takes
        # checkpoint_completion_target x checkpoint_timeout (4.5 min) once a run has dirtied the buffers.
        backup = ("-d", conninfo, "-D", str(data), "-R", "-X", "stream", "--checkpoint=fast")
        await asyncio.to_thread(self._run, "pg_basebackup", *backup)
        await self._start(index)

    async def _execute(self, index: int, sql: str) -> None:
        connection = await asyncpg.connect(self.server_url(index))
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    async def set_synchronous(self, synchronous: bool) -> None:
        """Commits on the primary wait for the standby's flush (True) or not (False)."""
        names = STANDBY_NAME if synchronous else ""
        await self._execute(self.primary, f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        await self._execute(self.primary, "SELECT pg_reload_conf()")
        self.synchronous = synchronous

    async def fail_over(self, lag: float = 0.0) -> None:
        """SIGKILL the primary and every process of it at once, as a lost machine; promote the standby.
        With ``lag``, the primary's WAL sender is stopped (SIGSTOP) that many seconds before: what the
        primary commits meanwhile never leaves it (asynchronous replication: committed, acknowledged and
        lost; synchronous: the commits wait for the standby, and are never acknowledged). Stopping the
        standby's receiver instead would not do: what the sender already wrote waits in the socket and
        reaches the standby after all."""
        old = self.primary
        new = 1 - old
        sender = None
        if lag > 0:
            connection = await asyncpg.connect(self.server_url(old))
            try:
                sender = await connection.fetchval(
                    "SELECT pid FROM pg_stat_replication WHERE application_name = $1", STANDBY_NAME
                )
            finally:
                await connection.close()
            if sender:
                os.kill(int(sender), signal.SIGSTOP)
            await asyncio.sleep(lag)
        process = self.processes[old]
        assert process is not None
        os.killpg(process.pid, signal.SIGKILL)  # its own session (_spawn): the postmaster and its children
        if lag > 0 and sender:
            # A backend is a session leader of its own, out of the group's reach; stopped, it would never
            # notice its postmaster's death and stay behind for good.
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(sender), signal.SIGKILL)
        await asyncio.to_thread(process.wait)
        self.processes[old] = None
        await asyncio.to_thread(self._run, "pg_ctl", "promote", "-w", "-D", str(self._data(new)))
        self.primary = new
        # Alone, the new primary cannot wait for a standby: asynchronous until one follows it again (what
        # Patroni's non-strict synchronous mode does).
        await self._execute(new, "ALTER SYSTEM RESET synchronous_standby_names")
        await self._execute(new, "SELECT pg_reload_conf()")

    async def rebuild_standby(self) -> None:
        """Make the old primary again, from the new one, as its standby (as the operator does after a
        failover), and restore the replication mode."""
        await self._make_standby(1 - self.primary, of=self.primary)
        if self.synchronous:
            await self.set_synchronous(True)

    async def restart_primary(self, outage: float) -> None:
        """Stop the primary at once (SIGQUIT: no checkpoint, crash recovery at start), start it again after
        ``outage`` seconds: a restart, not a failover (the standby follows it again)."""
        process = self.processes[self.primary]
        assert process is not None
        await _terminate(process, signal.SIGQUIT, f"postgres pg{self.primary}")
        self.processes[self.primary] = None
        await asyncio.sleep(outage)
        await self._start(self.primary)

    async def stop(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None:
                await _terminate(process, signal.SIGINT, f"postgres pg{index}")  # fast shutdown
                self.processes[index] = None


async def _accepts(url: str) -> bool:
    try:
        connection = await asyncpg.connect(url, timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await connection.close()
    return True
