"""docker-compose.yml and the Dockerfile: every command is one the image can run, and the services run
exactly as `rollbook up` runs them. No Docker engine runs on CI machines, so the file is checked here, and
with `docker-compose config` when that binary is installed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pytest
import yaml
from typer.testing import CliRunner

from services.cli.main import app
from services.cli.services import SERVICES
from services.infra.bus import nats_servers
from services.infra.runtime import PORT_OFFSETS
from services.infra.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
NATS_NODES = ("nats-1", "nats-2", "nats-3")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def assert_real_rollbook_command(argv: list[str]) -> None:
    """``argv`` names a registered subcommand whose options parse: the CLI is run with ``--help`` appended,
    which parses every option name first (an unknown one fails) and then only prints help."""
    assert argv[0] == "rollbook", argv
    result = CliRunner().invoke(app, [*argv[1:], "--help"])
    assert result.exit_code == 0, f"`{' '.join(argv)}` is not a valid rollbook command:\n{result.output}"


def test_every_command_in_the_compose_file_is_a_real_command() -> None:
    services = compose()["services"]
    ours = {name: s for name, s in services.items() if s.get("image", "").startswith("rollbook")}
    assert set(ours) == {"migrate", "simcluster", *SERVICES}
    for name, service in ours.items():
        argv = service["command"]
        if name == "migrate":
            assert argv == ["alembic", "upgrade", "head"]
            assert (ROOT / "alembic.ini").exists()
        else:
            assert_real_rollbook_command(argv)


def test_a_bad_command_would_be_caught() -> None:
    with pytest.raises(AssertionError, match="not a valid rollbook command"):
        assert_real_rollbook_command(["rollbook", "wachter"])
    with pytest.raises(AssertionError, match="not a valid rollbook command"):
        assert_real_rollbook_command(["rollbook", "simcluster", "--no-such-option"])


def test_the_four_services_run_as_rollbook_up_runs_them() -> None:
    services = compose()["services"]
    environments = []
    for service in SERVICES:
        spec = services[service]
        assert spec["command"] == ["rollbook", service]
        environments.append(spec["environment"])
        # One network namespace (simcluster's): the per-service port offsets keep the HTTP ports apart.
        assert spec["network_mode"] == "service:simcluster"
        assert spec["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert all(env == environments[0] for env in environments)
    env = {k: str(v) for k, v in environments[0].items()}
    known = {"ROLLBOOK_" + f.name.upper() for f in msgspec.structs.fields(Settings)}
    assert set(env) <= known, f"unknown settings: {set(env) - known}"
    settings = Settings.from_env(env)
    assert settings.database_url.startswith("postgresql://") and "@postgres:" in settings.database_url
    assert nats_servers(settings.nats_url) == [f"nats://{node}:4222" for node in NATS_NODES]
    assert settings.bus_replicas == len(NATS_NODES) == 3
    ports = {settings.http_port + PORT_OFFSETS[s] for s in SERVICES}
    published = services["simcluster"]["ports"][0]
    assert published.endswith(f":{min(ports)}-{max(ports)}") and len(ports) == 4
    # The migration and simcluster see the same database and kubeconfig as the services; only the
    # migration has the owner's login, and the services write and read with logins of their own.
    assert services["simcluster"]["environment"] == environments[0]
    migrate = dict(services["migrate"]["environment"])
    owner_url = migrate.pop("ROLLBOOK_DATABASE_OWNER_URL")
    assert migrate == environments[0]
    assert "ROLLBOOK_DATABASE_OWNER_URL" not in env
    logins = {
        urlsplit(url).username for url in (owner_url, settings.database_url, settings.url_for("reader"))
    }
    assert logins == {"rollbook", "rollbook_writer", "rollbook_reader"}
    simcluster_argv = services["simcluster"]["command"]
    assert simcluster_argv[simcluster_argv.index("--kubeconfig") + 1] == settings.kubeconfig


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_nats_runs_a_three_node_jetstream_cluster_with_its_data_on_volumes() -> None:
    services = compose()["services"]
    names, stores = set(), set()
    for node in NATS_NODES:
        spec = services[node]
        argv = spec["command"]
        assert "--jetstream" in argv
        store = option(argv, "--store_dir")
        volume = next(v for v in spec["volumes"] if v.endswith(":" + store))
        stores.add(volume.split(":")[0])
        names.add(option(argv, "--server_name"))
        assert option(argv, "--cluster_name") == "rollbook"
        assert option(argv, "--cluster").endswith(":6222")
        routes = set(option(argv, "--routes").split(","))
        assert routes == {f"nats://{other}:6222" for other in NATS_NODES}  # every node knows every node
        assert "js-enabled-only=true" in " ".join(spec["healthcheck"]["test"])
    assert names == set(NATS_NODES) and len(stores) == 3  # one identity and one volume each
    assert not any(name == "nats" for name in services)
    for service in SERVICES:
        assert set(NATS_NODES) <= set(services[service]["depends_on"])


def test_the_image_default_command_is_a_real_command() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    cmd = next(line for line in lines if line.startswith("CMD "))
    assert_real_rollbook_command(yaml.safe_load(cmd[len("CMD ") :]))
    for line in lines:
        if line.startswith("COPY "):
            for source in shlex.split(line)[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"


def test_docker_compose_config_accepts_the_file() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        if os.environ.get("ROLLBOOK_CI"):
            pytest.fail("docker-compose is missing in CI: .ci/run installs Debian's docker-compose package")
        pytest.skip("docker-compose is not installed (Debian's docker-compose package provides it)")
    result = subprocess.run(
        [binary, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
