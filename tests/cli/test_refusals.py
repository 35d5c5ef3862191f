"""Input that used to be accepted, or refused with a traceback's words, is one `rollbook:` line and a
non-zero exit; piped output is never wrapped; the commands the demo prints can be pasted as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.errors import is_configuration_error
from services.cli.terminal import UNLIMITED_WIDTH, invocation, output_width
from services.infra.settings import Settings, SettingsError
from services.infra.store import EventStore
from services.simcluster import SimCluster
from tests.e2e.cluster import Cluster
from tests.plugins.simcluster import api_client_for

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = REPO_ROOT / "tests" / "fixtures" / "seed"


def run(*args: str, **env: str) -> tuple[int, str, str]:
    """The CLI with its output on a pipe and no COLUMNS, as in `rollbook status | grep` or a CI log."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOOK_") and k != "COLUMNS"}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


def rollbook(*args: str, **env: str) -> tuple[int, str, str]:
    return run("-m", "services.cli.main", *args, **env)


def one_line_error(err: str, starts: str) -> None:
    assert len(err.splitlines()) == 1 and err.startswith(f"rollbook: {starts}"), err


# --- 7: piped output is never wrapped -----------------------------------------------------------------


def test_piped_output_has_no_width_limit() -> None:
    rollout = "default/web@" + "7d595d9546" * 12
    script = (
        "from rich.table import Table\n"
        "from services.cli.terminal import console\n"
        "console().print('  ROLLBOOK_DATA_DIR=/a/' + 'd' * 120 + ' .venv/bin/rollbook history ops/x')\n"
        "table = Table('rollout', 'outcome')\n"
        f"table.add_row({rollout!r}, 'succeeded')\n"
        "console().print(table)\n"
    )
    code, out, err = run("-c", script)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith(" .venv/bin/rollbook history ops/x") and "d" * 120 in lines[0]
    row = next(line for line in lines if rollout in line)  # the id whole, on one row
    assert "succeeded" in row


def test_output_width_rules() -> None:
    assert output_width(True, "50") is None  # a terminal: its own width
    assert output_width(False, None) == UNLIMITED_WIDTH
    assert output_width(False, "") == UNLIMITED_WIDTH
    assert output_width(False, "120") == 120  # asked for
    assert output_width(False, "abc") == UNLIMITED_WIDTH


def test_the_command_to_paste_is_how_rollbook_was_run(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    program = venv_bin / "rollbook"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    # Installed in .venv but not on PATH (the README's install): the path, relative to where we are.
    assert invocation(str(program), str(tmp_path), path="/usr/bin") == ".venv/bin/rollbook"
    assert invocation(".venv/bin/rollbook", str(tmp_path), path="/usr/bin") == ".venv/bin/rollbook"
    # On PATH (an activated venv): the bare name.
    assert invocation(str(program), "/", path=str(venv_bin)) == "rollbook"
    assert invocation("rollbook", str(tmp_path), path=str(venv_bin)) == "rollbook"
    elsewhere = str(tmp_path / "elsewhere")
    assert invocation(str(program), elsewhere, path="/usr/bin") == str(program)  # not under: the full path
    assert invocation("services/cli/main.py", str(tmp_path)).endswith(" -m services.cli.main")


# --- 8: refusals ----------------------------------------------------------------------------------------


def test_negative_timeout_is_refused() -> None:
    for command in (["get", "default/web", "-w"], ["status", "-w"]):
        code, _, err = rollbook(*command, "--timeout", "-5")
        assert code == 2, err
        one_line_error(err, "--timeout must be 0 or more seconds, not -5")


def test_ui_port_out_of_range_is_refused() -> None:
    code, _, err = rollbook("ui", "--port", "99999")
    assert code == 2
    one_line_error(err, "--port must be from 0 to 65535 (0: pick a free one), not 99999")


def test_what_if_refuses_an_unknown_field_and_names_the_known_ones() -> None:
    code, _, err = rollbook("what-if", "default/web@abc", "--set", "bogus=1")
    assert code == 2
    one_line_error(err, "--set 'bogus=1': bogus is not an updateStrategy field; known: type, partition,")
    assert "maxUnavailable" in err and "inPlaceUpdateStrategy" in err


def test_replicas_of_the_wrong_type_is_named_as_such(tmp_path: Path) -> None:
    manifest = tmp_path / "ten.yaml"
    manifest.write_text((SEED / "cloneset-sample.yaml").read_text().replace("replicas: 5", 'replicas: "ten"'))
    code, _, err = rollbook("apply", "-f", str(manifest), ROLLBOOK_KUBECONFIG=str(tmp_path / "unused"))
    assert code == 1
    one_line_error(err, f"{manifest} document 1: spec.replicas must be an integer, not the string 'ten'")


def test_apply_of_a_directory_without_manifests_says_so(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a manifest")
    code, _, err = rollbook("apply", "-f", str(tmp_path), ROLLBOOK_KUBECONFIG=str(tmp_path / "unused"))
    assert code == 1
    one_line_error(err, f"{tmp_path}: a directory with no .yaml, .yml or .json files")


@pytest.mark.asyncio(loop_scope="session")
async def test_apply_of_a_directory_applies_every_manifest_in_it(
    simcluster: SimCluster, tmp_path: Path
) -> None:
    import asyncio

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "a-namespace.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dirns\n")
    (manifests / "b-cloneset.yml").write_text(
        (SEED / "cloneset-sample.yaml").read_text().replace("name: sample", "name: fromdir", 1)
    )
    (manifests / "README.md").write_text("ignored, as kubectl ignores it")
    code, out, err = await asyncio.to_thread(
        rollbook,
        "apply",
        "-f",
        str(manifests),
        "-n",
        "dirns",
        ROLLBOOK_KUBECONFIG=str(simcluster.kubeconfig_path),
    )
    assert code == 0, err
    assert out.splitlines() == ["Namespace dirns created", "CloneSet dirns/fromdir created"]
    async with await api_client_for(simcluster) as api:
        assert (await Cluster(api, namespace="dirns").cloneset("fromdir"))["spec"]["replicas"] == 5


@pytest.mark.asyncio(loop_scope="session")
async def test_sidecarset_verify_of_a_name_never_recorded_fails(
    event_store: EventStore, database_url: str
) -> None:
    import asyncio

    code, out, err = await asyncio.to_thread(
        rollbook, "sidecarset", "verify", "nothere", ROLLBOOK_DATABASE_URL=database_url
    )
    assert code == 2 and "OK" not in out, out
    one_line_error(err, "nothing recorded for SidecarSet nothere")


def test_status_names_a_missing_crd_or_an_unreachable_conversion_webhook() -> None:
    import json

    from services.cli.clonesets import cloneset_read_error
    from services.cli.errors import describe

    def status_body(code: int, message: str) -> str:
        return json.dumps({"kind": "Status", "status": "Failure", "code": code, "message": message})

    gone = status_body(404, 'clonesets.apps.kruise.io "web" not found')
    assert cloneset_read_error(404, gone, "default", "web") == "CloneSet default/web not found"
    no_crd = status_body(404, "the server could not find the requested resource")
    for name in (None, "web"):
        said = cloneset_read_error(404, no_crd, "default", name)
        assert said.startswith(
            "the cluster does not serve CloneSets (apps.kruise.io/v1alpha1): is the CloneSet"
        )
        assert "the server could not find the requested resource" in said
    assert "does not serve CloneSets" in cloneset_read_error(404, "404 page not found\n", None, None)
    webhook = status_body(
        500,
        'conversion webhook for apps.kruise.io/v1beta1, Kind=CloneSet failed: Post "https://rollbook-webhook'
        '.rollbook.svc:443/convert?timeout=30s": dial tcp 10.0.0.9:443: connect: connection refused',
    )
    said = cloneset_read_error(500, webhook, None, None)
    assert said.startswith(
        "the API server cannot convert CloneSets to apps.kruise.io/v1alpha1: their conversion"
    )
    assert "connection refused" in said

    from kubernetes_asyncio.client import ApiException

    error = ApiException(status=500, reason="Internal Server Error")
    error.body = webhook
    message, code = describe(error)  # any other command's answer carries the reason too
    assert code == 1 and message.startswith("the Kubernetes API server answered 500 Internal Server Error: ")
    assert "conversion webhook for apps.kruise.io/v1beta1" in message


@pytest.mark.asyncio(loop_scope="session")
async def test_status_says_a_cloneset_is_paused(
    simcluster: SimCluster, database_url: str, tmp_path: Path
) -> None:
    import asyncio

    manifest = tmp_path / "paused.yaml"
    manifest.write_text(
        (SEED / "cloneset-sample.yaml").read_text().replace("name: sample", "name: held", 1)
        + "  updateStrategy:\n    paused: true\n"
    )
    kubeconfig = str(simcluster.kubeconfig_path)
    code, _, err = await asyncio.to_thread(
        rollbook, "apply", "-f", str(manifest), ROLLBOOK_KUBECONFIG=kubeconfig
    )
    assert code == 0, err
    code, out, err = await asyncio.to_thread(
        rollbook, "status", "default/held", ROLLBOOK_KUBECONFIG=kubeconfig,
        ROLLBOOK_DATABASE_URL=database_url,
    )  # fmt: skip
    assert code == 0, err
    row = next(line for line in out.splitlines() if "default/held" in line)
    assert row.rstrip(" │").endswith("paused"), out


def test_a_setting_out_of_range_is_one_line_not_an_internal_error() -> None:
    code, _, err = rollbook("status", ROLLBOOK_PACE_INTERVAL="50")
    assert code == 1
    one_line_error(err.strip(), "ROLLBOOK_PACE_INTERVAL: expected seconds from 0 to 1, got 50.0")
    code, _, err = rollbook("status", ROLLBOOK_KUBE_API_QPS="abc")
    assert code == 1
    one_line_error(err.strip(), "ROLLBOOK_KUBE_API_QPS: expected a number, got 'abc'")
    # No restart mends it: a supervisor stops rather than start the process again for ever.
    with pytest.raises(SettingsError) as raised:
        Settings(pace_interval=50)
    assert is_configuration_error(raised.value)
