"""`rollbook up` tells the truth: a missing kubeconfig or server stops it at once with one `rollbook:` line
(no restart loop), a child that cannot run is not restarted, one that keeps crashing is restarted less and
less often with its last log lines shown, a second `up` on one data dir is a `rollbook:` error, a port in
use is named as such, and `stack --wait` waits for the services, not only the servers."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path

import msgspec
import pytest

from services.cli.errors import describe, is_configuration_error
from services.cli.up_summary import UpState, running_up
from services.infra.settings import Settings
from services.infra.supervisor import ServiceCannotRun, Supervisor, backoff_delay

REPO_ROOT = Path(__file__).resolve().parents[2]


def rollbook(*args: str, timeout: float = 60, **env: str) -> tuple[int, str, str]:
    import subprocess

    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kubeconfig_to(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return path


def test_up_without_a_kubeconfig_stops_at_once_with_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    code, out, err = rollbook(
        "up", ROLLBOOK_KUBECONFIG=str(tmp_path / "missing"), ROLLBOOK_DATA_DIR=str(tmp_path / "data")
    )
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"rollbook: no usable kubeconfig: the kubeconfig {tmp_path / 'missing'} does not exist; set"
        " ROLLBOOK_KUBECONFIG, e.g. to the file `rollbook simcluster` writes"
        " (.rollbook/simcluster/kubeconfig)"
    ]
    assert time.monotonic() - started < 30
    assert not (tmp_path / "data" / "logs").exists()  # no service was started (and restarted)


def test_up_with_an_api_server_that_is_not_there_names_it(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    config = kubeconfig_to(tmp_path / "kubeconfig", server)
    code, _, err = rollbook("up", ROLLBOOK_KUBECONFIG=str(config), ROLLBOOK_DATA_DIR=str(tmp_path / "data"))
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"rollbook: cannot reach the Kubernetes API server at {server}: "), err


def test_restarts_back_off_to_a_cap() -> None:
    assert [backoff_delay(n, 1.0, 60.0) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_delay(10_000, 1.0, 60.0) == 60.0


def test_a_port_in_use_is_named_as_such_and_counts_as_configuration() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]

        async def bind() -> None:
            await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)

        with pytest.raises(OSError) as raised:
            asyncio.run(bind())
    message, code = describe(raised.value)
    assert code == 1 and message.startswith("cannot listen: ") and "already in use" in message, message
    assert "another process holds that port" in message and "cannot connect" not in message
    assert is_configuration_error(raised.value)


def test_a_second_up_on_one_data_dir_is_a_rollbook_error(tmp_path: Path) -> None:
    """The refusal was a log line and exit 1; it is now the one `rollbook:` line of every CLI error."""
    import fcntl

    from services.cli.errors import CommandError
    from services.cli.runtime import run_command

    data = tmp_path / "data"
    data.mkdir()
    settings = msgspec.structs.replace(Settings.from_env(), data_dir=str(data), database_url="", nats_url="")

    async def body(_: Settings) -> int:
        raise AssertionError("the command must not run beside another process's embedded servers")

    # Another process holds the data dir, as a running `rollbook up` does through its embedded servers.
    with (data / "embedded.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("pid 4242\n")
        lock.flush()
        with pytest.raises(CommandError, match=f"data dir {data} is in use by pid 4242; stop it"):
            run_command(body, settings=settings)


def test_stack_wait_waits_for_the_services_of_up(tmp_path: Path) -> None:
    """Servers found but `rollbook up`'s services still starting: `stack --wait` keeps waiting, and says
    so when its time is up; once up.json says ready it returns at once with the services' ports."""
    data = tmp_path / "data"
    settings = msgspec.structs.replace(Settings.from_env(), data_dir=str(data))
    state = UpState(settings)
    state.write(ready=False)  # this test process stands for the running `rollbook up`
    urls = {
        "ROLLBOOK_DATABASE_URL": "postgresql://u@127.0.0.1:1/x",
        "ROLLBOOK_NATS_URL": "nats://127.0.0.1:1",
    }
    started = time.monotonic()
    code, out, err = rollbook("stack", "--wait", "2", ROLLBOOK_DATA_DIR=str(data), **urls)
    assert code == 1 and time.monotonic() - started >= 2, (out, err)
    assert f"`rollbook up` (pid {os.getpid()}) on data dir {data}: its services are not ready after 2s" in err
    state.write(ready=True, ports={"watcher": 8080, "planner": 8081})
    assert running_up(data) == {
        "pid": os.getpid(),
        "ready": True,
        "ports": {"watcher": 8080, "planner": 8081},
    }
    code, out, err = rollbook("stack", "--wait", "30", ROLLBOOK_DATA_DIR=str(data), **urls)
    assert code == 0, err
    assert f"services  ready: watcher :8080, planner :8081 (rollbook up, pid {os.getpid()})" in out
    state.remove()
    assert running_up(data) is None
    code, _, err = rollbook("stack", "--wait", "-5", ROLLBOOK_DATA_DIR=str(data), **urls)
    assert code == 2 and err.strip() == "rollbook: --wait must be 0 or more seconds, not -5"


@pytest.mark.servers
@pytest.mark.asyncio(loop_scope="session")
async def test_a_child_that_cannot_run_is_not_restarted(settings: Settings, tmp_path: Path) -> None:
    """A watcher without a usable kubeconfig exits with EXIT_CONFIGURATION; the supervisor stops on it with
    the child's own reason instead of restarting it for ever."""
    missing = tmp_path / "missing-kubeconfig"
    child_settings = msgspec.structs.replace(settings, kubeconfig=str(missing), data_dir=str(tmp_path))
    async with Supervisor(child_settings, tmp_path / "logs") as supervisor:
        await supervisor.spawn("watcher")
        said: list[str] = []
        with pytest.raises(ServiceCannotRun) as raised:
            await asyncio.wait_for(supervisor.keep_running(restart_delay=0.1, say=said.append), 90)
    assert said == []  # never restarted
    assert str(raised.value) == (
        f"watcher cannot run: no usable kubeconfig: the kubeconfig {missing} does not exist; set"
        " ROLLBOOK_KUBECONFIG, e.g. to the file `rollbook simcluster` writes"
        " (.rollbook/simcluster/kubeconfig)"
    )


@pytest.mark.servers
@pytest.mark.asyncio(loop_scope="session")
async def test_a_crashing_child_is_restarted_with_backoff_and_its_last_lines(
    settings: Settings, tmp_path: Path
) -> None:
    """A watcher whose database is not there exits 1 each time (an API server that is not there is
    waited for, not a crash): each exit is said with the log's last lines, and the delays double."""
    child_settings = msgspec.structs.replace(
        settings,
        database_url=f"postgresql://rollbook@127.0.0.1:{closed_port()}/rollbook",
        data_dir=str(tmp_path),
    )
    said: list[str] = []
    async with Supervisor(child_settings, tmp_path / "logs") as supervisor:
        await supervisor.spawn("watcher")
        running = asyncio.create_task(supervisor.keep_running(restart_delay=0.2, say=said.append))
        deadline = time.monotonic() + 30
        try:
            while len(said) < 3:
                assert not running.done(), running
                assert time.monotonic() < deadline, f"three restarts were not said in 30 s: {said}"
                await asyncio.sleep(0.1)
        finally:
            running.cancel()
    delays = [line.split("restarting in ")[1].split("s ")[0] for line in said[:3]]
    assert delays == ["0.2", "0.4", "0.8"]
    assert [f"(failure {n} in a row)" in line for n, line in enumerate(said[:3], 1)] == [True] * 3
    assert all("\n    " in line and "watcher.log:" in line for line in said), said
