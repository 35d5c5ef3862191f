"""The embedded default: with no URLs, rollbook starts real Postgres and nats-server, migrates, serves, and
leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.infra.bus import Bus
from services.infra.embedded import EmbeddedError, EmbeddedServers
from services.infra.settings import Settings
from services.infra.store import EventStore
from tests.infra.bus_helpers import eventually, paused

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def processes_under(data_dir: Path) -> list[psutil.Process]:
    """Server processes whose command line names the data dir (postgres children name PGDATA too)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(data_dir) in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def tree(pid: int) -> list[int]:
    process = psutil.Process(pid)
    return [pid, *(child.pid for child in process.children(recursive=True))]


async def test_starts_migrates_serves_and_stops_with_no_process_left(server_data_dir: Path) -> None:
    event = paused("CloneSet/default/web", 1)
    servers = EmbeddedServers(Settings(data_dir=str(server_data_dir / "data")))
    settings = await servers.start()
    try:
        assert settings.database_url.startswith("postgresql://") and "127.0.0.1" in settings.database_url
        assert settings.nats_url.startswith("nats://127.0.0.1:")
        pids = [pid for server_pid in servers.pids.values() for pid in tree(server_pid)]
        assert len(pids) > 2  # postmaster, its workers, nats-server

        store = await EventStore.connect(settings.database_url)  # the schema is there: migrations ran
        try:
            assert (await store.append([event], expected_version=0)).appended == 1
            assert [stored.envelope for stored in await store.read_stream("CloneSet/default/web")] == [event]
        finally:
            await store.close()

        bus = await Bus.connect(settings)
        try:
            await bus.ensure_stream()
            assert await bus.publish(paused("CloneSet/default/web", 1)) is False
        finally:
            await bus.close()
    finally:
        await servers.stop()

    await eventually(lambda: not any(psutil.pid_exists(pid) for pid in pids), within=10, what="all exited")

    # Data dir reuse: the same directory starts again and still holds what was written.
    async with EmbeddedServers(Settings(data_dir=str(server_data_dir / "data"))) as again:
        store = await EventStore.connect(again.database_url)
        try:
            assert [stored.envelope for stored in await store.read_stream("CloneSet/default/web")] == [event]
        finally:
            await store.close()
    assert processes_under(server_data_dir) == []


async def test_a_second_process_cannot_take_a_data_dir_in_use(server_data_dir: Path) -> None:
    async with EmbeddedServers(
        Settings(data_dir=str(server_data_dir), nats_url="nats://unused:4222"), migrate=False
    ):
        with pytest.raises(EmbeddedError, match="in use by pid"):
            await EmbeddedServers(Settings(data_dir=str(server_data_dir))).start()


def test_servers_of_a_killed_run_go_away_and_the_next_run_starts(server_data_dir: Path) -> None:
    """kill -9 of the rollbook process must not leave servers running, nor block the next start."""
    script = (
        "import asyncio, sys\n"
        "from services.infra.embedded import EmbeddedServers\n"
        "from services.infra.settings import Settings\n"
        "async def main():\n"
        f"    s = EmbeddedServers(Settings(data_dir={str(server_data_dir)!r}), migrate=False)\n"
        "    await s.start()\n"
        "    print(' '.join(str(p) for p in s.pids.values()), flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert child.stdout is not None
        server_pids = [int(p) for p in child.stdout.readline().split()]
        assert len(server_pids) == 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) for p in server_pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in server_pids if psutil.pid_exists(p)] == []
    assert (server_data_dir / "embedded.lock").exists()  # stale files are left behind ...

    # ... and do not stop the next run.
    rerun = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "selfcheck"],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            "ROLLBOOK_DATA_DIR": str(server_data_dir),
            "ROLLBOOK_DATABASE_URL": "",
            "ROLLBOOK_NATS_URL": "",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "selfcheck passed" in rerun.stdout
    assert processes_under(server_data_dir) == []
