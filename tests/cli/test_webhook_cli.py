"""`rollbook webhook` refuses to start with a clear message when it cannot reach Kubernetes or a
setting is not one it knows."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tests.plugins.servers import ServerUrls


def test_bad_kubeconfig_is_a_clear_error(
    tmp_path: Path, server_urls: ServerUrls, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    monkeypatch.setenv("ROLLBOOK_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("ROLLBOOK_DATABASE_URL", server_urls.database_url)
    monkeypatch.setenv("ROLLBOOK_NATS_URL", server_urls.nats_url)
    monkeypatch.setenv("ROLLBOOK_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["webhook", "--port", "0", "--record", "log"])
    assert result.exit_code == 1
    assert "cannot load the Kubernetes configuration" in result.stderr and str(kubeconfig) in result.stderr


def test_an_unknown_revisions_unavailable_action_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLBOOK_SIDECARSET_REVISIONS_UNAVAILABLE", "ignore")
    result = CliRunner().invoke(app, ["webhook", "--port", "0", "--record", "log"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: ROLLBOOK_SIDECARSET_REVISIONS_UNAVAILABLE must be one of skip, latest, refuse, got 'ignore'"
    )
