"""The webhook configurations: what registration sends, what `rollbook webhook-config` prints and what
deploy/base/webhook.yaml ships must agree (rules, failure policy, namespace selector)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from services.cli.main import app
from services.webhook import register

DEPLOY = Path(__file__).parents[2] / "deploy" / "base" / "webhook.yaml"
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def without_client_config(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in hook.items() if k != "clientConfig"} for hook in configuration["webhooks"]]


def test_url_config_points_at_the_server_with_the_ca() -> None:
    config = register.mutating_configuration(
        register.url_client_config("https://127.0.0.1:9443/", "/mutate-pod", CA)
    )
    hook = config["webhooks"][0]
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-pod"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == CA
    assert hook["failurePolicy"] == "Ignore" and hook["rules"][0]["operations"] == ["CREATE"]


def test_cli_and_deploy_manifests_match_registration(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CA)
    result = CliRunner().invoke(app, ["webhook-config", "--ca-file", str(ca_file)])
    assert result.exit_code == 0, result.stderr
    printed = {d["kind"]: d for d in yaml.safe_load_all(result.stdout)}
    deployed = {d["kind"]: d for d in yaml.safe_load_all(DEPLOY.read_text())}
    expected = {
        "MutatingWebhookConfiguration": register.mutating_configuration({}, sidecarset_client_config={}),
        "ValidatingWebhookConfiguration": register.validating_configuration({}, cloneset_client_config={}),
    }
    for kind, config in expected.items():
        assert without_client_config(printed[kind]) == without_client_config(config)
        assert without_client_config(deployed[kind]) == without_client_config(config)
        for printed_hook, deployed_hook in zip(
            printed[kind]["webhooks"], deployed[kind]["webhooks"], strict=True
        ):
            assert printed_hook["clientConfig"]["service"] == deployed_hook["clientConfig"]["service"]
            assert base64.b64decode(printed_hook["clientConfig"]["caBundle"]) == CA
