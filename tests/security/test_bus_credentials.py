"""The NATS identities' passwords stay secret: files 0600 in a 0700 directory, never printed by the
commands that make or name them, never in nats-server's log."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.infra.nats_auth import IDENTITIES
from tests.security.bus_server import auth_nats


def assert_private(directory: Path) -> list[str]:
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    passwords = []
    for identity in IDENTITIES:
        path = directory / identity
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        passwords.append(path.read_text().strip())
    assert len(set(passwords)) == len(IDENTITIES) and all(len(p) >= 32 for p in passwords)
    return passwords


def test_nats_auth_writes_private_files_and_prints_no_password(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nats-auth", str(tmp_path / "nats"), "--routes", "nats://a:6222"])
    assert result.exit_code == 0, result.output
    passwords = assert_private(tmp_path / "nats")
    config = tmp_path / "nats" / "nats-server.conf"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert not any(password in result.output for password in passwords)
    # Run again: the passwords are kept (a running NATS and the services keep working).
    again = CliRunner().invoke(app, ["nats-auth", str(tmp_path / "nats")])
    assert again.exit_code == 0 and assert_private(tmp_path / "nats") == passwords


@pytest.mark.servers
async def test_the_embedded_server_keeps_its_passwords_private(server_data_dir: Path) -> None:
    async with auth_nats(server_data_dir) as settings:
        passwords = assert_private(Path(settings.nats_credentials_dir))
        assert Path(settings.nats_credentials_dir) == server_data_dir / "nats-credentials"
        assert stat.S_IMODE((server_data_dir / "nats-server.conf").stat().st_mode) == 0o600
    log = (server_data_dir / "nats-server.log").read_text()
    assert "Server is ready" in log
    assert not any(password in log for password in passwords)
