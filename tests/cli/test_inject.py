"""`rollbook inject`: the webhook's answer, applied, printed as JSON or YAML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from services.cli.main import app
from services.model import sidecarset as ss

SEED = Path(__file__).parents[1] / "fixtures" / "seed"
POD = str(SEED / "pod-test-pod.yaml")
SIDECARSET = str(SEED / "sidecarset-test-sidecarset.yaml")
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["inject", *args, "--timestamp", "2026-11-30T12:00:00"])
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, *documents: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_seed_pod_json_has_tools_then_app() -> None:
    code, out, err = invoke("-f", POD, "--sidecarset", SIDECARSET)
    assert code == 0, err
    pod = json.loads(out)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["tools", "app"]
    assert pod["metadata"]["annotations"][ss.INJECTED_LIST_ANNOTATION] == "test-sidecarset"
    assert ss.INJECTION_ID_ANNOTATION not in pod["metadata"]["annotations"]  # no real admission happened
    hashes = json.loads(pod["metadata"]["annotations"][ss.HASH_ANNOTATION])
    assert hashes["test-sidecarset"]["updateTimestamp"] == "2026-11-30T12:00:00Z"


def test_yaml_output_and_patch_output_agree() -> None:
    _, yaml_out, _ = invoke("-f", POD, "--sidecarset", SIDECARSET, "-o", "yaml")
    _, patch_out, _ = invoke("-f", POD, "--sidecarset", SIDECARSET, "-o", "patch")
    original = yaml.safe_load(Path(POD).read_text())
    assert ss.apply_patch(original, json.loads(patch_out)) == yaml.safe_load(yaml_out)


def test_other_namespace_is_left_alone() -> None:
    code, out, _ = invoke("-f", POD, "--sidecarset", SIDECARSET, "--namespace", "prod")
    assert code == 0
    assert json.loads(out) == yaml.safe_load(Path(POD).read_text())


def test_workload_pod_template_is_injected(tmp_path: Path) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]},
    }
    code, out, err = invoke(
        "-f", write(tmp_path, "app.yaml", deployment, service), "--sidecarset", SIDECARSET, "-o", "yaml"
    )
    assert code == 0, err
    injected_deployment, unchanged_service = list(yaml.safe_load_all(out))
    assert [c["name"] for c in injected_deployment["spec"]["template"]["spec"]["containers"]] == [
        "tools",
        "web",
    ]
    assert unchanged_service == service


def test_conflicting_sidecarsets_are_refused_naming_both(tmp_path: Path) -> None:
    clash = yaml.safe_load(Path(SIDECARSET).read_text())
    clash["metadata"]["name"] = "more-tools"
    code, _, err = invoke(
        "-f", POD, "--sidecarset", SIDECARSET, "--sidecarset", write(tmp_path, "clash.yaml", clash)
    )
    assert code == 2
    assert "'more-tools'" in err and "'test-sidecarset'" in err and "'tools'" in err


def test_invalid_sidecarset_names_file_and_field(tmp_path: Path) -> None:
    bad = yaml.safe_load(Path(SIDECARSET).read_text())
    bad["spec"]["containers"][0]["shareVolumePolicy"]["type"] = "sometimes"
    path = write(tmp_path, "bad.yaml", bad)
    code, _, err = invoke("-f", POD, "--sidecarset", path)
    assert code == 2 and path in err and "spec.containers[0].shareVolumePolicy.type" in err


def test_a_pod_the_webhook_would_refuse_is_a_one_line_error(tmp_path: Path) -> None:
    sized = yaml.safe_load(Path(SIDECARSET).read_text())
    sized["spec"]["containers"][0].pop("resources", None)  # a resourcesPolicy replaces them
    sized["spec"]["containers"][0]["resourcesPolicy"] = {
        "targetContainersMode": "sum",
        "targetContainersNameRegex": "^worker$",
        "resourcesExpr": {"requests": {"cpu": "cpu"}},
    }
    code, out, err = invoke("-f", POD, "--sidecarset", write(tmp_path, "sized.yaml", sized))
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "no containers match the regex pattern '^worker$'" in err
