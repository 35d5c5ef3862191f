"""The CLI as a user meets it when something is wrong: one line naming what and where, a non-zero exit code,
no traceback (unless --debug); --version; help readable at 80 columns; and every command that reads the
store finding the stack `rollbook up` runs instead of failing on its data dir's lock."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
from pathlib import Path

import asyncpg
import nats
import pytest

from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings
from services.simcluster import SimCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = REPO_ROOT / "tests" / "fixtures" / "seed"


def rollbook(*args: str, **env: str) -> tuple[int, str, str]:
    """Run the CLI as a user does; returns (exit code, stdout, stderr). ROLLBOOK_* come only from ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_")}
    environment.update(COLUMNS="80", **env)
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def one_line(stderr: str) -> str:
    """The error line; fails when there is more than that (a traceback, a logged warning)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_version() -> None:
    code, out, _ = rollbook("--version")
    assert code == 0
    assert out.startswith("rollbook ") and out.split()[1][0].isdigit(), out


def test_every_help_fits_80_columns_and_names_its_placeholders() -> None:
    # Every command and group, found from the app itself so a new command is checked too.
    script = "from services.cli.main import command_paths; print(*command_paths(), sep='\\n')"
    listing = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\n")  # fmt: skip
    paths = [p.split() for p in listing if p.strip()]
    assert ["verify"] in paths and ["audit", "verify"] in paths, paths
    for path in [[], *paths]:
        code, out, err = rollbook(*path, "--help")
        assert code == 0, (path, err)
        too_wide = [line for line in out.splitlines() if len(line) > 80]
        assert not too_wide, (path, too_wide)
        for placeholder in ("<bool>", "<str>", "<int>", "<float>", "<path>"):
            assert placeholder not in out, (path, out)
    _, out, _ = rollbook("verify", "--help")
    assert "--decide DECIDE" in out and "TARGET" in out
    _, out, _ = rollbook("watcher", "--help")
    assert "--service" not in out  # `rollbook watcher --service planner` once ran the planner


HEAVY = ("kubernetes_asyncio", "alembic", "sqlalchemy", "nats", "asyncpg", "aiohttp", "pydantic")


@pytest.mark.parametrize(
    "arguments",
    [
        ["--help"],
        ["plan", "-f", str(SEED / "pod-test-pod.yaml")],
        [
            "inject", "-f", str(SEED / "pod-test-pod.yaml"),
            "--sidecarset", str(SEED / "sidecarset-test-sidecarset.yaml"),
        ],
    ],
    ids=["help", "plan", "inject"],
)  # fmt: skip
def test_quick_commands_import_no_heavy_package(arguments: list[str]) -> None:
    """What keeps `--help`, `plan` and `inject` fast (bench/cli_startup.py measures it): a command module
    that imports one of these at its top slows every command down."""
    probe = (
        "import sys\n"
        "from services.cli.main import main\n"
        f"sys.argv = ['rollbook', *{arguments!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY=' + ','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip().splitlines()[-1] == "HEAVY=", result.stdout + result.stderr


def test_a_missing_file_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "state.json"
    code, out, err = rollbook("plan", "-f", str(missing))
    assert code == 1 and out == ""
    assert one_line(err) == f"rollbook: cannot read {missing}: No such file or directory"
    code, _, err = rollbook("--debug", "plan", "-f", str(missing))
    assert code == 1
    assert "Traceback (most recent call last)" in err and "FileNotFoundError" in err
    assert err.strip().splitlines()[-1] == f"rollbook: cannot read {missing}: No such file or directory"
    code, _, err = rollbook("plan", "-f", str(missing), "--debug")  # anywhere on the line
    assert code == 1 and "Traceback" in err


def test_an_unreachable_database_is_named() -> None:
    url = "postgresql://root@127.0.0.1:1/nowhere"  # nothing listens on port 1
    for command in (["verify", "--all"], ["replay", "default/sample"], ["history", "default/sample"]):
        code, _, err = rollbook(*command, ROLLBOOK_DATABASE_URL=url)
        assert code == 1, (command, err)
        assert one_line(err).startswith(f"rollbook: cannot reach Postgres at {url}: "), (command, err)


def test_status_without_a_kubeconfig_says_so(tmp_path: Path) -> None:
    code, _, err = rollbook("status", ROLLBOOK_KUBECONFIG=str(tmp_path / "kubeconfig"))
    assert code == 1
    assert one_line(err) == (
        f"rollbook: no usable kubeconfig: the kubeconfig {tmp_path / 'kubeconfig'} does not exist;"
        " set ROLLBOOK_KUBECONFIG, e.g. to the file `rollbook simcluster` writes"
        " (.rollbook/simcluster/kubeconfig)"
    )


def test_stack_says_when_nothing_runs(tmp_path: Path) -> None:
    code, out, err = rollbook("stack", ROLLBOOK_DATA_DIR=str(tmp_path))
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"rollbook: no running stack on data dir {tmp_path} and no ROLLBOOK_DATABASE_URL /"
        " ROLLBOOK_NATS_URL: start one with `rollbook up`"
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_status_names_a_cloneset_that_does_not_exist(simcluster: SimCluster) -> None:
    code, _, err = await asyncio.to_thread(
        rollbook, "status", "default/nothere", ROLLBOOK_KUBECONFIG=str(simcluster.kubeconfig_path)
    )
    assert code == 1
    assert one_line(err) == "rollbook: CloneSet default/nothere not found"


@pytest.mark.servers
@pytest.mark.asyncio(loop_scope="session")
async def test_commands_find_the_stack_another_process_runs(server_data_dir: Path) -> None:
    """The embedded servers held by this test stand for `rollbook up`: its data dir is locked, and every
    command reads through the servers it runs instead of failing on the lock."""
    data_dir = str(server_data_dir)
    async with EmbeddedServers(Settings(data_dir=data_dir)) as running:
        code, out, err = await asyncio.to_thread(rollbook, "stack", ROLLBOOK_DATA_DIR=data_dir)
        assert code == 0, err
        assert out.splitlines()[:2] == [
            f"postgres  {running.database_url:48} running",
            f"nats      {running.nats_url:48} running",
        ]
        code, out, _ = await asyncio.to_thread(rollbook, "stack", "--postgres", ROLLBOOK_DATA_DIR=data_dir)
        assert code == 0
        connection = await asyncpg.connect(out.strip())  # what psql "$(rollbook stack --postgres)" gets
        try:
            assert await connection.fetchval("SELECT count(*) FROM events") == 0
            assert await connection.fetchval("SELECT current_user") == "rollbook_reader"
        finally:
            await connection.close()
        code, out, _ = await asyncio.to_thread(rollbook, "stack", "--env", ROLLBOOK_DATA_DIR=data_dir)
        assert out.splitlines() == [
            f"export ROLLBOOK_DATABASE_URL={shlex.quote(running.database_url)}",
            f"export ROLLBOOK_DATABASE_READER_URL={shlex.quote(running.database_reader_url)}",
            f"export ROLLBOOK_NATS_URL={running.nats_url}",
            f"export ROLLBOOK_NATS_CREDENTIALS_DIR={running.nats_credentials_dir}",
        ]
        # The NATS URL works for the operator, with the password file named on stderr, never printed.
        code, out, err = await asyncio.to_thread(rollbook, "stack", "--nats", ROLLBOOK_DATA_DIR=data_dir)
        assert code == 0 and out.strip() == running.nats_url
        operator_file = Path(running.nats_credentials_dir) / "operator"
        password = operator_file.read_text().strip()
        assert str(operator_file) in err and password not in err + out
        operator = await nats.connect(out.strip(), user="operator", password=password, allow_reconnect=False)
        await operator.close()

        expected = {
            ("replay", "default/nothere"): (2, "", "rollbook: no events for workload default/nothere"),
            ("verify", "--all"): (0, "no workloads in the log", ""),
            ("what-if", "default/nothere@nothere-1"): (2, "", None),
            ("audit", "verify"): (0, "OK: 0 events", ""),
            ("history", "default/nothere"): (1, "no rollouts or pod actions recorded", ""),
            ("sidecarset", "verify", "nothere"): (2, "", None),
        }
        for command, (want_code, want_out, want_err) in expected.items():
            code, out, err = await asyncio.to_thread(rollbook, *command, ROLLBOOK_DATA_DIR=data_dir)
            assert "in use" not in err, (command, err)
            assert code == want_code, (command, out, err)
            assert want_out in out, (command, out)
            if want_err is None:
                assert one_line(err).startswith("rollbook: "), (command, err)
            elif want_err:
                assert one_line(err) == want_err, (command, err)
